# The two commands of the README: `make run` and `make test`. Both install what
# is missing first (scripts/install-deps.sh is idempotent), then build.
SHELL := /bin/bash
TORCH_VERSION ?= 2.15.0
VENV ?= $(HOME)/.cache/hetpar/venv-torch-$(TORCH_VERSION)
BUILD ?= build
JOBS ?= $(shell nproc)
CTEST_JOBS ?= 2
export PATH := /usr/local/cuda/bin:$(PATH)
export HETPAR_VENV := $(VENV)
export HETPAR_TORCH_VERSION := $(TORCH_VERSION)

# Building on a GPU node, offline (README "Building on a GPU node, offline"):
#   TORCH_DIR=<site-packages>/torch/share/cmake/Torch  the node's LibTorch instead of the pinned venv
#   BUNDLE=<dir>  the C++ dependencies from scripts/offline-bundle.sh's folder
# Either one skips `deps` (no apt-get, no pip). Use a build directory of its own (BUILD=...).
TORCH_DIR ?=
BUNDLE ?=
TORCH_CMAKE_ARGS = $(if $(TORCH_DIR),-DTorch_DIR=$(abspath $(TORCH_DIR)) -DHETPAR_PYTHON=,-DHETPAR_PYTHON=$(VENV)/bin/python)$(if $(BUNDLE), -DHETPAR_BUNDLE=$(abspath $(BUNDLE)))
CONFIGURE_DEPS = $(if $(TORCH_DIR)$(BUNDLE),,deps)
BUNDLE_OUT ?= hetpar-bundle

SWEEP ?= sweeps/cpu_default.toml
RESULTS ?= results/sweeps/cpu-default

ASAN_BUILD ?= build-asan
# Sanitizer settings of `make test-asan`: every finding is fatal, leaks
# included; tests/sanitizers/*.supp hold suppressions, each with its reason
# (none needed so far).
SANITIZER_ENV := ASAN_OPTIONS=halt_on_error=1:detect_leaks=1:strict_string_checks=1:check_initialization_order=1 \
  LSAN_OPTIONS=suppressions=$(CURDIR)/tests/sanitizers/lsan.supp:print_suppressions=0 \
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:suppressions=$(CURDIR)/tests/sanitizers/ubsan.supp

.PHONY: all deps configure build hetpar run plots paper test test-asan test-torch211 offline-bundle bench-peer clean

all: build

deps:
	@scripts/install-deps.sh

configure: $(CONFIGURE_DEPS)
	@cmake -S . -B $(BUILD) -G Ninja $(TORCH_CMAKE_ARGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# Only the executable: what `make run` needs (the tests take as long again).
hetpar: configure
	@cmake --build $(BUILD) -j $(JOBS) --target hetpar

# The main job: this machine's primitives (hetpar calibrate, ~80 s), then the
# default sweep, measured anew each time (--fresh), each run's step time
# predicted from that profile beside it, and each run's held-out loss after
# its last step compared with its baseline's; it prints its report and where
# its figures and tables are. Three rounds of short runs rather than one of long
# ones: on a shared machine whole runs move (one point's runs 2.5-3.6 s a
# step), so only repeats give the speed-ups an interval (sweep/speedup_noise).
PROFILE ?= results/profile.json
RUN_REPEAT ?= 3
RUN_STEPS ?= 5
run: hetpar
	$(BUILD)/hetpar calibrate --out $(PROFILE)
	$(BUILD)/hetpar sweep $(SWEEP) --out $(RESULTS) --fresh --profile $(PROFILE) --repeat $(RUN_REPEAT) \
	  --set run.steps=$(RUN_STEPS) --set run.eval_every=$(RUN_STEPS)

# Redraw the figures of a results directory.
plots: deps
	$(VENV)/bin/python plots/plot_results.py $(RESULTS)

# The paper's figures by prediction: hetpar plan for Llama-3 8B/70B with three
# encoders on 8 to 1024 GPUs of the H100 profile, plotted beside the paper's
# published results (scripts/paper.sh; a few minutes).
# PAPER_SETTINGS: run-file settings for every plan, e.g. "optim.shard_state=true".
PAPER ?= results/paper
GPU_PROFILE ?= profiles/h100_dgx.json
PAPER_SETTINGS ?=
PAPER_PLAN_FLAGS ?=
paper: hetpar
	scripts/paper.sh $(BUILD)/hetpar $(VENV)/bin/python $(PAPER) $(GPU_PROFILE) "$(PAPER_SETTINGS)" "$(PAPER_PLAN_FLAGS)"

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(CTEST_JOBS)

# The whole suite against the oldest LibTorch hetpar supports (2.11, the one GPU images ship),
# in its own venv and build tree.
test-torch211:
	$(MAKE) test TORCH_VERSION=2.11.0 BUILD=build-torch211

# The C++ dependencies beyond LibTorch in one folder for an offline machine (run where apt works).
offline-bundle:
	scripts/offline-bundle.sh $(BUNDLE_OUT)

# One training step of the same LLaVA in hetpar and in transformers, side by side (bench/peer/README.md).
PEER_OUT ?= results/bench/peer
bench-peer: hetpar
	$(VENV)/bin/python bench/peer/peer_bench.py --rounds 3 --threads 1,2 --hetpar $(BUILD)/hetpar --out $(PEER_OUT)

# The C++ tests with AddressSanitizer + UndefinedBehaviorSanitizer, in their own build tree,
# less two kinds of memory-model test:
# - against measured resident memory: the sanitizer's shadow memory more than doubles a
#   process's own, which is what that test measures;
# - the tensor peaks in bf16, with an fp32 or a bf16 residual stream (17 cases were 650 s
#   of the tests' 3380 s one after the other on the 2-core machine, about 5 of the target's
#   28 minutes): the fp32 cases run the same counting allocator and schedules, and the
#   bf16 training paths of both streams run under the sanitizers in the parity and
#   recompute tests. (ctest names a parametrized case with "  # GetParam() = ..." after it.)
test-asan: deps
	@cmake -S . -B $(ASAN_BUILD) -G Ninja -DHETPAR_PYTHON=$(VENV)/bin/python -DHETPAR_SANITIZE=address,undefined >/dev/null
	@cmake --build $(ASAN_BUILD) -j $(JOBS) --target hetpar test_config test_dist test_gpu bench_boundary bench_step_ops
	cd $(ASAN_BUILD) && $(SANITIZER_ENV) ctest --output-on-failure -j $(CTEST_JOBS) -E '^(hf_llava_interop|plot_results|peer_bench_smoke|MemoryModel.PredictsThePeakResidentMemoryOfRealRuns|MemoryModel/TensorPeak\.[^ ]*_bf16( .*)?|MemoryModelBf16Residual/TensorPeak\..*)$$'

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
