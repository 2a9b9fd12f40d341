# awq2gguf: pinned llama.cpp + our patch series, stock and patched builds side by side.
# `make help` lists the targets.
SHELL := bash
PYTHON ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
STAMPS := .stamps

.PHONY: help vendor patches-apply patches-export patches-reset patched-build stock-build builds \
        arm-build arm-check ik-build setup autoawq autoround run test test-fast clean distclean

help:
	@echo "make run            set up everything, run awq2gguf on SmolLM2-135M, benchmark decode patched vs stock"
	@echo "make test           set up everything and run the test suite"
	@echo "make test-fast      the x86 builds and the tests not marked slow (no ARM, no AutoAWQ, no real-model runs)"
	@echo "make vendor         fetch and verify the pinned llama.cpp into vendor/llama.cpp"
	@echo "make patched-build  apply patches/ and build into build/patched"
	@echo "make stock-build    build the unpatched pin into build/stock"
	@echo "make arm-build      cross-compile stock and patched for aarch64 (SVE with i8mm, and A64FX) into build/arm-*"
	@echo "make arm-check      run the ARM kernel checks under qemu-aarch64 at SVE 128/256/512/1024 bits and as an A64FX"
	@echo "make patches-export regenerate patches/ from vendor/llama.cpp commits on top of base"
	@echo "make patches-reset  drop unexported commits in vendor/llama.cpp and re-apply patches/"
	@echo "make setup          create $(VENV) with torch (local CPU wheel), llama-cpp-python and this package"
	@echo "make autoawq        add AutoAWQ 0.2.9 (awq2gguf --engine autoawq), without its unused triton"
	@echo "make autoround      add Intel's AutoRound 0.16.1, the peer in bench awq --autoround-iters"
	@echo "make ik-build IK_SRC=DIR  build the peer ik_llama.cpp (a clone at vendor/ik-pin.env's commit) into build/ik"

vendor:
	@scripts/vendor.sh

patches-apply: vendor
	@scripts/apply-patches.sh

patches-export:
	@scripts/export-patches.sh

patches-reset: vendor
	@git -C vendor/llama.cpp checkout -q -f awq2gguf && git -C vendor/llama.cpp clean -fdq
	@rm -f vendor/llama.cpp/.git/awq2gguf-series
	@scripts/apply-patches.sh

patched-build: patches-apply
	@scripts/build.sh patched vendor/llama.cpp

stock-build: vendor
	@scripts/build.sh stock vendor/llama.cpp-stock

builds: stock-build patched-build

# The peer, optional: never needed by run or test (bench --builds stock,patched,ik,ik-rtr runs it).
ik-build:
	@test -n "$(IK_SRC)" || { echo "make ik-build: set IK_SRC to a clone of ik_llama.cpp (vendor/ik-pin.env)" >&2; exit 2; }
	@scripts/build-ik.sh "$(IK_SRC)"

# aarch64 cross builds for the QEMU checks: sve (armv8.6-a: i8mm, dotprod) and a64fx (no i8mm/dotprod).
ARM_VARIANTS := sve a64fx
arm-build: patches-apply
	@for v in $(ARM_VARIANTS); do \
	    scripts/build-arm.sh stock vendor/llama.cpp-stock $$v && scripts/build-arm.sh patched vendor/llama.cpp $$v || exit 1; \
	done

arm-check: setup builds arm-build
	$(VPY) -m pytest tests/test_arm.py

# torch first, from the exact local CPU wheel: anything that pulls torch later finds it satisfied.
# llama-cpp-python is installed from the pinned, hash-checked sdist without its own llama.cpp
# build; it loads build/<name>/bin/libllama.so through LLAMA_CPP_LIB_PATH.
$(STAMPS)/setup: pyproject.toml vendor/pin.env | vendor
	@mkdir -p $(STAMPS)
	test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install --quiet --upgrade pip
	$(VPY) -m pip install --quiet torch==2.13.0
	source vendor/pin.env && CMAKE_ARGS="-DLLAMA_BUILD=OFF" $(VPY) -m pip install --quiet \
	    vendor/.cache/llama_cpp_python-$${LLAMA_CPP_PYTHON_VERSION}.tar.gz
	$(VPY) -m pip install --quiet -e '.[test]'
	@touch $@

setup: $(STAMPS)/setup

# AutoAWQ declares triton (~1 GB, GPU only): install it without its dependencies, then the few it uses.
$(STAMPS)/autoawq: $(STAMPS)/setup
	$(VPY) -m pip install --quiet --no-deps autoawq==0.2.9
	$(VPY) -m pip install --quiet accelerate datasets zstandard
	@touch $@

autoawq: $(STAMPS)/autoawq

# Intel's AutoRound, the peer of `bench awq --autoround-iters`. Its GGUF export imports sentencepiece
# and gguf without declaring them; bench runs it on the vendored gguf-py, as the converter.
$(STAMPS)/autoround: $(STAMPS)/setup
	$(VPY) -m pip install --quiet auto-round==0.16.1 sentencepiece
	@touch $@

autoround: $(STAMPS)/autoround

# The main job on its default model: SmolLM2-135M-Instruct (from a PyPI wheel) as a HF folder,
# quantized with AWQ calibrated on text the model samples itself; then the speed A/B.
run: setup builds
	model=$$($(VPY) -c "from awq2gguf.assets.dev_models import hf_folder; print(hf_folder('smollm2'))") && \
	    $(VENV)/bin/awq2gguf "$$model" "$$(dirname "$$model")/smollm2-135m-instruct-awq-Q4_0.gguf"
	$(VENV)/bin/bench decode

test: setup autoawq autoround builds arm-build
	$(VPY) -m pytest

test-fast: setup builds
	$(VPY) -m pytest -m "not slow"

clean:
	rm -rf build

distclean: clean
	rm -rf vendor/llama.cpp vendor/llama.cpp-stock vendor/.cache $(VENV) $(STAMPS) models
