# ufp4 front door. `make test` and `make demo` set everything up on a fresh Debian/Ubuntu machine.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_ARGS ?=
GEN := $(shell command -v ninja >/dev/null 2>&1 && echo "-G Ninja")

.PHONY: all build setup configure test test-gpu demo bench report gpu-deps gpu clean help

all: build

help:
	@echo "make setup | build | test | test-gpu | demo | bench | report | reproduce-table-N | reproduce-figure-N | gpu-deps | gpu | clean"

setup:
	@bash tools/setup.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) $(GEN) -DCMAKE_BUILD_TYPE=Release $(CMAKE_ARGS)

configure: $(BUILD)/CMakeCache.txt

build: configure
	cmake --build $(BUILD) -j $(JOBS)

test: setup
	@$(MAKE) --no-print-directory build
	cd $(BUILD) && ctest --output-on-failure -j 2

test-gpu: build
	cd $(BUILD) && UFP4_REQUIRE_GPU=1 ctest --output-on-failure -L cuda

demo: setup
	@$(MAKE) --no-print-directory build
	@bash tools/demo.sh $(BUILD)

bench:
	@echo "make bench: not yet available (arrives with the performance issue)"; exit 2

report: build
	$(BUILD)/ufp4 report table1 > /dev/null
	$(BUILD)/ufp4 report table2 > /dev/null
	$(BUILD)/ufp4 report figure8 > /dev/null
	@echo "reports written: reports/table1.md reports/table2.md reports/figure8.md"

reproduce-table-1: build
	$(BUILD)/ufp4 report table1

# SCALE=proxy (one H200 per run; the committed results are reused) or SCALE=ci (CPU, tiny).
SCALE ?= proxy
GPUS ?= $(shell nvidia-smi -L 2>/dev/null | wc -l)

reproduce-table-2: build
	$(BUILD)/ufp4 run --gpus $(GPUS) experiments/table2/$(SCALE).toml
	$(BUILD)/ufp4 report table2 $(if $(filter ci,$(SCALE)),--results build/ci/table2 --out -,)

reproduce-figure-8: build
	$(BUILD)/ufp4 run --gpus $(GPUS) experiments/proxy/dense113m_bf16.toml experiments/proxy/dense113m_e2m1_ref.toml experiments/proxy/dense113m_ufp4.toml experiments/figure8/moe_proxy.toml
	$(BUILD)/ufp4 report figure8

reproduce-%:
	@echo "make reproduce-$*: not yet available (arrives with the experiments issue)"; exit 2

# Offline GPU nodes: download what the node lacks here, unpack and build there.
gpu-deps:
	@bash tools/gpu-deps.sh

gpu:
	@bash tools/gpu-build.sh $(BUILD)

clean:
	rm -rf $(BUILD)
