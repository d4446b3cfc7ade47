# Framewise's two entry points for a fresh machine:
#   make run    set up .venv and open the window
#   make test   set up .venv and run the test suite
# CI also runs `make test-newest`: the tests that lean on transformers' internals, again in a second
# venv with the newest transformers the pyproject range admits (the other pins kept), and
# `make test-oldest`: the whole suite in a third venv with every dependency at the oldest release
# its range admits.
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
NEWEST_VENV ?= .venv-newest
NEWEST_PY := $(NEWEST_VENV)/bin/python
OLDEST_VENV ?= .venv-oldest
OLDEST_PY := $(OLDEST_VENV)/bin/python
NEWEST_TESTS ?= tests/core/test_engine.py tests/core/test_loading.py tests/core/families/qwen3_vl tests/training/test_feature_injection.py tests/app/test_cli.py tests/ui

VLLM_VENV ?= .vllm-venv

.PHONY: setup run test test-newest test-oldest gpu-test bundle clean vllm-venv test-vllm

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

# Each dependency pinned to the oldest release its range admits, but torch: its oldest admitted
# release (2.11) is the GPU machine's, where `make gpu-test` runs; here it keeps its pin.
$(OLDEST_VENV)/.installed: pyproject.toml constraints.txt .ci/lowest_in_range.py $(VENV)/.installed
	$(PYTHON) -m venv $(OLDEST_VENV)
	grep '^torch==' constraints.txt > $(OLDEST_VENV)/constraints.txt
	$(PY) .ci/lowest_in_range.py --keep torch >> $(OLDEST_VENV)/constraints.txt
	$(OLDEST_PY) -m pip install --quiet -c $(OLDEST_VENV)/constraints.txt -e '.[test]'
	touch $@

run: setup
	$(VENV)/bin/framewise-studio

# One worker a core (the tests run torch on one thread each); a test file stays on one worker, so
# its module fixtures are built once.
PARALLEL ?= -n auto --dist loadfile

test: setup
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest $(PARALLEL)

test-oldest: $(OLDEST_VENV)/.installed
	cat $(OLDEST_VENV)/constraints.txt
	QT_QPA_PLATFORM=offscreen $(OLDEST_PY) -m pytest $(PARALLEL)

test-newest: $(NEWEST_VENV)/.installed
	$(NEWEST_PY) .ci/newest_in_range.py transformers
	QT_QPA_PLATFORM=offscreen $(NEWEST_PY) -m pytest $(PARALLEL) $(NEWEST_TESTS)

# A CPU vLLM server's venv (scripts/vllm_server/) and the tests that start it serving the demo model.
vllm-venv:
	bash scripts/vllm_server/setup_venv.sh $(VLLM_VENV)

test-vllm: setup vllm-venv
	QT_QPA_PLATFORM=offscreen FRAMEWISE_VLLM_VENV=$(VLLM_VENV) $(PY) -m pytest -m vllm tests/remote

gpu-test: setup
	$(PY) -m pip install --quiet -c constraints.txt -e '.[test,cuda]'
	$(PY) -m pytest -m gpu tests/gpu

bundle: setup
	packaging/build_bundle.sh

clean:
	rm -rf $(VENV) $(NEWEST_VENV) $(OLDEST_VENV) $(VLLM_VENV) .vllm-run build dist
