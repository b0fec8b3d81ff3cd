# The two commands a new user needs are `make quickstart` and `make test`;
# README.md explains both.
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
GO ?= go

.PHONY: shape all prereqs testbin jaeger test test-oldest test-matrix vet fmt-check quickstart cluster bench bench-report bench-hub image

all: test

# Builds etcd, kube-apiserver, kube-scheduler, kube-controller-manager and
# kwok from the Go module proxy into ~/.cache/spawnkit/testbin/<versions>/
# (once; later runs reuse them) and prints that directory. SPAWNKIT_K8S=1.34
# picks another supported minor (internal/testcluster/versions.txt) for
# testbin, test, quickstart, cluster, bench and bench-report; the default is
# the newest.
testbin:
	@internal/tools/build.sh

# Builds Jaeger v2, the OTLP receiver of the trace tests, from the Go
# module proxy into ~/.cache/spawnkit/tools/jaeger-<version>/ (once) and
# prints the binary's path; the tests find it there or in $SPAWNKIT_JAEGER.
jaeger:
	@internal/tools/jaeger.sh

# Installs, when missing, the Debian and npm packages the JupyterHub tests
# use (`make test` does this first).
prereqs:
	@internal/tools/prereqs.sh

# Everything CI runs: binaries, formatting, vet, and every test with the
# race detector against the simulated cluster. Also builds Jaeger, the
# trace tests' OTLP receiver, into ~/.cache/spawnkit/tools/ (once, like the
# binaries; internal/tools/jaeger.sh). First installs what the
# JupyterHub tests need when it is missing (internal/tools/prereqs.sh says
# what; SPAWNKIT_PREREQS=skip leaves that out).
test:
	@internal/tools/prereqs.sh
	@testbin=$$(internal/tools/build.sh); \
	jaeger=$$(internal/tools/jaeger.sh); \
	$(MAKE) --no-print-directory fmt-check vet; \
	$(GO) run ./internal/shape -check; \
	echo "go test -race ./... (binaries in $$testbin, jaeger $$jaeger)"; \
	CI=true SPAWNKIT_TESTBIN=$$testbin SPAWNKIT_JAEGER=$$jaeger $(GO) test -race -count=1 -timeout 20m ./...

# The hub bench (make bench-hub) is behind a build tag: vetted too, so
# that it keeps building.
vet:
	$(GO) vet ./...
	$(GO) vet -tags hubbench ./examples/jupyterhub

fmt-check:
	@out=$$(gofmt -l $$(git ls-files --cached --others --exclude-standard '*.go' 2>/dev/null || find . -name '*.go')); \
	if [[ -n "$$out" ]]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

# The main job: spawn, poll and stop three servers on a simulated cluster.
quickstart:
	@testbin=$$(internal/tools/build.sh); \
	SPAWNKIT_TESTBIN=$$testbin $(GO) run ./examples/quickstart

# Starts a simulated cluster, reports it ready and keeps it up until Ctrl-C.
cluster:
	@testbin=$$(internal/tools/build.sh); \
	SPAWNKIT_TESTBIN=$$testbin $(GO) run ./examples/devcluster

# The whole suite once per supported Kubernetes minor, then one table:
# minor, the API server release reported, packages passed, skipped tests
# with their reasons (also written to test-matrix.md; each minor's go test -json
# stream is kept in test-matrix-logs/<minor>.json). Builds each minor's
# binaries on first use (minutes each). MINORS=1.32,1.37 runs some.
test-matrix:
	@$(GO) run ./internal/testmatrix -out test-matrix.md -logs test-matrix-logs $(if $(MINORS),-minors $(MINORS))

# The packages whose behaviour depends on the API server, on the oldest
# supported minor (the first row of versions.txt); CI runs this after
# `make test`, which covers the newest.
OLDEST_K8S := $(shell awk '!/^\#/ && NF {print $$1; exit}' internal/testcluster/versions.txt)
SERVER_PACKAGES := ./internal/testcluster ./reflector ./spawner ./manager ./orphan ./cmd/spawnkit-service ./test/e2e/service
test-oldest:
	@$(GO) run ./internal/testmatrix -minors $(OLDEST_K8S) -packages "$(SERVER_PACKAGES)" -out test-oldest.md -logs test-oldest-logs

bench:
	@testbin=$$(internal/tools/build.sh); \
	SPAWNKIT_TESTBIN=$$testbin $(GO) test -run '^$$' -bench . -benchmem ./...

# spawnkit side by side with raw client-go on a simulated cluster: prints a
# table of ratios (min/median/max over repeats) and writes
# bench-report.json. A program, not a test: `make test` never runs it.
# -tracing adds the start and manager rows with tracing on, exporting to
# a Jaeger the program starts (built by internal/tools/jaeger.sh).
bench-report:
	@testbin=$$(internal/tools/build.sh); \
	jaeger=$$(internal/tools/jaeger.sh); \
	SPAWNKIT_TESTBIN=$$testbin SPAWNKIT_JAEGER=$$jaeger $(GO) run ./internal/benchreport -tracing -json bench-report.json

# The same burst of users through a real JupyterHub (Debian's 3.0), once
# with spawnkit and once with the real KubeSpawner 7.1, on one simulated
# cluster, back to back: prints a table side by side per repeat and the
# medians (docs/performance.md, "Through JupyterHub against KubeSpawner").
# KubeSpawner is installed offline from pinned commits of local git
# clones into a venv under spawnkit's cache (internal/tools/kubespawner.sh
# says how and which). USERS (1000), ORDER (alternate, spawnkit-first or
# kubespawner-first) and REPEATS (2) choose the runs; the service runs
# with -concurrent-spawn-limit USERS, as docs/z2jh.md tells an operator,
# and SERVICE_ARGS adds flags to it (e.g. -kube-api-qps 500). Behind the
# hubbench build tag: `make test` never builds it.
USERS ?= 1000
ORDER ?= alternate
REPEATS ?= 2
SERVICE_ARGS ?=
bench-hub:
	@internal/tools/prereqs.sh
	@testbin=$$(internal/tools/build.sh); \
	ks=$$(internal/tools/kubespawner.sh); \
	CI=true SPAWNKIT_TESTBIN=$$testbin SPAWNKIT_KUBESPAWNER_PYTHON=$$ks \
	SPAWNKIT_HUB_BENCH_USERS=$(USERS) SPAWNKIT_HUB_BENCH_ORDER=$(ORDER) SPAWNKIT_HUB_BENCH_REPEATS=$(REPEATS) \
	SPAWNKIT_HUB_BENCH_SERVICE_ARGS="$(SERVICE_ARGS)" \
	$(GO) test -tags hubbench -count=1 -run '^TestHubBench$$' -v -timeout 180m ./examples/jupyterhub

# The service's OCI image, with no container runtime and no registry: only
# the Go module proxy (internal/imagebuild says what is in it). Writes
# build/spawnkit-service/, an OCI layout tagged v<spawner.Version>, and,
# for one platform, build/spawnkit-service.tar, a docker-archive tagged
# $(IMAGE_REPO):v<version>; deploy/README.md, "The image", says how to push
# them. IMAGE_PLATFORMS=linux/amd64,linux/arm64 makes an image index (no
# tarball then). Reproducible: the same commit and Go toolchain give the
# same digest; SOURCE_DATE_EPOCH (default: the commit's time) stamps every
# timestamp, and the revision label is the commit (with -dirty when
# tracked files differ from it).
IMAGE_PLATFORMS ?= linux/amd64
IMAGE_REPO ?= ghcr.io/spawnkit/spawnkit-service
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
IMAGE_REVISION ?= $(shell rev=$$(git rev-parse HEAD 2>/dev/null) && { git diff --quiet HEAD -- 2>/dev/null && echo $$rev || echo $$rev-dirty; })
comma := ,
image:
	@SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) $(GO) run ./internal/imagebuild \
		-platforms $(IMAGE_PLATFORMS) -repo $(IMAGE_REPO) -revision "$(IMAGE_REVISION)" \
		-layout build/spawnkit-service $(if $(findstring $(comma),$(IMAGE_PLATFORMS)),,-tar build/spawnkit-service.tar)

# Lines per package, exported identifiers, files and functions over the
# limits, sleeps in tests: the codebase's shape (docs/shape.md). make test
# fails when a target is missed.
shape:
	@$(GO) run ./internal/shape
