# ufp4 front door. `make test` and `make demo` set everything up on a fresh Debian/Ubuntu machine.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_ARGS ?=
GEN := $(shell command -v ninja >/dev/null 2>&1 && echo "-G Ninja")

.PHONY: all build setup configure test test-quick test-gpu check-gpu demo bench reproduce-figure-11 report gpu-deps gpu clean help

all: build

help:
	@echo "make setup | build | test | test-quick | test-gpu | check-gpu | demo | bench | report | reproduce-table-N | reproduce-figure-N | gpu-deps | gpu | clean"

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

# While iterating: every entry but the [slow] ones (training, CLI end to end, crash, fuzz, campaigns).
test-quick: build
	cd $(BUILD) && ctest --output-on-failure -j 2 -LE slow

test-gpu: build
	cd $(BUILD) && UFP4_REQUIRE_GPU=1 ctest --output-on-failure -L cuda

# GPU regression: train experiments/gpu/check.toml and compare with the committed reference, bit for
# bit on the GPU model that made it (results/reference/gpu/README.md), within the tolerance elsewhere.
check-gpu: build
	$(BUILD)/ufp4 run --force experiments/gpu/check.toml
	$(BUILD)/ufp4 check build/gpu-check/runs --reference results/reference/gpu --exact

demo: setup
	@$(MAKE) --no-print-directory build
	@bash tools/demo.sh $(BUILD)

# Kernel suite + training-step benchmark on this machine's GPU, then the report (reports/bench.md).
BENCH_DIR ?= results/bench
bench: build
	$(BUILD)/ufp4 bench all --out-dir $(BENCH_DIR)
	$(BUILD)/ufp4 report bench --results $(BENCH_DIR) > /dev/null
	@echo "report written: reports/bench.md"

reproduce-figure-11: bench

report: build
	@for r in table1 table2 table3 figure8 figure10 analysis figure9; do $(BUILD)/ufp4 report $$r > /dev/null || exit 1; done
	@echo "reports written: reports/{table1,table2,table3,figure8,figure10,analysis,figure9}.md"

reproduce-table-1: build
	$(BUILD)/ufp4 report table1

# SCALE=proxy (one H200 per run; the committed results are reused) or SCALE=ci (CPU, tiny).
SCALE ?= proxy
GPUS ?= $(shell nvidia-smi -L 2>/dev/null | wc -l)

# Table 2's full-UFP4 row is the Figure 8 campaign's ufp4 member: at proxy scale both run.
T2_MANIFESTS_proxy := experiments/figure8/proxy_dense.toml experiments/table2/proxy.toml
T2_MANIFESTS_ci := experiments/table2/ci.toml
reproduce-table-2: build
	$(BUILD)/ufp4 run --gpus $(GPUS) --per-gpu 9 $(T2_MANIFESTS_$(SCALE))
	$(BUILD)/ufp4 report table2 $(if $(filter ci,$(SCALE)),--results build/ci/table2 --out -,)

F8_MANIFESTS_proxy := experiments/figure8/proxy_dense.toml experiments/figure8/moe_proxy.toml
F8_MANIFESTS_ci := experiments/figure8/ci.toml
F8_RESULTS_proxy := results/figure8
F8_RESULTS_ci := build/ci/figure8
reproduce-figure-8: build
	$(BUILD)/ufp4 run --gpus $(GPUS) --per-gpu 9 $(F8_MANIFESTS_$(SCALE))
	@mkdir -p $(REPORT_DIR_$(SCALE))
	$(BUILD)/ufp4 report figure8 --results $(F8_RESULTS_$(SCALE)) --out $(REPORT_DIR_$(SCALE))/figure8.md > /dev/null
	@echo "report written: $(REPORT_DIR_$(SCALE))/figure8.md"

# Table 3 (E2M1 one-factor search) and Figure 10 (range-restricted E2M1).
T3_RESULTS_proxy := results/table3
T3_RESULTS_ci := build/ci/table3
F10_RESULTS_proxy := results/figure10 results/figure8
F10_RESULTS_ci := build/ci/figure10
F10_MANIFESTS_proxy := experiments/figure8/proxy_dense.toml experiments/figure10/proxy.toml experiments/figure8/moe_proxy.toml experiments/figure10/moe_proxy.toml
F10_MANIFESTS_ci := experiments/figure10/ci.toml
REPORT_DIR_proxy := reports
REPORT_DIR_ci := build/ci/reports
reproduce-table-3: build
	$(BUILD)/ufp4 run --gpus $(GPUS) --per-gpu 18 experiments/table3/$(SCALE).toml
	@mkdir -p $(REPORT_DIR_$(SCALE))
	$(BUILD)/ufp4 report table3 --results $(T3_RESULTS_$(SCALE)) --out $(REPORT_DIR_$(SCALE))/table3.md > /dev/null
	@echo "report written: $(REPORT_DIR_$(SCALE))/table3.md"

reproduce-figure-10: build
	$(BUILD)/ufp4 run --gpus $(GPUS) --per-gpu 9 $(F10_MANIFESTS_$(SCALE))
	@mkdir -p $(REPORT_DIR_$(SCALE))
	$(BUILD)/ufp4 report figure10 --results $(F10_RESULTS_$(SCALE)) --out $(REPORT_DIR_$(SCALE))/figure10.md > /dev/null
	@echo "report written: $(REPORT_DIR_$(SCALE))/figure10.md"

# Figures 2, 4-7, 12: the shrinkage-bias analysis of operands captured from the dense proxy (one report).
reproduce-figure-2 reproduce-figure-4 reproduce-figure-5 reproduce-figure-6 reproduce-figure-7 reproduce-figure-12: build
	@bash tools/reproduce-analysis.sh $(BUILD) $(SCALE)

# Figure 9: the MoE ladder, scaling-law fits, report. The proxy ladder's middle point is the Figure 8
# MoE proxy (moe-ne2.6m): its manifest runs here too (nothing to do once trained) and the fit reads
# its runs from results/figure8 by name.
F9_MANIFESTS_proxy := $(sort $(wildcard experiments/figure9/proxy/*.toml)) experiments/figure8/moe_proxy.toml
F9_MANIFESTS_ci := $(sort $(wildcard experiments/figure9/ci/*.toml))
F9_MANIFESTS_paper := $(sort $(wildcard experiments/figure9/paper/*.toml))
F9_RESULTS_proxy := results/figure9 results/figure8 --prefix figure9_,figure8_moe
F9_RESULTS_ci := build/ci/figure9
F9_FITS_proxy := results/fits/figure9-proxy.h5
F9_FITS_ci := build/ci/fits/figure9-ci.h5
F9_REPORT_proxy := reports/figure9.md
F9_REPORT_ci := build/ci/reports/figure9.md
reproduce-figure-9: build
	$(BUILD)/ufp4 run --gpus $(GPUS) --per-gpu 12 $(F9_MANIFESTS_$(SCALE))
	$(BUILD)/ufp4 fit --results $(F9_RESULTS_$(SCALE)) --out $(F9_FITS_$(SCALE))
	$(BUILD)/ufp4 report figure9 --fits $(F9_FITS_$(SCALE)) --out $(F9_REPORT_$(SCALE)) > /dev/null
	@echo "report written: $(F9_REPORT_$(SCALE))"

reproduce-%:
	@echo "make reproduce-$*: no such target (tables 1-3, figures 2, 4-10, 12; figure 11 comes with the performance issue)"; exit 2

# Offline GPU nodes: download what the node lacks here, unpack and build there.
gpu-deps:
	@bash tools/gpu-deps.sh

gpu:
	@bash tools/gpu-build.sh $(BUILD)

clean:
	rm -rf $(BUILD)
