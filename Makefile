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

.PHONY: all deps configure build run test clean

all: build

deps:
	@scripts/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD) -G Ninja -DHETPAR_PYTHON=$(VENV)/bin/python >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# The main job (until the default sweep lands): a short real multi-rank run.
run: build
	$(BUILD)/hetpar train workloads/runs/quickstart.toml

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(CTEST_JOBS)

clean:
	rm -rf $(BUILD)
