# ckpt: the two commands are `make demo` and `make test`; both install what
# they need (scripts/install-deps, idempotent) and build first.

BUILD      := build
ASAN_BUILD := build-asan
TSAN_BUILD := build-tsan
PYTHON     := .venv/bin/python
JOBS       ?= $(shell nproc)

# One compiler name for every build: ccache keys on it, and with the same
# name the Python package's build (pip, below) gets make build's objects from
# the cache instead of compiling the library again. (Make's own defaults.)
export CC  ?= cc
export CXX ?= g++

.PHONY: all deps build asan tsan test test-cpp test-asan test-tsan test-python demo bench bench-torch bench-python bench-restore bench-formats python clean

all: build

deps:
	scripts/install-deps

build: deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DCKPT_SANITIZE=OFF -DCKPT_BUILD_TESTS=ON -DCKPT_BUILD_BENCH=ON
	cmake --build $(BUILD) -j $(JOBS)

asan: deps
	cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCKPT_SANITIZE=ON -DCKPT_BUILD_TESTS=ON -DCKPT_BUILD_BENCH=OFF
	cmake --build $(ASAN_BUILD) -j $(JOBS) --target ckpt_parser_tests

# ThreadSanitizer: the library and the thread tests (tests/concurrency), at
# -O1 so that the instrumented build stays quick.
tsan: deps
	cmake -S . -B $(TSAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=-O1 -g1" "-DCMAKE_C_FLAGS_DEBUG=-O1 -g1" -DCKPT_SANITIZE_THREAD=ON -DCKPT_BUILD_TESTS=ON -DCKPT_BUILD_BENCH=OFF
	cmake --build $(TSAN_BUILD) -j $(JOBS) --target ckpt_thread_tests

# The Python package, installed into .venv from this tree (offline: the build
# tools are in .venv; build-python/ keeps the build between installs).
python: deps
	$(PYTHON) -m pip install -q --no-build-isolation --no-deps .

test: build asan tsan python
	$(MAKE) --no-print-directory test-cpp test-asan test-tsan test-python

test-cpp:
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

test-asan:
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  $(ASAN_BUILD)/ckpt_parser_tests --gtest_brief=1

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

bench-python: build python
	$(PYTHON) bench/bench_python.py --bench $(BUILD)/ckpt_bench

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD) build-python

bench-restore: python
	$(PYTHON) bench/bench_restore.py

bench-formats: build
	$(PYTHON) bench/bench_formats.py --bench $(BUILD)/ckpt_bench
