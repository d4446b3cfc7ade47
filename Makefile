# Framewise's two entry points for a fresh machine:
#   make run    set up .venv and open the window
#   make test   set up .venv and run the test suite
# CI also runs `make test-newest`: the tests that lean on transformers' internals, again in a second
# venv with the newest transformers the pyproject range admits (the other pins kept).
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
NEWEST_VENV ?= .venv-newest
NEWEST_PY := $(NEWEST_VENV)/bin/python
NEWEST_TESTS ?= tests/core/test_engine.py tests/core/test_models.py tests/core/qwen3_vl tests/app/test_cli.py tests/ui

.PHONY: setup run test test-newest gpu-test bundle clean

$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -c constraints.txt -e '.[test]'
	touch $@

setup: $(VENV)/.installed

# constraints.txt without its transformers pin: pip then picks the newest release the range admits.
$(NEWEST_VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(NEWEST_VENV)
	grep -v '^transformers==' constraints.txt > $(NEWEST_VENV)/constraints.txt
	$(NEWEST_PY) -m pip install --quiet -c $(NEWEST_VENV)/constraints.txt -e '.[test]'
	touch $@

run: setup
	$(VENV)/bin/framewise-studio

test: setup
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest

test-newest: $(NEWEST_VENV)/.installed
	$(NEWEST_PY) .ci/newest_in_range.py transformers
	QT_QPA_PLATFORM=offscreen $(NEWEST_PY) -m pytest $(NEWEST_TESTS)

gpu-test: setup
	$(PY) -m pytest -m gpu tests/gpu

bundle: setup
	packaging/build_bundle.sh

clean:
	rm -rf $(VENV) $(NEWEST_VENV) build dist
