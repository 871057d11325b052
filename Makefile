# `make demo` / `make test` work on a fresh machine: they create .venv and install hypann into it.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
STAMP   = $(VENV)/.installed

.PHONY: setup demo test test-boundscheck bench reproduce clean clean-numba-cache

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[all]"
	touch $(STAMP)

setup: $(STAMP)

demo: setup
	$(BIN)/hypann demo

# The numba-kernel tests (marker `kernels`) once more with every array access bounds-checked.
# NUMBA_BOUNDSCHECK is not part of numba's cache key, so the kernels are compiled afresh into a
# throwaway NUMBA_CACHE_DIR: with the normal cache they would load unchecked, and checked
# code must not land in the normal cache either. About 6 minutes on 2 cores (mostly compilation).
BOUNDSCHECK_CACHE = .numba-boundscheck-cache
BOUNDSCHECK_LOG   = .boundscheck.log
BOUNDSCHECKED     = NUMBA_BOUNDSCHECK=1 NUMBA_CACHE_DIR=$(CURDIR)/$(BOUNDSCHECK_CACHE) \
                    $(BIN)/python -m pytest -m kernels -x -q -p no:cacheprovider

# `make test`: the whole suite and the bounds-checked pass side by side. Each is mostly one core
# (compiling, single-threaded tests), so on 2 cores this takes about as long as the suite alone.
# The bounds-checked pass's output follows the suite's; either failing fails the target.
test: setup
	@rm -rf $(BOUNDSCHECK_CACHE); \
	$(BOUNDSCHECKED) > $(BOUNDSCHECK_LOG) 2>&1 & checked=$$!; \
	trap 'kill $$checked 2>/dev/null' INT TERM; \
	$(BIN)/python -m pytest; suite=$$?; \
	wait $$checked; bounded=$$?; \
	echo "--- the kernel tests again under NUMBA_BOUNDSCHECK=1 (exit $$bounded) ---"; \
	cat $(BOUNDSCHECK_LOG); rm -rf $(BOUNDSCHECK_CACHE) $(BOUNDSCHECK_LOG); \
	[ $$suite -eq 0 ] && [ $$bounded -eq 0 ]

# the bounds-checked pass alone
test-boundscheck: setup
	rm -rf $(BOUNDSCHECK_CACHE)
	$(BOUNDSCHECKED); status=$$?; rm -rf $(BOUNDSCHECK_CACHE); exit $$status

bench: setup
	$(BIN)/python benchmarks/exact.py

reproduce: setup
	$(BIN)/hypann reproduce

clean: clean-numba-cache
	rm -rf $(VENV) results .pytest_cache .hypothesis $(BOUNDSCHECK_CACHE) $(BOUNDSCHECK_LOG)

# numba's cached kernels (see docs/architecture.md: the cache does not follow helpers inlined from other files)
clean-numba-cache:
	find src -name '*.nbi' -delete -o -name '*.nbc' -delete
