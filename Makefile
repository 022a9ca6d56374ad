# The two set-up-and-go commands (README):  make demo   |   make test
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
EXTRA  ?= cpu
TARGET ?= auto
TRIALS ?= 8
# pytest-xdist, one worker a core (PYTEST_ARGS= runs the tests in one process)
PYTEST_ARGS ?= -n auto

.PHONY: demo test env clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[$(EXTRA),test]'
	touch $@

env: $(VENV)/.installed

# Tune a little, build the bundle, run an ORT session with the op; prints P's error and the time.
demo: env
	$(PY) scripts/demo.py --target $(TARGET) --trials $(TRIALS)

# CPU tests everywhere; tests marked gpu run where a GPU is present.
test: env
	$(PY) -m pytest -ra $(PYTEST_ARGS)

clean:
	rm -rf build .pytest_cache
