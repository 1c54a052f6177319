# ufp4 front door. `make test` and `make demo` set everything up on a fresh Debian/Ubuntu machine.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_ARGS ?=
GEN := $(shell command -v ninja >/dev/null 2>&1 && echo "-G Ninja")

.PHONY: all build setup configure test test-quick test-gpu check-gpu check-campaigns demo bench reproduce-analysis reproduce-figure-11 reproduce-factorial reproduce-emulation report gpu-deps gpu clean help

all: build

help:
	@echo "make setup | build | test | test-quick | test-gpu | check-gpu | check-campaigns | demo | bench | report | reproduce-table-N | reproduce-figure-N | gpu-deps | gpu | clean"

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

demo: setup configure
	@bash tools/demo.sh $(BUILD)

# Kernel suite + training-step benchmark on this machine's GPU, then the report (reports/bench.md).
BENCH_DIR ?= results/bench
bench: build
	$(BUILD)/ufp4 bench all --out-dir $(BENCH_DIR)
	$(BUILD)/ufp4 report bench --results $(BENCH_DIR) > /dev/null
	@echo "report written: reports/bench.md"

reproduce-figure-11: bench

# Re-renders every report from its inputs (unchanged inputs leave a report byte for byte as it was).
report: build
	@for r in table1 figure8 figure10 table2 factorial table3 emulation analysis figure9 verdicts; do $(BUILD)/ufp4 report $$r --force > /dev/null || exit 1; done
	$(BUILD)/ufp4 report figure9 --campaign experiments/figure9/campaign.toml --force > /dev/null
	@for r in figure10 table2 table3; do $(BUILD)/ufp4 report $$r --archived --force > /dev/null || exit 1; done
	@echo "reports written: reports/{table1,figure8,figure10,table2,factorial,table3,emulation,figure9,verdicts}.md; the archived campaigns' reports/archive/{table2,table3,figure10,analysis,figure9}.md"

reproduce-table-1: build
	$(BUILD)/ufp4 report table1

# SCALE=proxy (GPUs; committed results are reused) or SCALE=ci (CPU, tiny).
SCALE ?= proxy
GPUS ?= $(shell nvidia-smi -L 2>/dev/null | wc -l)
# Targets that train on GPUs stop here, before preparing any data, when there is none.
define need_gpu
	@if [ "$(SCALE)" != ci ] && [ "$(GPUS)" -lt 1 ]; then echo "make $@: SCALE=$(SCALE) trains on GPUs and nvidia-smi lists none here (SCALE=ci runs on the CPU)"; exit 2; fi
endef
# Campaigns archived with the 1,600-step design and not yet re-made at the decisive one (results/archive/README.md).
define archived
	@if [ "$(SCALE)" != ci ]; then echo "make $@: its proxy campaign was archived (results/archive/README.md: it ended inside the fast-descent transition) and is not yet registered at the decisive design; SCALE=ci runs the CI-scale experiment"; exit 2; fi
endef

# Figure 8 at the decisive design: the registered campaign (pilot, seeds by power, the rest), then its report.
F8_CAMPAIGN_proxy := experiments/figure8/campaign.toml
F8_CAMPAIGN_ci := experiments/figure8/campaign_ci.toml
F8_REPORT_proxy := --force
F8_REPORT_ci := --out build/ci/reports/figure8.md
reproduce-figure-8: build
	$(need_gpu)
	$(BUILD)/ufp4 campaign run $(F8_CAMPAIGN_$(SCALE)) $(if $(filter ci,$(SCALE)),,--gpus $(GPUS))
	@mkdir -p build/ci/reports
	$(BUILD)/ufp4 report figure8 --campaign $(F8_CAMPAIGN_$(SCALE)) $(F8_REPORT_$(SCALE)) > /dev/null
	@echo "report written: $(if $(filter ci,$(SCALE)),build/ci/reports/figure8.md,reports/figure8.md)"

# Every committed campaign: its run set complete and verified (CPU), and on a GPU a sample of each
# re-trained and compared bit for bit (`ufp4 campaign check --retrain`).
CAMPAIGNS := experiments/figure8/campaign.toml experiments/figure10/campaign.toml experiments/table2/campaign.toml
check-campaigns: build
	@if [ "$(GPUS)" -lt 1 ]; then echo "make check-campaigns: re-trains runs on a GPU and nvidia-smi lists none here"; exit 2; fi
	@for c in $(CAMPAIGNS); do $(BUILD)/ufp4 campaign check $$c --retrain build/check-campaigns --gpus $(GPUS) || exit 1; done

# A registered campaign on this machine's GPUs (finished runs skipped, partial ones resumed, runs of
# other campaigns read by run id), then its report: $(1) the experiments folder, $(2) the report's name.
define campaign
	@if [ "$(SCALE)" = ci ]; then echo "make $@: a registered campaign runs at proxy scale only (no SCALE=ci experiment)"; exit 2; fi
	@if [ "$(GPUS)" -lt 1 ]; then echo "make $@: the campaign trains on GPUs and nvidia-smi lists none here"; exit 2; fi
	$(BUILD)/ufp4 campaign run experiments/$(1)/campaign.toml --gpus $(GPUS)
	$(BUILD)/ufp4 report $(2) --campaign experiments/$(1)/campaign.toml --force > /dev/null
	@echo "report written: reports/$(2).md"
endef

# The CI-scale experiment of $(1) from its folder (experiments/$(1)/ci.toml), then its report in build/ci/reports.
define ci_experiment
	$(BUILD)/ufp4 run experiments/$(1)/ci.toml
	@mkdir -p build/ci/reports
	$(BUILD)/ufp4 report $(1) --results build/ci/$(1) --out build/ci/reports/$(1).md > /dev/null
	@echo "report written: build/ci/reports/$(1).md"
endef

# Table 2 at the decisive design (registered; run it before the factorial, which reads its runs), or
# SCALE=ci: the CI-scale experiment from a folder.
reproduce-table-2: build
ifeq ($(SCALE),ci)
	$(BUILD)/ufp4 run experiments/table2/ci.toml
	$(BUILD)/ufp4 report table2 --results build/ci/table2 --out -
else
	$(call campaign,table2,table2)
endif

# The grid x RHT-scope factorial and the emulation control (registered campaigns; proxy scale only).
reproduce-factorial: build
	$(call campaign,factorial,factorial)

reproduce-emulation: build
	$(call campaign,emulation,emulation)

# Table 3 at the decisive design (registered), or SCALE=ci: the CI-scale experiment from a folder.
reproduce-table-3: build
ifeq ($(SCALE),ci)
	$(call ci_experiment,table3)
else
	$(call campaign,table3,table3)
endif

# Figure 10: the registered campaign at the decisive design (its bf16 and e2m1_ref runs are Figure 8's,
# read from results/figure8), or SCALE=ci: the CI-scale experiment from a folder.
reproduce-figure-10: build
	$(need_gpu)
ifeq ($(SCALE),ci)
	$(call ci_experiment,figure10)
else
	$(BUILD)/ufp4 campaign run experiments/figure10/campaign.toml --gpus $(GPUS)
	$(BUILD)/ufp4 report figure10 --force > /dev/null
	@echo "report written: reports/figure10.md"
endif

# Figures 2, 4-7, 12 and the mechanism's claims: the shrinkage-bias analysis of operands captured from
# current-corpus runs as they train (tools/reproduce-analysis.sh; SCALE=ci: the CPU form).
reproduce-analysis reproduce-figure-2 reproduce-figure-4 reproduce-figure-5 reproduce-figure-6 reproduce-figure-7 reproduce-figure-12: build
	@bash tools/reproduce-analysis.sh $(BUILD) $(SCALE)

# Figure 9: the MoE ladder at the decisive design (registered campaign: its claims, then the scaling-law
# fit over the same runs and its report), or SCALE=ci: the CI-scale ladder, fit and report.
F9_MANIFESTS_ci := $(sort $(wildcard experiments/figure9/ci/*.toml))
F9_MANIFESTS_paper := $(sort $(wildcard experiments/figure9/paper/*.toml))
reproduce-figure-9: build
ifeq ($(SCALE),ci)
	$(BUILD)/ufp4 run $(F9_MANIFESTS_ci)
	$(BUILD)/ufp4 fit --results build/ci/figure9 --out build/ci/fits/figure9-ci.h5
	@mkdir -p build/ci/reports
	$(BUILD)/ufp4 report figure9 --fits build/ci/fits/figure9-ci.h5 --out build/ci/reports/figure9.md > /dev/null
	@echo "report written: build/ci/reports/figure9.md"
else
	$(call campaign,figure9,figure9)
	@mkdir -p results/fits
	$(BUILD)/ufp4 fit --campaign experiments/figure9/campaign.toml --out results/fits/figure9-ladder.h5
	$(BUILD)/ufp4 report figure9 --fits results/fits/figure9-ladder.h5 --out reports/figure9-fit.md > /dev/null
	@echo "report written: reports/figure9-fit.md"
endif

reproduce-%:
	@echo "make reproduce-$*: no such target (tables 1-3, figures 2, 4-10, 12, factorial, emulation; figure 11 is make bench)"; exit 2

# Offline GPU nodes: download what the node lacks here, unpack and build there.
gpu-deps:
	@bash tools/gpu-deps.sh

gpu:
	@bash tools/gpu-build.sh $(BUILD)

clean:
	rm -rf $(BUILD)
