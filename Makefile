# `make demo` / `make test` work on a fresh machine: they create .venv and install hypann into it.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
STAMP   = $(VENV)/.installed

.PHONY: setup demo test bench reproduce clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[all]"
	touch $(STAMP)

setup: $(STAMP)

demo: setup
	$(BIN)/hypann demo

test: setup
	$(BIN)/python -m pytest

bench: setup
	$(BIN)/python benchmarks/exact.py

reproduce: setup
	$(BIN)/hypann reproduce

clean:
	rm -rf $(VENV) results .pytest_cache .hypothesis
