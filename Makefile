# LatchClaw — every target is a thin wrapper over cargo.
CARGO ?= cargo
DEMO_DIR := $(CURDIR)/target/demo
BIN := target/debug/latchclaw

.PHONY: build test lint bench demo release release-minimal clean-demo install test-real

build:
	$(CARGO) build

# The one test command (README, .ci/run): format, lints, then every test, in
# both builds (README, "Builds and features"): the default one with every
# feature, then the minimal one. They share target/debug: the second
# compiles only latchclaw and the few crates whose features differ.
test: lint
	$(CARGO) test
	$(CARGO) test --no-default-features

lint:
	$(CARGO) fmt --check
	$(CARGO) clippy --all-targets -- -D warnings
	$(CARGO) clippy --no-default-features --all-targets -- -D warnings

# A real local model in the loop (README: real model; not part of `make test`):
# llama-server and a Qwen2.5-Coder GGUF, found or built once into a cache.
REAL_MODEL ?= 1.5b
test-real:
	$(CARGO) test --no-run --test real_model
	LATCHCLAW_REAL_MODEL=$(REAL_MODEL) scripts/real-llm.sh run \
		$(CARGO) test --test real_model -- --ignored --nocapture

# Benchmarks (not timed tests): release binary size, wall time and peak RSS.
bench:
	$(CARGO) bench --bench suite

# End to end on the built-in mock provider, in a throwaway state dir.
demo: build clean-demo
	LATCHCLAW_HOME=$(DEMO_DIR)/state HOME=$(DEMO_DIR)/home $(BIN) init --workspace $(CURDIR)
	LATCHCLAW_HOME=$(DEMO_DIR)/state HOME=$(DEMO_DIR)/home $(BIN) agent -m "What files are in this project?"
	LATCHCLAW_HOME=$(DEMO_DIR)/state HOME=$(DEMO_DIR)/home $(BIN) receipt verify

clean-demo:
	rm -rf $(DEMO_DIR)

release:
	$(CARGO) build --release
	@ls -l target/release/latchclaw

# The minimal CLI (no gateway, service, pdf_extract, line editor or https),
# in its own target dir so it does not replace the default release binary.
release-minimal:
	$(CARGO) build --release --no-default-features --target-dir target/minimal
	@ls -l target/minimal/release/latchclaw

# Installs the binary into cargo's bin directory (~/.cargo/bin).
install:
	$(CARGO) install --locked --path .
