# opplace: `make setup` installs what the build and tests need, `make test`
# runs the whole suite (CI runs exactly this), `make demo` plans a bundled
# model on a bundled cluster.

GO       ?= go
BIN      := bin/opplace
PKGS     := ./...
BENCHTIME ?= 1x

.PHONY: all setup build test bench bench-1m cpu-accuracy lint fmt demo clean

all: build

# Debian packages: Clp and Cbc are the LP and MIP solvers behind m-sct and
# ilp (cgo, found with pkg-config); graphviz renders the DOT views (tests
# check they render); libonnx-testdata is ONNX's conformance suite;
# python3-onnx runs ONNX's checker on annotated models in the tests;
# chromium (headless, as root with --no-sandbox) opens opplace report's HTML
# page in the tests, which check it renders and take a screenshot.
APT_PACKAGES := coinor-libclp-dev coinor-libcbc-dev pkg-config g++ graphviz libonnx-testdata python3-onnx chromium

# ONNX Runtime's CPU library (profile --runtime onnxruntime) comes from the
# npm package onnxruntime-node, pinned; its install script would fetch CUDA
# binaries, which CI does not need, so it is skipped. The tests that run
# models in it are required (OPPLACE_REQUIRE_ONNXRUNTIME), not skipped.
ORT_VERSION := 1.30.0
ORT_DIR     := .cache/onnxruntime-node
ORT_ARCH    := $(shell uname -m | sed -e s/x86_64/x64/ -e s/aarch64/arm64/)
ORT_LIB     := $(abspath $(ORT_DIR))/node_modules/onnxruntime-node/bin/napi-v6/linux/$(ORT_ARCH)/libonnxruntime.so.1

setup:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi
	$(GO) mod download
	@[ -f $(ORT_LIB) ] || { mkdir -p $(ORT_DIR) && cd $(ORT_DIR) && \
		ONNXRUNTIME_NODE_INSTALL=skip npm install --no-save --no-audit --no-fund --ignore-scripts --silent onnxruntime-node@$(ORT_VERSION); }
	@[ -f $(ORT_LIB) ] || { echo "setup: $(ORT_LIB) missing after npm install"; exit 1; }

build:
	$(GO) build -o $(BIN) ./cmd/opplace

# -timeout 30m: the command tests plan real models, about 6 minutes on a
# loaded 2-core machine, close to go test's default limit of 10.
test: build
	OPPLACE_ONNXRUNTIME=$(ORT_LIB) OPPLACE_REQUIRE_ONNXRUNTIME=1 $(GO) test -count=1 -timeout 30m $(PKGS)

# bench runs every benchmark once; pipeline's BenchmarkScale plans
# generated costed graphs of 10^4 and 10^5 ops with m-etf, heft and auto
# through bin/opplace and reports the time and peak RSS of each plan.
# bench-1m runs the scale and import benchmarks on 10^6 ops as well
# (a few minutes, about 2 GB of memory).
bench: build
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) -v $(PKGS)

bench-1m: build
	OPPLACE_BENCH_1M=1 $(GO) test -run '^$$' -bench 'Scale|ImportRate|Decode' -benchtime 1x -v ./pipeline/ ./costed/

# cpu-accuracy times the shared and held-out models in ONNX Runtime at 1
# and 2 threads (6 interleaved repetitions, about 30 minutes on 2 cores)
# and prints opplace's error per model: the table of docs/cpu-accuracy.md.
# Not part of test: it needs a quiet machine and half an hour.
CPUACC_OUT ?= /tmp/cpuacc
cpu-accuracy: setup build
	OPPLACE_ONNXRUNTIME=$(ORT_LIB) $(GO) run ./internal/cpuaccuracy -opplace $(BIN) -out $(CPUACC_OUT) -repeat 6

# staticcheck runs pinned, from the module proxy, with staticcheck.conf's
# checks; go run leaves go.mod alone.
STATICCHECK = honnef.co/go/tools/cmd/staticcheck@v0.8.2

lint:
	$(GO) vet $(PKGS)
	$(GO) run $(STATICCHECK) $(PKGS)
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

fmt:
	gofmt -w $$(git ls-files '*.go' | grep -v '\.pb\.go$$')

demo: setup build
	$(BIN) plan testdata/models/resnet50.onnx --cluster testdata/clusters/4xV100.yaml -o table
	$(BIN) plan testdata/models/gpt2_xl.onnx --cluster testdata/clusters/8xA100-2host.yaml --dim batch=8 --constraints testdata/constraints/gpt2_xl.yaml -o table

clean:
	rm -rf bin
