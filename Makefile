# Two commands: `make demo` and `make test` (see README). Everything they need is set up here.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-stress lint format system figures train-dcs clean asan asan-build asan-short fuzz-build

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

# The sanitizer pass runs even when pytest failed (a red run still says what it can);
# the target fails if either did.
test: $(STAMP) system
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python tools/typecheck.py
	@status=0; \
	$(BIN)/python -m pytest -q -p no:cacheprovider || status=$$?; \
	$(MAKE) -s asan-short || { rc=$$?; [ $$status -ne 0 ] || status=$$rc; }; \
	exit $$status

# The suite N times beside LOAD busy loops (finds tests that depend on timing); CI does not
# run it. Extra pytest arguments in ARGS, e.g. ARGS='tests/test_wan_transfer.py'.
N ?= 3
LOAD ?= 2
test-stress: $(STAMP) system
	@bash tools/test_stress.sh $(BIN)/python $(N) $(LOAD) $(ARGS)

# ruff, and mypy over the package as installed (sdr, sdr.backends, sdr.simulator).
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python tools/typecheck.py

format: $(STAMP)
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache

# The paper's figures (CSV + PNG) from the simulator, into out/figures.
figures: $(STAMP)
	$(BIN)/python experiments/make_figures.py --out out/figures

# Train across two emulated datacenters (root: namespaces): the DDP hook with every scheme
# against one site, then init_process_group("sdr") against gloo on the same link.
train-dcs: $(STAMP) system
	$(BIN)/python experiments/train_two_dcs.py --figure out/train_two_dcs.png
	$(BIN)/python benchmarks/train_wan.py --out out/train_wan.json --plot out/train_wan.png

# The native extensions (placement step, UDP datapath) built with AddressSanitizer + UBSan
# into build/asan (the installed build is untouched), and their tests run against them
# (docs/native.md). `make test` runs the short pass.
ASAN_DIR := build/asan
ASAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g
ASAN_ENV = SDR_PLACEMENT_NATIVE=$$(ls $(ASAN_DIR)/sdr/_placement*.so) \
	SDR_UDP_NATIVE=$$(ls $(ASAN_DIR)/sdr/backends/udp/_datapath*.so) \
	SDR_FORWARD_NATIVE=$$(ls $(ASAN_DIR)/sdr/backends/wan/_forward*.so) \
	LD_PRELOAD=$$(gcc -print-file-name=libasan.so) \
	ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1
asan-build: $(STAMP)
	CFLAGS="$(ASAN_FLAGS)" LDFLAGS="$(ASAN_FLAGS)" $(BIN)/python setup.py -q build_ext \
		--force --build-lib $(ASAN_DIR) --build-temp $(ASAN_DIR)/obj 2>/dev/null

asan: asan-build
	$(ASAN_ENV) $(BIN)/python -m pytest -q -p no:cacheprovider tests/test_placement_native.py \
		tests/test_placement_seam.py tests/test_udp_native.py tests/test_recv_table_native.py \
		tests/test_chunk_crcs_native.py
	$(ASAN_ENV) $(BIN)/python -m pytest -q -p no:cacheprovider tests/test_native_forwarder.py \
		-k "feed or loop or oversize or decisions or delay_line or gso or vnet or coalescing or partial_checksum"

asan-short: asan-build
	$(ASAN_ENV) $(BIN)/python -m pytest -q -x -p no:cacheprovider tests/test_placement_seam.py \
		tests/test_udp_native.py tests/test_recv_table_native.py tests/test_chunk_crcs_native.py
	$(ASAN_ENV) $(BIN)/python -m pytest -q -x -p no:cacheprovider tests/test_native_forwarder.py \
		-k "feed or loop or oversize or decisions or delay_line or gso or vnet or coalescing or partial_checksum"

# The same extensions built by clang with ASan, UBSan and libFuzzer's coverage
# instrumentation into build/fuzz, for the fuzz targets over native code (docs/native.md;
# needs clang and its runtime: apt-get install clang libclang-rt-dev, or clang-14 ...).
CLANG ?= clang
FUZZ_FLAGS := -fsanitize=address,undefined,fuzzer-no-link -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g -O1
fuzz-build: $(STAMP)
	CC=$(CLANG) LDSHARED="$(CLANG) -shared" CFLAGS="$(FUZZ_FLAGS)" LDFLAGS="$(FUZZ_FLAGS)" \
		$(BIN)/python setup.py -q build_ext --force --build-lib build/fuzz \
		--build-temp build/fuzz/obj 2>/dev/null
