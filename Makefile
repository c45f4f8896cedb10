# bloomgate — build, run, test.
#
#   make run    the embedded default: in-process broker, worker, demo producer,
#               checkpoints in ./.bloomgate (no other infrastructure)
#   make test   installs what the tests need (kcat, librdkafka-dev, chromium,
#               prometheus, versitygw, helm, cyclonedx-gomod; cached)
#               and runs the whole suite with -race
#   make release  the release named by VERSION into dist/: executables,
#               the container image (OCI layout and archive), SBOM, checksums

GO       ?= go
BIN      := bin/bloomgate
# Where .ci/deps.sh keeps the tools it fetches; prometheus and promtool are
# unpacked there (see .ci/deps.sh) and put on PATH for the tests.
TOOLS_DIR := $(or $(BLOOMGATE_TOOLS_DIR),$(HOME)/.cache/bloomgate-tools)
# helm and cyclonedx-gomod are linked into bin/ there.
TOOLS_PATH := $(TOOLS_DIR)/prometheus/usr/bin:$(TOOLS_DIR)/bin:$(PATH)
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -s -w -X github.com/bloomgate/bloomgate/internal/buildinfo.Version=$(VERSION)
TEST_TIMEOUT ?= 40m

# A count, not a duration: with a duration, go1.26's fuzz coordinator can
# fail a target with a bare "context deadline exceeded" at the deadline
# (golang/go#75804, fixed in go1.27); a count never arms that deadline.
# 20000 inputs take ~2-15 s per target on 2 cores.
FUZZTIME ?= 20000x
# package:FuzzTarget pairs run for $(FUZZTIME) each by `make fuzz` (part of `make test`).
FUZZ_TARGETS := \
	./internal/bloom:FuzzDecodeGeneration \
	./internal/bloom:FuzzDecodeLazyGeneration \
	./internal/bloom:FuzzDecodeLog \
	./internal/bloom:FuzzDecodeTable \
	./internal/bloom:FuzzDecodeTableLog \
	./internal/bloom:FuzzDecodeSealedSet \
	./internal/bloom:FuzzTableLayout \
	./internal/checkpoint:FuzzDecodeManifest \
	./internal/config:FuzzConfigFile \
	./internal/config:FuzzParseUnits \
	./internal/fetcher:FuzzDecodeRaw \
	./internal/group:FuzzDecodeSubscription \
	./internal/exact:FuzzDecodeManifest \
	./internal/exact:FuzzParseRun \
	./internal/exact:FuzzValidName \
	./internal/keys:FuzzExtract \
	./internal/keys:FuzzExtractJSON \
	./internal/keys:FuzzLegacyNormalizeURL \
	./internal/keys:FuzzNormalizeURL \
	./internal/keys:FuzzNormalizeURLRules \
	./internal/keys:FuzzRemoveDotSegments

.PHONY: build run test test-short deps bench lint fmt fuzz image release soak clean

build:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/bloomgate

run: build
	./$(BIN) dev

# deps prints nothing useful to humans; test uses its last line (the versitygw path).
deps:
	@.ci/deps.sh

test:
	@vgw=$$(.ci/deps.sh | tail -n 1) && \
	  BLOOMGATE_VERSITYGW="$$vgw" BLOOMGATE_REQUIRE_TOOLS=1 PATH="$(TOOLS_PATH)" \
	  $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...
	@# all 3000 random record sets (300 under the race detector, where lz4's blocks are slow)
	$(GO) test -count=1 -run '^TestDecodeRawAsKafkaGo$$' ./internal/fetcher
	@# go.mod and go.sum say what the code imports, no more, no less (bench/ too)
	$(GO) mod tidy -diff
	cd bench && $(GO) mod tidy -diff
	@# the release module (release/): the image, built by make release for
	@# linux/amd64, opened and run; the Helm chart rendered and decoded
	cd release && $(GO) mod tidy -diff && BLOOMGATE_REQUIRE_TOOLS=1 PATH="$(TOOLS_PATH)" $(GO) test -count=1 -timeout 15m ./...
	@# the containers module (test/containers): the checkpoint suite against
	@# MinIO in a container, skipped without a Docker engine; a module of its
	@# own so that testcontainers (Docker's client, otel, gRPC) stays out of go.sum
	cd test/containers && $(GO) mod tidy -diff && $(GO) test -count=1 -timeout 10m ./...
	@# allocation counts of pooled encoders (sync.Pool drops items under -race)
	$(GO) test -count=1 -run '^TestCompressedReuseAllocations$$' ./internal/producer
	@# gofmt, go vet and staticcheck (pinned) in every module
	@$(MAKE) --no-print-directory lint
	@$(MAKE) --no-print-directory fuzz

# A short run of every fuzz target; a crasher is written to the package's
# testdata/fuzz and becomes a regression case of the normal test run.
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
	  pkg=$${t%%:*}; fn=$${t##*:}; \
	  echo "fuzz $$pkg $$fn ($(FUZZTIME))"; \
	  $(GO) test -run '^$$' -fuzz "^$$fn$$" -fuzztime $(FUZZTIME) $$pkg; \
	done

# Without installing anything: tests that need kcat, librdkafka-dev (and gcc),
# chromium, prometheus or versitygw skip with the reason.
test-short:
	$(GO) test -short -count=1 ./...

# Filter benchmarks (docs/filter.md), then the end-to-end pipeline against a
# kafka-go pass-through pipe (docs/benchmarks.md). Not part of make test.
bench:
	cd bench && $(GO) test -run '^$$' -bench . -benchtime 1x -timeout 60m ./...
	cd bench && $(GO) run ./pipeline -events 1000000 -partitions 8 -duplicates 0.2 -run concurrent -reps 3

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) vet ./...
	cd bench && $(GO) vet ./...
	cd release && $(GO) vet ./...
	cd test/containers && $(GO) vet ./...
	@# staticcheck, pinned by .ci/deps.sh: no finding in any module
	@.ci/deps.sh >/dev/null && export PATH="$(TOOLS_PATH)" && \
	  staticcheck ./... && (cd bench && staticcheck ./...) && \
	  (cd release && staticcheck ./...) && (cd test/containers && staticcheck ./...)

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf bin .bloomgate dist

# The release: VERSION is its one source. The git tag, the executables'
# version (bloomgate version), the image tag and labels and the chart's
# appVersion are v$(VERSION); the chart's version is $(VERSION).
# Executables as the image has them (CGO_ENABLED=0, -trimpath, -tags
# nodev), the image for the linux platforms (release/ociimage: no
# container engine), a CycloneDX SBOM of each executable (read from the
# module list the Go toolchain embeds in it), SHA256SUMS over all of them.
# Reproducible: the same commit gives the same bytes (timestamps are the
# commit's). RELEASE_PLATFORMS and DIST may be narrowed (the release test
# builds linux/amd64 only).
RELEASE_VERSION := $(shell cat VERSION)
RELEASE_TAG := v$(RELEASE_VERSION)
RELEASE_PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
DIST ?= dist
RELEASE_IMAGE ?= ghcr.io/bloomgate/bloomgate
RELEASE_LDFLAGS := -s -w -X github.com/bloomgate/bloomgate/internal/buildinfo.Version=$(RELEASE_TAG)
release:
	@set -e; dist=$(abspath $(DIST)); tag=$(RELEASE_TAG); \
	  cyclonedx=$$(.ci/deps.sh release | tail -n 1); \
	  rev=$$(git rev-parse HEAD)$$(test -z "$$(git status --porcelain)" || echo -dirty); \
	  created=$$(git log -1 --format=%ct); \
	  rm -rf "$$dist"; mkdir -p "$$dist"; bins=""; \
	  for p in $(RELEASE_PLATFORMS); do \
	    os=$${p%/*}; arch=$${p#*/}; out="$$dist/bloomgate-$$tag-$$os-$$arch"; \
	    echo "release: $$out"; \
	    CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -tags nodev -ldflags '$(RELEASE_LDFLAGS)' -o "$$out" ./cmd/bloomgate; \
	    [ "$$os" != linux ] || bins="$$bins -binary $$p=$$out"; \
	    GOPROXY=off "$$cyclonedx" bin -json -licenses -noserial -notimestamp -version "$$tag" -output "$$out.cdx.json" "$$out"; \
	  done; \
	  if [ -n "$$bins" ]; then \
	    echo "release: $$dist/bloomgate-$$tag.oci.tar"; \
	    (cd release && $(GO) run ./cmd/ociimage -version "$$tag" -revision "$$rev" -created "$$created" \
	      -name $(RELEASE_IMAGE) -layout "$$dist/image" -archive "$$dist/bloomgate-$$tag.oci.tar" $$bins); \
	  fi; \
	  (cd "$$dist" && sha256sum bloomgate-* > SHA256SUMS); \
	  echo "release: $$dist/SHA256SUMS"

# Container image (needs a Docker engine).
image:
	docker build -f deployments/Dockerfile --build-arg VERSION=$(VERSION) -t bloomgate:$(VERSION) .

# The chaos test for longer (not in make test): e.g. make soak SOAK_DURATION=1h;
# then 20 consecutive failures of two of the three workers at once, each
# 2-20 s after the group recovered from the previous one, and 5 bursts of 8
# SIGKILLs within 5 s (docs/chaos.md). Each run fails when a recovery misses
# its goal (two of three: committing again within session timeout + 15 s;
# a burst: everything before it committed within 60 s).
# SOAK_FLAGS=-chaos.race runs the broker and workers race-built (much slower).
SOAK_DURATION ?= 15m
SOAK_EVENTS   ?= 3000000
SOAK_KILLS    ?= 150
SOAK_FLAGS    ?=
soak:
	@vgw=$$(.ci/deps.sh | tail -n 1) && \
	  BLOOMGATE_VERSITYGW="$$vgw" BLOOMGATE_REQUIRE_TOOLS=1 \
	  $(GO) test -count=1 -timeout 90m -run TestChaos -v ./test/chaos \
	    -chaos.duration=$(SOAK_DURATION) -chaos.events=$(SOAK_EVENTS) \
	    -chaos.kills=$(SOAK_KILLS) -chaos.drain=10m $(SOAK_FLAGS)
	@vgw=$$(.ci/deps.sh | tail -n 1) && \
	  BLOOMGATE_VERSITYGW="$$vgw" BLOOMGATE_REQUIRE_TOOLS=1 \
	  $(GO) test -count=1 -timeout 40m -run 'TestChaos$$' -v ./test/chaos \
	    -chaos.only=two-of-three -chaos.kills=40 -chaos.duration=600s \
	    -chaos.events=600000 -chaos.drain=5m $(SOAK_FLAGS)
	@vgw=$$(.ci/deps.sh | tail -n 1) && \
	  BLOOMGATE_VERSITYGW="$$vgw" BLOOMGATE_REQUIRE_TOOLS=1 \
	  $(GO) test -count=1 -timeout 40m -run 'TestChaos$$' -v ./test/chaos \
	    -chaos.only=burst -chaos.burst=8 -chaos.kills=40 -chaos.duration=300s \
	    -chaos.events=300000 -chaos.drain=5m $(SOAK_FLAGS)
	@vgw=$$(.ci/deps.sh | tail -n 1) && \
	  BLOOMGATE_VERSITYGW="$$vgw" BLOOMGATE_REQUIRE_TOOLS=1 \
	  $(GO) test -count=1 -timeout 80m -run 'TestChaos$$' -v ./test/chaos \
	    -chaos.exact -chaos.events=13400000 -chaos.duration=600s \
	    -chaos.kills=10 -chaos.drain=20m $(SOAK_FLAGS)
