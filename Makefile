# The two set-up-and-go commands (README):  make demo   |   make test
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
EXTRA  ?= cpu
TARGET ?= auto
TRIALS ?= 8
# pytest-xdist, one worker a core, tests of one xdist_group on one worker (PYTEST_ARGS= runs them in one process)
PYTEST_ARGS ?= -n auto --dist loadgroup
# EXTRA=gpu: onnxruntime-gpu, and the op library built to serve CUDA bundles too
CMAKE_CUDA := $(if $(filter gpu,$(EXTRA)),--config-settings=cmake.define.FLASHGEMM_WITH_CUDA=ON,)

.PHONY: demo test env clean

# An editable install: Python changes take effect at once; the op library (CMakeLists.txt, flashgemm/ort/csrc) is
# rebuilt by the next make after a change to it.
$(VENV)/.installed: pyproject.toml CMakeLists.txt $(wildcard flashgemm/ort/csrc/*)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[$(EXTRA),test]' $(CMAKE_CUDA)
	touch $@

env: $(VENV)/.installed

# Tune a little, build the bundle, run an ORT session with the op; prints P's error and the time.
demo: env
	$(VENV)/bin/flashgemm-demo --target $(TARGET) --trials $(TRIALS)

# CPU tests everywhere; tests marked gpu run where a GPU is present.
test: env
	$(PY) -m pytest -ra --durations=25 $(PYTEST_ARGS)

clean:
	rm -rf build .pytest_cache
