#!/bin/sh
# Runs the libFuzzer campaign against the reader: tests/fuzz/run.sh [SECONDS] (default 60).
# CKPT_FUZZ_TARGET=fuzz_torch fuzzes the torch.save reader instead (seeds: tests/fixtures/torch, its
# hostile/ crafted files, and tests/corpus/torch); CKPT_FUZZ_TARGET=fuzz_s3_xml the readers of S3's
# XML answers (seeds: tests/corpus/s3_xml; needs libcurl and expat, for S3 support).
#
# Configures and builds fuzz_load in build-fuzz/ (clang, -fsanitize=fuzzer-no-link,address,undefined
# for the whole of ckpt), seeds a work corpus there from tests/fixtures (every safetensors file, recursively)
# and tests/corpus, and fuzzes for SECONDS. The growing corpus and any crash artifacts stay in the
# build folder, outside the repository: see tests/corpus/README.md for what to keep.
# Environment: CKPT_FUZZ_BUILD (the build folder), CKPT_FUZZ_SOURCE (the source tree to build, by
# default this one: point it at a copy to fuzz a fixed snapshot), FUZZ_ARGS
# (extra libFuzzer flags, e.g. -runs=0 to replay the corpus only, or -jobs=N).
set -eu

seconds=${1:-60}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
src_tree=${CKPT_FUZZ_SOURCE:-$root}
build=${CKPT_FUZZ_BUILD:-$root/build-fuzz}

if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$src_tree" -B "$build" -G Ninja -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O2 -g -DNDEBUG" \
    -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer" \
    -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
    -DCKPT_WERROR=ON -DCKPT_BUILD_TESTS=ON -DCKPT_BUILD_EXAMPLES=OFF -DCKPT_BUILD_FUZZ=ON
fi
target=${CKPT_FUZZ_TARGET:-fuzz_load}
nice -n 10 cmake --build "$build" --target "$target" -j2

# The seeds, flattened (fixtures/valid/x.safetensors -> valid_x.safetensors); libFuzzer writes
# what it finds into the first folder only.
seeds="$build/$target-seeds"
work="$build/$target-corpus"
artifacts="$build/$target-artifacts"
rm -rf "$seeds"
mkdir -p "$seeds" "$work" "$artifacts"
dict="$here/safetensors.dict"
if [ "$target" = fuzz_torch ]; then
  cp "$root"/tests/fixtures/torch/*.pt "$root"/tests/fixtures/torch/*.bin "$root"/tests/corpus/torch/* "$seeds"/ 2>/dev/null || true
  # The crafted files of the budgets (names, data, an expand; hostile_*.pt).
  for f in "$root"/tests/fixtures/torch/hostile/*.pt; do cp "$f" "$seeds/hostile_$(basename "$f")"; done
  dict="$here/torch.dict"
elif [ "$target" = fuzz_s3_xml ]; then
  cp "$root"/tests/corpus/s3_xml/* "$seeds"/
  dict="$here/s3_xml.dict"
else
  (cd "$root/tests/fixtures" && find . -type f -name '*.safetensors') | while read -r f; do
    cp "$root/tests/fixtures/$f" "$seeds/$(echo "${f#./}" | tr / _)"
  done
  cp "$root"/tests/corpus/* "$seeds"/ 2>/dev/null || true
fi

# Leaks count as findings (detect_leaks), and so does any UBSan report (-fno-sanitize-recover).
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
# shellcheck disable=SC2086
exec nice -n 10 "$build/tests/$target" -max_total_time="$seconds" -rss_limit_mb=2048 -malloc_limit_mb=1024 \
  -timeout=10 -max_len=65536 -print_final_stats=1 -dict="$dict" \
  -artifact_prefix="$artifacts/" ${FUZZ_ARGS:-} "$work" "$seeds"
