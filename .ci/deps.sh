#!/usr/bin/env bash
# Installs what the test suite needs on a fresh machine, pinned, and caches it:
#   - kcat (Debian package; a librdkafka client for end-to-end tests)
#   - versitygw (a real S3-compatible server, built from the Go module proxy)
#   - librdkafka-dev (Debian package; test/mockcluster compiles a launcher of
#     librdkafka's mock cluster against it, with gcc)
#   - prometheus and promtool (Debian package; the alert rules' unit tests and
#     the end-to-end alert test), unpacked into $TOOLS_DIR/prometheus rather
#     than installed: installing the package would start a Prometheus service
#   - helm v4 (built from the Go module proxy; the chart's tests in release/)
#     and cyclonedx-gomod (the SBOM of make release, which the release test
#     runs), linked into $TOOLS_DIR/bin
#   - staticcheck (built from the Go module proxy; make lint, which make test
#     runs), linked into $TOOLS_DIR/bin
# Prints the path of the versitygw binary on its last line.
#
# `deps.sh release` installs only what make release needs (cyclonedx-gomod)
# and prints its path on its last line.
set -euo pipefail

VERSITYGW_VERSION="${VERSITYGW_VERSION:-v1.8.0}"
# helm v4.3.2 brings the k8s.io modules at v0.37.2, the version release/
# decodes the chart with (release/go.mod): change them together.
HELM_VERSION="${HELM_VERSION:-v4.3.2}"
CYCLONEDX_VERSION="${CYCLONEDX_VERSION:-v1.10.0}"
STATICCHECK_VERSION="${STATICCHECK_VERSION:-v0.8.2}"
TOOLS_DIR="${BLOOMGATE_TOOLS_DIR:-$HOME/.cache/bloomgate-tools}"
vgw_dir="$TOOLS_DIR/versitygw-$VERSITYGW_VERSION"

# go_tool NAME VERSION PACKAGE MINUTES: go install PACKAGE@VERSION into
# $TOOLS_DIR/NAME-VERSION once, linked as $TOOLS_DIR/bin/NAME.
go_tool() {
  local dir="$TOOLS_DIR/$1-$2"
  if [ ! -x "$dir/$1" ]; then
    echo "deps: building $1 $2 (about $4, cached in $dir)" >&2
    mkdir -p "$dir"
    GOBIN="$dir" GOFLAGS=-mod=mod go install "$3@$2" >&2
  fi
  mkdir -p "$TOOLS_DIR/bin"
  ln -sfn "$dir/$1" "$TOOLS_DIR/bin/$1"
}

go_tool cyclonedx-gomod "$CYCLONEDX_VERSION" github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod "1 minute"
if [ "${1:-}" = release ]; then
  echo "$TOOLS_DIR/bin/cyclonedx-gomod"
  exit 0
fi
go_tool helm "$HELM_VERSION" helm.sh/helm/v4/cmd/helm "2-3 minutes"
go_tool staticcheck "$STATICCHECK_VERSION" honnef.co/go/tools/cmd/staticcheck "1 minute"

if ! command -v kcat >/dev/null 2>&1; then
  echo "deps: installing kcat (Debian package)" >&2
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq kcat >&2
fi

if [ ! -f /usr/include/librdkafka/rdkafka_mock.h ] || ! command -v gcc >/dev/null 2>&1; then
  echo "deps: installing librdkafka-dev and gcc (Debian packages; librdkafka's mock cluster test)" >&2
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq librdkafka-dev gcc >&2
fi

if ! command -v chromium >/dev/null 2>&1; then
  echo "deps: installing chromium (Debian package; status page test)" >&2
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >&2
fi

prom_dir="$TOOLS_DIR/prometheus"
if ! command -v promtool >/dev/null 2>&1 && [ ! -x "$prom_dir/usr/bin/promtool" ]; then
  echo "deps: fetching prometheus (Debian package, unpacked into $prom_dir; no service is installed)" >&2
  tmp=$(mktemp -d)
  chmod 755 "$tmp" # apt-get download fetches as the _apt user where it can
  if ! (cd "$tmp" && apt-get download -qq prometheus >&2); then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq >&2
    (cd "$tmp" && apt-get download -qq prometheus >&2)
  fi
  mkdir -p "$prom_dir"
  dpkg-deb -x "$tmp"/prometheus_*.deb "$prom_dir"
  rm -rf "$tmp"
fi

if [ ! -x "$vgw_dir/versitygw" ]; then
  echo "deps: building versitygw $VERSITYGW_VERSION (about 2-3 minutes, cached in $vgw_dir)" >&2
  mkdir -p "$vgw_dir"
  GOBIN="$vgw_dir" GOFLAGS=-mod=mod go install "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION" >&2
fi
echo "$vgw_dir/versitygw"
