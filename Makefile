# Two commands matter (see README): `make run` runs the main job, `make test` runs the whole suite.
# Both create .venv and install everything they need on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: run test lint typecheck unit e2e bench compare venv prometheus oracle differential debootstrap kwok pins pin

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test,nvml]'
	touch $@

run: venv
	$(BIN)/kdra simulate --report out/simulate-report.html

# ruff, and the layer table of DESIGN.md (import-linter contracts in pyproject.toml)
lint: venv
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/lint-imports --no-cache

typecheck: venv
	$(BIN)/mypy

# Which upstream build each Kubernetes release is pinned to (kdra.api.versions.BUILDS), checked against the
# Go modules of the control plane and the oracle. `make pin` rewrites those modules after a pin moved.
pins: venv
	$(BIN)/python hack/pin.py --check

pin: venv
	$(BIN)/python hack/pin.py

# The allocator oracle (the real k8s.io/dynamic-resource-allocation per Kubernetes version, tests/oracle):
# built from the Go module proxy on first use into ~/.cache/kdra/oracle (cold: about 4 CPU-minutes for both
# versions, 8-19 min wall on the loaded shared machine; then cached).
oracle:
	tests/oracle/build.sh >/dev/null

# Unit tests in parallel; the Kubernetes-mode tests (marker e2e) run in `make e2e`. The differential test
# against the oracle (tests/differential) is part of them.
unit: venv pins oracle
	$(BIN)/pytest -n 2 -m "not e2e"

# Many more random worlds against the oracle (both versions); disagreements are shrunk into
# tests/scenarios/cases/differential/. `make differential N=100000 SEED=0`.
N ?= 100000
SEED ?= 0
differential: venv oracle
	PYTHONPATH=$(CURDIR)/tests $(BIN)/python -m support.differential --n $(N) --seed $(SEED) --save tests/scenarios/cases/differential --quiet

# Builds kube-apiserver/-controller-manager/-scheduler and etcd of Kubernetes 1.37 (KDRA_K8S_VERSION) and of
# 1.36 (for the differential corpus, E2E_CORPUS_VERSIONS) on first use (hack/k8s/build.sh, cached in
# ~/.cache/kdra/k8s/<version>), starts them on 127.0.0.1 and runs every e2e-marked test (tests/e2e and the
# few elsewhere, e.g. tests/fleets) in parallel lanes: hack/e2e.sh, docs/kubernetes-mode.md. The chart tests
# build helm on first use (hack/helm/build.sh, ~/.cache/kdra/helm) and the image test a Debian root
# filesystem (hack/image/rootfs.sh, ~/.cache/kdra/image), with Debian's debootstrap, installed when missing.
# KWOK (hack/k8s/kwok/build.sh, ~/.cache/kdra/kwok) is the test nodes' kubelet.
E2E_FREE_WORKERS ?= 1
e2e: venv prometheus debootstrap kwok
	BIN=$(BIN) E2E_FREE_WORKERS=$(E2E_FREE_WORKERS) hack/e2e.sh

# KWOK v0.8.0 (the e2e test nodes' kubelet), built once into ~/.cache/kdra/kwok by hack/k8s/kwok/build.sh.
kwok:
	bash hack/k8s/kwok/build.sh >/dev/null

# The exporter's e2e test is scraped by a real Prometheus server (Debian's package), installed when missing.
prometheus:
	@command -v prometheus >/dev/null || { \
		if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq prometheus; \
		else sudo apt-get update -qq && sudo apt-get install -y -qq prometheus; fi; }

debootstrap:
	@command -v debootstrap >/dev/null || { \
		if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq debootstrap; \
		else sudo apt-get update -qq && sudo apt-get install -y -qq debootstrap; fi; }

test: lint typecheck unit e2e

bench: venv
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

# The performance gate: quick benchmarks for BASE (a temporary worktree) and the working tree, interleaved;
# ratios, and a failure on a drop over 10% (benchmarks/compare.py).
BASE ?= main
compare: venv
	$(BIN)/python benchmarks/compare.py $(BASE)
