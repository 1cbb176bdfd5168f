# geoviz: one command to set up and run the app, one to set up and run the tests.
# PYTHON: the interpreter that creates the virtual environment (3.10+).
# TORCH_SPEC: the torch requirement installed first. The default pins the CPU
# build served locally on the project's machines; a GPU user sets e.g.
# TORCH_SPEC="torch" (CUDA build from PyPI) or installs torch by hand first.
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
PORT ?= 8501
BIN := $(VENV)/bin
STAMP := $(VENV)/.geoviz-installed

.PHONY: run test install lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/streamlit run app.py --server.port $(PORT) --server.headless true

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q --timeout 900

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_otdd.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache test-output
