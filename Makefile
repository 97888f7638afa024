# Two entry points that work on a fresh machine with only Python 3.11:
#   make book   builds the Jupyter Book into _build/html (creating .venv first)
#   make test   runs the whole test suite, the book build included (what CI runs)
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: book test release clean

$(STAMP): pyproject.toml learner/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# one resolve for both packages: the course's torch==2.13.0 pin (a CPU build here) holds
	# for the learner package too, whose own requirement (torch>=2.1) would take the newest
	$(BIN)/python -m pip install --quiet -e ./learner -e ".[book,test]"
	touch $(STAMP)

book: $(STAMP)
	rm -rf _build
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/jupyter-book build --all -W --keep-going .
	@echo "The book is in _build/html/index.html"

test: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pytest -n 2 --dist loadgroup

release: $(STAMP)
	$(BIN)/python -m grader release

clean:
	rm -rf _build .pytest_cache .hypothesis
