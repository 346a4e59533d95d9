# Set-up and entry points. `make repro` runs the pipeline, `make test` the test suite;
# both create .venv and install the pinned dependencies first (README, "Quick start"; the user
# guide: docs/getting-started.md).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install --disable-pip-version-check -q -c requirements/constraints.txt
FLOWER_VENV := .venv-flower

.PHONY: install install-test repro test test-package test-fast test-flower flower-env bench clean

$(VENV)/.installed: pyproject.toml requirements/constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) -e .
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	$(PIP) -e '.[test,docs]'  # docs: mkdocs, for the strict build of the user guide (tests/test_docs_site.py)
	touch $@

install: $(VENV)/.installed
install-test: $(VENV)/.installed-test

# The stages call `esnfed`: put the venv's bin first on PATH so it works without activation.
# The flower stage (SecAgg+ overhead) runs the Flower apps in .venv-flower.
# The code is byte-compiled first: ~135 commands and their workers import it, and where
# PYTHONDONTWRITEBYTECODE is set each would compile it from source again (~0.1 s per process;
# .dvcignore keeps __pycache__ out of the stages' code hashes).
# check-params first: a params mistake is the schema's one line naming the key, not DVC's missing path.
repro: install $(FLOWER_VENV)/.installed
	$(PY) -m compileall -q esnfed_cli esnfed_core esnfed_stages
	$(VENV)/bin/esnfed check-params
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/dvc repro

# The whole suite: the package's tests and the Flower apps' tests (in their own environment) side
# by side: run one after the other, they left a core idle for much of the Flower suite's time.
# Each suite's output is printed as one block when it ends (--output-sync); make fails if either
# fails.
test: install-test $(FLOWER_VENV)/.installed
	@echo "make test: the package suite and the Flower suite run side by side; each prints when it ends"
	@$(MAKE) --no-print-directory -j2 --output-sync=target test-package test-flower

# Two workers (pytest-xdist), a test file to one worker: its module fixtures are built once.
# The 25 slowest tests close the log: where the suite's time goes.
test-package: install-test
	$(PY) -m pytest -q -n 2 --dist loadfile --durations=25

# The unit tests only: no pipeline, Ray, SIGKILL or DVC runs (markers in pyproject.toml).
test-fast: install-test
	$(PY) -m pytest -q -n 2 --dist loadfile -m "not slow"

# The Flower apps (esnfed_flower/) in their own environment: flwr's pins clash with ours
# (docs/flower-apps.md, "Flower apps"); esnfed_core comes from the source tree. Built by
# `esnfed flower-env`, as a user builds it in an `esnfed init` project.
$(FLOWER_VENV)/.installed: requirements/flower.txt $(VENV)/.installed
	$(VENV)/bin/esnfed flower-env $(FLOWER_VENV)
	touch $@

flower-env: $(FLOWER_VENV)/.installed

test-flower: $(FLOWER_VENV)/.installed
	PYTHONPATH="$(CURDIR)" $(FLOWER_VENV)/bin/python -m pytest -q -p no:cacheprovider --durations=15 tests_flower

bench: install-test
	$(PY) benchmarks/bench_reservoir.py
