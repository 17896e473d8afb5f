# ckpt: the two commands are `make demo` and `make test`; both install what
# they need (scripts/install-deps, idempotent) and build first.

BUILD      := build
# The sanitizer build (clang, ASan + UBSan, every object also instrumented
# for libFuzzer): the whole C++ suite, the CLI it runs, the fuzz targets.
ASAN_BUILD := build-sanitize
SECONDS    ?= 60
TSAN_BUILD := build-tsan
PYTHON     := .venv/bin/python
JOBS       ?= $(shell nproc)

# One compiler name for every build: ccache keys on it, and with the same
# name the Python package's build (pip, below) gets make build's objects from
# the cache instead of compiling the library again. (Make's own defaults.)
export CC  ?= cc
export CXX ?= g++

.PHONY: all deps build build-tool asan tsan fuzz fuzz-smoke test test-cpp test-asan test-tsan test-python demo bench bench-torch bench-python bench-restore bench-formats bench-gpu bench-speed bench-url python clean

all: build

deps:
	scripts/install-deps

build: deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DCKPT_SANITIZE=OFF -DCKPT_BUILD_TESTS=ON -DCKPT_BUILD_BENCH=ON
	cmake --build $(BUILD) -j $(JOBS)

# The release library and CLI alone (what the Python tests and the demo run;
# ckpt_crash_writer too, which makes the managed run that
# tests/interop/test_manager_interop.py reads), without the release build of
# the tests: make test runs the C++ suite in the sanitizer build instead
# (docs/design.md, "Fuzzing and sanitizers").
build-tool: deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DCKPT_SANITIZE=OFF -DCKPT_BUILD_TESTS=ON -DCKPT_BUILD_BENCH=ON
	cmake --build $(BUILD) -j $(JOBS) --target ckpt_tool ckpt_crash_writer

# clang-14 (Debian's, with libFuzzer) whatever CC/CXX say: -O1 with line
# tables, enough for readable reports at a fraction of -O2's compile time.
# The library is a unity build here and in tsan (CMakeLists.txt,
# CKPT_UNITY_LIBRARY): a third of its compile time.
asan: deps
	CC=clang-14 CXX=clang++-14 cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug \
	  "-DCMAKE_C_FLAGS_DEBUG=-O1 -gline-tables-only" "-DCMAKE_CXX_FLAGS_DEBUG=-O1 -gline-tables-only" \
	  -DCKPT_SANITIZE=ON -DCKPT_BUILD_FUZZ=ON -DCKPT_BUILD_TESTS=ON -DCKPT_BUILD_BENCH=OFF -DCKPT_UNITY_LIBRARY=ON
	cmake --build $(ASAN_BUILD) -j $(JOBS)

# Every fuzz target SECONDS seconds, one at a time (scripts/fuzz, fuzz/README.md).
fuzz: asan
	scripts/fuzz $(ASAN_BUILD) $(SECONDS)

# Every fuzz target over its seeds plus 2,000 mutations (part of make test).
fuzz-smoke:
	scripts/fuzz $(ASAN_BUILD) smoke

# ThreadSanitizer: the library and the thread tests (tests/concurrency), at
# -O1 so that the instrumented build stays quick.
tsan: deps
	cmake -S . -B $(TSAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=-O1 -g1" "-DCMAKE_C_FLAGS_DEBUG=-O1 -g1" -DCKPT_SANITIZE_THREAD=ON -DCKPT_BUILD_TESTS=ON -DCKPT_BUILD_BENCH=OFF -DCKPT_UNITY_LIBRARY=ON
	cmake --build $(TSAN_BUILD) -j $(JOBS) --target ckpt_thread_tests

# The Python package, installed into .venv from this tree (offline: the build
# tools are in .venv; build-python/ keeps the build between installs).
python: deps
	$(PYTHON) -m pip install -q --no-build-isolation --no-deps .

# The C++ suite runs once, sanitized (ASan + UBSan, the sanitized CLI);
# make test-cpp runs the release build's after make build.
test: build-tool asan tsan python
	$(MAKE) --no-print-directory test-asan test-tsan fuzz-smoke test-python

test-cpp:
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

# The whole C++ suite under ASan + UBSan; the CLI's tests run the sanitized ckpt.
test-asan:
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --test-dir $(ASAN_BUILD) --output-on-failure -j $(JOBS)

test-tsan:
	TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 $(TSAN_BUILD)/ckpt_thread_tests --gtest_brief=1

test-python:
	CKPT_TOOL=$(abspath $(BUILD))/ckpt $(PYTHON) -m pytest tests/interop tests/python -q

demo: build python
	scripts/demo $(BUILD)/ckpt

bench: build python
	$(BUILD)/ckpt_bench
	$(PYTHON) bench/bench_torch.py --bench $(BUILD)/ckpt_bench
	$(PYTHON) bench/bench_python.py --bench $(BUILD)/ckpt_bench
	$(PYTHON) bench/bench_restore.py
	$(PYTHON) bench/bench_formats.py --bench $(BUILD)/ckpt_bench

bench-torch: build
	$(PYTHON) bench/bench_torch.py --bench $(BUILD)/ckpt_bench

bench-speed: build python
	$(PYTHON) bench/bench_speed.py --bench $(BUILD)/ckpt_bench

# Issue 19's figures: downloads against curl -o, cached loads, lazy remote
# opens, over Debian's nginx on 127.0.0.1 (bench/bench_url.py).
bench-url: build python
	$(PYTHON) bench/bench_url.py

bench-python: build python
	$(PYTHON) bench/bench_python.py --bench $(BUILD)/ckpt_bench

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD) build-asan build-python

bench-restore: python
	$(PYTHON) bench/bench_restore.py

bench-gpu: python
	$(PYTHON) bench/bench_gpu.py

bench-formats: build
	$(PYTHON) bench/bench_formats.py --bench $(BUILD)/ckpt_bench
