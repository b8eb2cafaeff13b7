#!/usr/bin/env bash
# What a training loop sees: builds ckpt_bench_loop in build-bench/ (Release), then for each model
# size: the machine's costs (first size only), adam::update against the same update cut by hand
# into one part per core (256 MiB and less), the writer's CPU by stage, a whole background save's
# CPU per GiB in both storage orders, and the loop's throughput with and without a save_async of
# the training state at each interval (pairs of runs in alternating order, medians of the pairs),
# the blocking per save against a memcpy of the state, the CPU per save; and the first save_async
# of fresh processes against a memcpy into fresh memory. Not run by CI.
#
#   bench/loop_run.sh                 256 MiB and 1 GiB models, a save every 5 s, 10 pairs of 20 s runs:
#                                     about 35 minutes on 2 cores
#   bench/loop_run.sh --smoke         a 16 MiB model, one interval, one pair of 3 s runs: a minute
#   options: --mib=256,1024 --intervals=5 --pairs=10 --seconds=20 --first=5 (fresh processes)
#            --eager=0 (no saves of sections by hand beside) --dir=DIR (scratch folder on the disk to
#            measure; default BUILD/work) --build-dir=BUILD (default build-bench/)   --no-build
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$root/build-bench
mibs=256,1024 intervals=5 pairs=10 seconds=20 first=5 eager=1 work="" do_build=1
for arg in "$@"; do
  case $arg in
    --smoke) mibs=16 intervals=1 pairs=1 seconds=3 first=1 ;;
    --mib=*) mibs=${arg#--mib=} ;;
    --intervals=*) intervals=${arg#--intervals=} ;;
    --pairs=*) pairs=${arg#--pairs=} ;;
    --seconds=*) seconds=${arg#--seconds=} ;;
    --first=*) first=${arg#--first=} ;;
    --eager=*) eager=${arg#--eager=} ;;
    --dir=*) work=${arg#--dir=} ;;
    --build-dir=*) build=${arg#--build-dir=} ;;
    --no-build) do_build=0 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "loop_run.sh: unknown option $arg" >&2; exit 2 ;;
  esac
done
build=$(mkdir -p "$build" && cd "$build" && pwd)
work=${work:-$build/work}
mkdir -p "$work"

if (( do_build )); then
  cmake -S "$root" -B "$build" -G Ninja -DCKPT_BUILD_BENCH=ON -DCMAKE_BUILD_TYPE=Release \
    -DCKPT_BUILD_TESTS=OFF -DCKPT_BUILD_EXAMPLES=OFF >/dev/null
  cmake --build "$build" --target ckpt_bench_loop
fi

IFS=, read -ra sizes <<<"$mibs"
machine=1
for mib in "${sizes[@]}"; do
  echo
  "$build/bench/ckpt_bench_loop" --dir="$work/loop" --model-mib="$mib" --intervals="$intervals" \
    --pairs="$pairs" --seconds="$seconds" --eager="$eager" --machine="$machine"
  machine=0
  echo
  echo "first save_async of a fresh process, $mib MiB model: blocking / memcpy into fresh memory"
  for ((i = 0; i < first; i++)); do
    "$build/bench/ckpt_bench_loop" --dir="$work/first" --model-mib="$mib" --first
  done
done
rm -rf "$work/loop" "$work/first"
