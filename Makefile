# Two commands: `make demo` and `make test` (see README). Everything they need is set up here.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint format system figures train-dcs clean asan asan-build

$(STAMP): pyproject.toml setup.py $(wildcard sdr/*.c backends/*/*.c)
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

# Debian packages and sysctls the tests and benchmarks use (tshark, iperf3, socket buffers).
system:
	@bash tools/setup_system.sh

demo: $(STAMP)
	$(BIN)/sdr demo

test: $(STAMP) system
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest -q -p no:cacheprovider

lint: $(STAMP)
	$(BIN)/ruff check .

format: $(STAMP)
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache

# The paper's figures (CSV + PNG) from the simulator, into out/figures.
figures: $(STAMP)
	$(BIN)/python experiments/make_figures.py --out out/figures

# Train a small model across two emulated datacenters (root: namespaces), every scheme.
train-dcs: $(STAMP) system
	$(BIN)/python experiments/train_two_dcs.py --figure out/train_two_dcs.png

# The native placement step built with AddressSanitizer + UBSan into build/asan (the
# installed build is untouched), and the placement tests run against it (docs/native.md).
ASAN_DIR := build/asan
ASAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g
asan-build: $(STAMP)
	CFLAGS="$(ASAN_FLAGS)" LDFLAGS="$(ASAN_FLAGS)" $(BIN)/python setup.py -q build_ext \
		--force --build-lib $(ASAN_DIR) --build-temp $(ASAN_DIR)/obj 2>/dev/null

asan: asan-build
	SDR_PLACEMENT_NATIVE=$$(ls $(ASAN_DIR)/sdr/_placement*.so) \
	LD_PRELOAD=$$(gcc -print-file-name=libasan.so) \
	ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1 \
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/test_placement_native.py tests/test_placement_seam.py
