# Entry points that work on a fresh machine with only Python 3.11:
#   make book    builds the Jupyter Book into _build/html (creating .venv first)
#   make test    runs the whole test suite, the book build included (what CI runs)
#   make clean   removes _build, the caches and .venv (the next make builds a fresh .venv)
# With another python3 on PATH: make book PYTHON=python3.11
PYTHON ?= python3
NEEDED := 3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
LOG := $(VENV)/install.log

.DEFAULT_GOAL := $(STAMP)
.PHONY: book test release clean FORCE

# major.minor of a Python ("" when it is missing or does not start).
version_of = $(shell $(1) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
PYTHON_VERSION := $(call version_of,$(PYTHON))
VENV_VERSION := $(call version_of,$(BIN)/python)

# .venv is made anew (rm -rf first) when it is from another Python (say a failed try with
# 3.12), when .venv/bin/python is missing or broken, or when an install never finished:
# reusing such a .venv fails again however make is run.
NEW_VENV := $(if $(filter $(NEEDED),$(VENV_VERSION)),$(if $(wildcard $(STAMP)),,yes),yes)
ifeq ($(NEW_VENV),yes)
$(STAMP): FORCE
endif

# $(PYTHON) has to be 3.11 when it makes .venv, and when named on the command line (make
# never quietly uses another Python than the one asked for). Refuse in one line, before
# anything is created; `make clean` needs no Python.
ifneq ($(filter-out clean,$(or $(MAKECMDGOALS),$(.DEFAULT_GOAL))),)
ifneq ($(NEW_VENV)$(filter command,$(origin PYTHON)),)
ifneq ($(PYTHON_VERSION),$(NEEDED))
$(error The course needs Python $(NEEDED), and $(PYTHON) is $(or $(PYTHON_VERSION),not a working Python): \
run make $(or $(MAKECMDGOALS),book) PYTHON=python$(NEEDED))
endif
endif
endif

# pip's output (setuptools' editable-install banners among it) goes to $(LOG): the terminal
# gets one line per step, and the end of the log when a step fails.
# One resolve for both packages: the course's torch==2.13.0 pin (a CPU build here) holds for
# the learner package too, whose own requirement (torch>=2.1) would take the newest.
$(STAMP): pyproject.toml learner/pyproject.toml
	@if [ "$(NEW_VENV)" = yes ]; then \
	    rm -rf $(VENV) && \
	    echo "Creating $(VENV) with $(PYTHON) (Python $(PYTHON_VERSION)) ..." && \
	    $(PYTHON) -m venv $(VENV); \
	fi
	@echo "Installing the course and the learner package (log: $(LOG)) ..."
	@if ! { $(BIN)/python -m pip install --upgrade pip && \
	        $(BIN)/python -m pip install -e ./learner -e ".[book,test]"; } > $(LOG) 2>&1; then \
	    tail -n 25 $(LOG) >&2; \
	    echo "pip install failed; the whole log is in $(LOG)" >&2; \
	    exit 1; \
	fi
	@touch $(STAMP)

# What `make book` checks on the book it has just built (a failure fails the build): the
# numbers in the prose (tests/test_page_numbers.py) and the recorded claims
# (tests/test_book_claims.py, on _build/html).
BOOK_CHECKS := tests/test_page_numbers.py tests/test_book_claims.py

# IPYTHONDIR gives the build's kernels _ext/ipython_kernel_config.py (and not the user's
# ~/.ipython); it drops the "Kernel is running over TCP without encryption" notice that
# ipykernel printed for every executed page. Sphinx warnings are untouched: -W still fails.
book: $(STAMP)
	@rm -rf _build
	@mkdir -p _build/ipython/profile_default
	@cp _ext/ipython_kernel_config.py _build/ipython/profile_default/
	@echo "Building the book: jupyter-book build --all -W --keep-going . (a few minutes) ..."
	@start=$$(date +%s); IPYTHONDIR="$(CURDIR)/_build/ipython" PATH="$(CURDIR)/$(BIN):$$PATH" \
	    $(BIN)/jupyter-book build --all -W --keep-going . && \
	    echo "Built in $$(( $$(date +%s) - start )) s."
	@echo "Checking the built pages: every digit of the prose computed or listed, every claim held ..."
	@ATTENTION_BOOK_HTML="$(CURDIR)/_build/html" PATH="$(CURDIR)/$(BIN):$$PATH" \
	    $(BIN)/python -m pytest -q -p no:cacheprovider $(BOOK_CHECKS)
	@echo "The book is in _build/html/index.html"

test: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pytest -n 2 --dist loadgroup

release: $(STAMP)
	$(BIN)/python -m grader release

clean:
	rm -rf _build .pytest_cache .hypothesis .ruff_cache $(VENV)

FORCE:
