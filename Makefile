# sluice -- top-level driver.  CMake builds, CTest runs the tests; this file
# only chains the steps so that each of these is one command on a fresh
# Debian 12 machine:
#
#   make          build/libsluice.{a,so}, build/sluice.pc, build/sluice,
#                 build/sluice-redis.so (optimised)
#   make run      install what is missing, build, start `sluice serve`
#   make test     install what is missing, build with ASan+UBSan, run every test
#   make bench    benchmarks -> build/bench/results.json, docs/BENCHMARKS.md
#   make soak     faults under load for SOAK_SECONDS (default 600)
#                 -> docs/RELIABILITY.md; exits non-zero if a criterion fails
#   make fuzz     libFuzzer harnesses, each for FUZZ_SECONDS
#   make format   clang-format every C file
#   make install  build, then install under PREFIX (default /usr/local),
#                 staged under DESTDIR when set
#   make deb      Debian packages (dpkg-buildpackage) -> build/deb/*.deb
#   make node-prebuild  the npm package's prebuilt addons from this checkout
#                 -> bindings/node/prebuilds/linux-{x64,arm64}/node.napi.glibc.node
#                    and linux-x64/node.napi.musl.node
#                 (what `npm pack` in bindings/node puts in the tarball)

BUILD      ?= build
TEST_BUILD ?= build-test
FUZZ_BUILD ?= build-fuzz
PREFIX     ?= /usr/local
DESTDIR    ?=
DEB_BUILD  ?= $(BUILD)/deb
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
FUZZ_SECONDS ?= 30
SOAK_SECONDS ?= 600
ONLY       ?=

C_FILES = $(shell git ls-files '*.c' '*.h' 2>/dev/null || find src include tests bench -name '*.[ch]')

.PHONY: all build run test bench soak fuzz format deps clean install deb node-prebuild

all: build

deps:
	@./scripts/deps

build:
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DSLUICE_TESTS=OFF \
		-DCMAKE_INSTALL_PREFIX=$(PREFIX) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

run: deps build
	@echo "sluice serve on http://127.0.0.1:8080 (classic policy: 100 burst, 2/s, key x-user-id or client IP; at most 200 burst, 4/s per client IP)"
	@echo "try:  curl -i -H 'x-user-id: alice' http://127.0.0.1:8080/v1/check"
	@exec ./$(BUILD)/sluice serve

test: deps
	@cmake -S . -B $(TEST_BUILD) -DCMAKE_BUILD_TYPE=Debug -DSLUICE_SANITIZE=ON >/dev/null
	@cmake --build $(TEST_BUILD) -j $(JOBS)
	@cd $(TEST_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
		UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		ctest --output-on-failure -j $(JOBS)

bench: deps build
	@./bench/run $(if $(ONLY),--only $(ONLY))

# The optimised build, three `sluice serve` and a Node.js process on a
# Redis Sentinel group, a fault every 10 s (tests/soak/soak.py).
soak: deps build
	@SLUICE_BUILD=$(abspath $(BUILD)) SLUICE_SRC=$(CURDIR) \
		SOAK_SECONDS=$(SOAK_SECONDS) SOAK_REPORT=docs/RELIABILITY.md \
		python3 tests/soak/soak.py

fuzz: deps
	@CC=clang cmake -S . -B $(FUZZ_BUILD) -DCMAKE_BUILD_TYPE=Debug -DSLUICE_TESTS=OFF -DSLUICE_FUZZ=ON >/dev/null
	@cmake --build $(FUZZ_BUILD) -j $(JOBS)
	@./scripts/fuzz $(FUZZ_BUILD) $(FUZZ_SECONDS)

install: build
	@DESTDIR=$(DESTDIR) cmake --install $(BUILD)

# Builds from a copy of the tree (in a git checkout: the tracked files plus
# untracked, unignored ones), so the packages come from what a clean clone
# holds and nothing is written outside $(DEB_BUILD).
deb:
	@rm -rf $(DEB_BUILD) && mkdir -p $(DEB_BUILD)/src
	@if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then \
		git ls-files -co --exclude-standard -z | tar --null -T - -cf -; \
	else \
		tar --exclude=./build --exclude='./build-*' --exclude=node_modules -cf - .; \
	fi | tar -xf - -C $(DEB_BUILD)/src
	@cd $(DEB_BUILD)/src && dpkg-buildpackage -us -uc -b -j$(JOBS) >../build.log 2>&1 \
		|| { tail -40 ../build.log; exit 1; }
	@ls $(DEB_BUILD)/*.deb

# The libsluice sources and headers copied into bindings/node/deps, then
# the addon built from them (scripts/prepack.js); npm ci only for the
# node-api-headers package, when it is missing.
node-prebuild: deps
	@cd bindings/node && { [ -d node_modules/node-api-headers ] || \
		npm ci --ignore-scripts --no-audit --no-fund >/dev/null; } && \
		node scripts/prepack.js

format:
	@clang-format -i $(C_FILES)

clean:
	rm -rf $(BUILD) $(TEST_BUILD) $(FUZZ_BUILD)
