#!/usr/bin/env bash
# Installs what the test suite needs on a fresh machine, pinned, and caches it:
#   - kcat (Debian package; a librdkafka client for end-to-end tests)
#   - versitygw (a real S3-compatible server, built from the Go module proxy)
#   - librdkafka-dev (Debian package; test/mockcluster compiles a launcher of
#     librdkafka's mock cluster against it, with gcc)
#   - prometheus and promtool (Debian package; the alert rules' unit tests and
#     the end-to-end alert test), unpacked into $TOOLS_DIR/prometheus rather
#     than installed: installing the package would start a Prometheus service
# Prints the path of the versitygw binary on its last line.
set -euo pipefail

VERSITYGW_VERSION="${VERSITYGW_VERSION:-v1.8.0}"
TOOLS_DIR="${BLOOMGATE_TOOLS_DIR:-$HOME/.cache/bloomgate-tools}"
vgw_dir="$TOOLS_DIR/versitygw-$VERSITYGW_VERSION"

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
