#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) in build/fuzz-clang, fuzzes, and
# merges what is new into the committed corpus fuzz/corpus/TARGET (minimised with
# -merge=1). Crashing inputs land in build/fuzz-clang/artifacts/TARGET/: fix the parser,
# then copy the input to fuzz/regressions/TARGET/ so ctest replays it.
#
#   fuzz/run.sh [TARGET|all] [SECONDS]     default: all, 60 seconds per target
#
# TARGET is elf_inspect, fatbinary, offload_bundle, library_name, http_request, http_response,
# wire_messages or script_directives. One process, niced; the build uses two jobs (JOBS=N
# to change).
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:-all}
seconds=${2:-60}
build=build/fuzz-clang
all_targets=(elf_inspect fatbinary offload_bundle library_name http_request http_response
  wire_messages script_directives)
if [ "$target" = all ]; then targets=("${all_targets[@]}"); else targets=("$target"); fi

flags="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all"
flags+=" -fno-omit-frame-pointer -g -O1 -D_GLIBCXX_ASSERTIONS"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE= \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_C_FLAGS="$flags" \
  -DGPUPOOL_FUZZ=ON -DGPUPOOL_BUILD_TESTS=OFF -DGPUPOOL_BUILD_BENCH=OFF \
  -DGPUPOOL_WERROR=OFF >/dev/null
cmake --build "$build" -j "${JOBS:-2}" --target "${targets[@]/%/_fuzzer}"
python3 fuzz/make_seeds.py "$build/seeds" >/dev/null

failed=0
for t in "${targets[@]}"; do
  corpus=fuzz/corpus/$t
  work=$build/work/$t
  artifacts=$build/artifacts/$t/
  mkdir -p "$corpus" "$work" "$artifacts"
  # New inputs go to the work directory; the committed corpus and the seeds are read.
  rc=0
  nice -n 10 "$build/fuzz/${t}_fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -max_len=65536 -print_final_stats=1 -artifact_prefix="$artifacts" \
    "$work" "$corpus" "$build/seeds/$t" >"$build/$t.log" 2>&1 || rc=$?
  grep -E 'INITED|DONE|ERROR|SUMMARY|stat::number_of_executed_units' "$build/$t.log" || true
  if [ "$rc" -ne 0 ]; then
    echo "$t: the fuzzer failed (exit $rc); see $build/$t.log and $artifacts" >&2
    failed=1
  fi
  # Minimise: the smallest set of inputs that keeps all coverage, into a fresh corpus.
  merged=$build/merged/$t
  rm -rf "$merged" && mkdir -p "$merged"
  nice -n 10 "$build/fuzz/${t}_fuzzer" -merge=1 -max_len=65536 "$merged" "$corpus" "$build/seeds/$t" \
    "$work" >"$build/$t.merge.log" 2>&1
  rm -f "$corpus"/* && cp "$merged"/* "$corpus"/
  echo "$t: corpus $(ls "$corpus" | wc -l) files, $(du -sh "$corpus" | cut -f1)"
done
exit "$failed"
