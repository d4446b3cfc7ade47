# Framewise's two entry points for a fresh machine:
#   make run    set up .venv and open the window
#   make test   set up .venv and run the test suite
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python

.PHONY: setup run test gpu-test bundle clean

$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -c constraints.txt -e '.[test]'
	touch $@

setup: $(VENV)/.installed

run: setup
	$(VENV)/bin/framewise-studio

test: setup
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest

gpu-test: setup
	$(PY) -m pytest -m gpu tests/gpu

bundle: setup
	packaging/build_bundle.sh

clean:
	rm -rf $(VENV) build dist
