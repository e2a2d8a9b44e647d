# Two entry points that each set up a fresh machine: `make demo` and `make test`.
# torch is the CPU build 2.13.0 (pinned in pyproject's `train` extra).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
DEMO := build/demo

.PHONY: install demo test lint clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[train,env,dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	rm -rf $(DEMO)
	$(BIN)/rlvr init $(DEMO) --template single-turn
	$(BIN)/rlvr validate --deep $(DEMO)/experiment.rlvr.yaml
	$(BIN)/rlvr lock $(DEMO)/experiment.rlvr.yaml
	$(BIN)/rlvr validate --deep --strict $(DEMO)/experiment.rlvr.yaml contracts/

test: $(STAMP)
	$(BIN)/python -m pytest -n 2 --durations=15

lint: $(STAMP)
	$(BIN)/ruff check rlvr_cli tests benchmarks
	$(BIN)/ruff format --check rlvr_cli tests benchmarks

clean:
	rm -rf $(VENV) build .pytest_cache .hypothesis
