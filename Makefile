# `make demo` / `make test` work on a fresh machine: they create .venv and install hypann into it.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
STAMP   = $(VENV)/.installed

.PHONY: setup demo test test-boundscheck bench reproduce clean

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
	$(MAKE) --no-print-directory test-boundscheck

# The numba-kernel tests (marker `kernels`) once more with every array access bounds-checked.
# NUMBA_BOUNDSCHECK is not part of numba's cache key, so the kernels are compiled afresh into a
# throwaway NUMBA_CACHE_DIR: with the normal cache they would load unchecked, and checked
# code must not land in the normal cache either. About 6 minutes on 2 cores (mostly compilation).
BOUNDSCHECK_CACHE = .numba-boundscheck-cache
test-boundscheck: setup
	rm -rf $(BOUNDSCHECK_CACHE)
	NUMBA_BOUNDSCHECK=1 NUMBA_CACHE_DIR=$(CURDIR)/$(BOUNDSCHECK_CACHE) $(BIN)/python -m pytest -m kernels -x -q -p no:cacheprovider; \
	status=$$?; rm -rf $(BOUNDSCHECK_CACHE); exit $$status

bench: setup
	$(BIN)/python benchmarks/exact.py

reproduce: setup
	$(BIN)/hypann reproduce

clean:
	rm -rf $(VENV) results .pytest_cache .hypothesis $(BOUNDSCHECK_CACHE)
