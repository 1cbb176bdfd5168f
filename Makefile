# geoviz: one command to set up and run the app, one to set up and run the tests.
# PYTHON: the interpreter that creates the virtual environment (3.10+).
# TORCH_SPEC: the torch requirement installed first. The default pins the CPU
# build served locally on the project's machines; a GPU user sets e.g.
# TORCH_SPEC="torch" (CUDA build from PyPI) or installs torch by hand first.
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
PORT ?= 8501
# ADDRESS: the interface `make run` listens on. The default serves this machine only;
# ADDRESS=0.0.0.0 serves every interface (anyone who can reach the port can use the app)
ADDRESS ?= 127.0.0.1
BIN := $(VENV)/bin
# `make run` installs what the app needs; `make test` adds the dev extras (pytest, ruff,
# hypothesis, Playwright, Ray) on top
STAMP := $(VENV)/.geoviz-installed
DEV_STAMP := $(VENV)/.geoviz-dev-installed

.PHONY: run test test-fast install install-dev lint bench clean wheel smoke-install

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# installs the packages after torch: uv when it can be had (it resolved and installed the
# app's ~100 packages in 4 s where pip took 30 s on a fresh clone, issue 26), else pip.
# torch itself goes through pip (TORCH_SPEC): uv does not read the machine's local torch
# wheel, and an importable torch is kept (uv never upgrades a satisfied requirement).
# --compile-bytecode: uv writes no .pyc by default, and where PYTHONDONTWRITEBYTECODE is set
# (as on the project's machines) nothing ever writes them, so every process compiled its
# imports from source: importing umap-learn took 9.3 s instead of 2.5 s and the app's first
# page 4.7 s instead of 2.3 s (issue 26). pip compiles at install by itself.
PKG_INSTALL = $(BIN)/python -m uv pip install --quiet --compile-bytecode --python $(BIN)/python
# geoviz's own modules (an editable install) are compiled before the app starts for the same
# reason; compileall skips files whose .pyc is current
COMPILE_OWN = $(BIN)/python -m compileall -q geoviz pages app.py >/dev/null

# the app: torch first (TORCH_SPEC), then geoviz. UMAP's kernels are not compiled here (35 s
# on 2 cores): the explorer no longer waits for the embedding, and the server's start-up
# prefetch fits the first one in the background, which writes them to numba's disk cache
$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet uv || echo "uv is not available: installing with pip"
	$(PKG_INSTALL) -e . || $(BIN)/python -m pip install --quiet -e .
	touch $(STAMP)

$(DEV_STAMP): $(STAMP)
	$(PKG_INSTALL) -e ".[dev]" || $(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(DEV_STAMP)

install: $(STAMP)

install-dev: $(DEV_STAMP)

run: $(STAMP)
	-$(COMPILE_OWN)
	$(BIN)/geoviz app --address $(ADDRESS) --port $(PORT)

# the whole suite (what CI runs, .ci/run); --durations=30 names the slowest tests
test: $(DEV_STAMP)
	-$(COMPILE_OWN)
	$(BIN)/ruff check .
	$(BIN)/python -m mypy
	$(BIN)/python -m pytest -q --timeout 900 --durations=30

# the fast tier, for every change: the tests marked `fast` (tiny fits only; no browser, no
# training, no Ray, no CLI or app in a subprocess) and the public API's doctests
# (tests/test_doctests.py). Which files are fast, and the slow tests inside them, is declared
# in tests/conftest.py (FAST_FILES, SLOW_TESTS); a fast test over 5 s is named in the summary.
# FAST_THREADS: torch's intra-op threads (OMP_NUM_THREADS). The tier's problems are tiny, and
# on a busy 2-core machine two threads wait on each other: at load 7-8 the tier took 190 s
# (105 s CPU) with the default threads and 93 s (42 s CPU) with one
FAST_THREADS ?= 1
test-fast: $(DEV_STAMP)
	-$(COMPILE_OWN)
	OMP_NUM_THREADS=$(FAST_THREADS) $(BIN)/python -m pytest -q -m fast --timeout 300 --durations=10

lint: $(DEV_STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m mypy
	$(BIN)/ruff format --check .

# the wheel and sdist (the app, pages and assets inside: setup.py), into dist/
wheel: $(DEV_STAMP)
	rm -rf dist
	$(BIN)/python -m build --outdir dist .

# the wheel installed in a fresh environment outside the checkout (WHEEL_VENV), then
# scripts/smoke_install.py from a temporary folder: the wheel holds every run-time file, the
# bundled project (digit box), a colour run (shipped encoder), `geoviz app` in Chromium
WHEEL_VENV ?= $(or $(TMPDIR),/tmp)/geoviz-wheel-venv
smoke-install: wheel
	rm -rf $(WHEEL_VENV)
	$(PYTHON) -m venv $(WHEEL_VENV)
	$(WHEEL_VENV)/bin/python -m pip install --quiet --upgrade pip uv
	$(WHEEL_VENV)/bin/python -m pip install --quiet "$(TORCH_SPEC)"
	$(WHEEL_VENV)/bin/python -m uv pip install --quiet --compile-bytecode --python $(WHEEL_VENV)/bin/python dist/geoviz-*.whl \
		|| $(WHEEL_VENV)/bin/python -m pip install --quiet dist/geoviz-*.whl
	cd $(or $(TMPDIR),/tmp) && $(CURDIR)/$(BIN)/python $(CURDIR)/scripts/smoke_install.py \
		--venv $(WHEEL_VENV) --wheel $(wildcard $(CURDIR)/dist/geoviz-*.whl) --tree $(CURDIR) \
		--out $(CURDIR)/test-output/install

bench: $(DEV_STAMP)
	$(BIN)/python benchmarks/bench_otdd.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache test-output
