# The two set-up commands of the README: `make run` and `make test`.
.PHONY: all deps build build-release build-asan run test test-release test-asan bench deb node-check-kit format tidy clean

JOBS ?= $(shell nproc 2>/dev/null || echo 2)

all: build

deps:
	@bash scripts/install-deps.sh

build/release/build.ninja: CMakeLists.txt CMakePresets.json
	cmake --preset release >/dev/null

build: deps build/release/build.ninja
	cmake --build --preset release -j $(JOBS)

# Shows what discovery sees, then starts the pool in the foreground (Ctrl-C stops it).
run: build
	@bash scripts/run.sh $(ARGS)

test: deps test-release test-asan

# Each test stage is a build step and a ctest step; .ci/run times them separately.
build-release: build/release/build.ninja
	cmake --build --preset release -j $(JOBS)

# The long end-to-end tests carry a COST (seconds measured) so that ctest starts them
# first, also in a fresh clone without cost data from an earlier run (docs/benchmarks.md,
# "CI time"). 2 at once: at 4, load-sensitive tests failed now and then.
test-release: build-release
	ctest --preset release

build-asan:
	cmake --preset asan-ubsan >/dev/null
	cmake --build --preset asan-ubsan -j $(JOBS)

test-asan: build-asan
	ctest --preset asan-ubsan

bench: build
	@bash bench/run.sh

# The Debian package from the release build, without compiling anything else
# (docs/deploy.md): build/release/deb/gpupool_VERSION_ARCH.deb.
deb: build
	@bash packaging/deb/build-deb.sh build/release build/release/deb

# The node acceptance kit (docs/node-check.md): build/node-check/, a self-contained folder
# (binaries, their libraries, the check) to copy to a GPU machine and run there with
# ./run.sh --out DIR; nothing is compiled beyond the release build.
node-check-kit: build
	@bash packaging/node-check/make-kit.sh build/release build/node-check

format:
	find src tests bench -name '*.cc' -o -name '*.h' -o -name '*.c' | xargs clang-format -i

# clang-tidy needs one compile command per source file, and the release build compiles
# unity batches (its compile_commands.json names build/.../unity_N_cxx.cxx, not src/*.cc),
# so tidy configures its own build/tidy without unity (configure only, a few seconds, each
# time so that new sources are listed; nothing is built). Config: .clang-tidy.
tidy:
	cmake -S . -B build/tidy -G Ninja -DCMAKE_BUILD_TYPE=Release -DGPUPOOL_UNITY_BUILD=OFF >/dev/null
	find src -name '*.cc' ! -name '*_test.cc' | xargs -P $(JOBS) -n 4 clang-tidy -p build/tidy --quiet

clean:
	rm -rf build
