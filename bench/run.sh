#!/usr/bin/env bash
# Builds the load and save harnesses in build-bench/ (Release), runs their cases, each against its
# baseline side by side, prints the table and removes the files it wrote. Not run by CI.
#
#   bench/run.sh            the full sizes (1 GiB, 100,000 tensors, 10 GiB sparse): several minutes here
#   bench/run.sh --smoke    tiny sizes: seconds
#   options: --case=load.to_params,load.cold,save (a subset: `load` or `save` alone is all of that
#              harness's cases; `ckpt_bench_load --help` and `ckpt_bench_save --help` list them)
#            --dir=DIR (scratch folder; default BUILD/work)   --build-dir=BUILD (default build-bench/)
#            --no-build (use the programs already in BUILD)
#
# Results: the table on stdout, BUILD/results.md (Markdown), BUILD/bench.log (samples).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$root/build-bench
mode=full cases="" work="" do_build=1
for arg in "$@"; do
  case $arg in
    --smoke) mode=smoke ;;
    --case=*) cases=${arg#--case=} ;;
    --dir=*) work=${arg#--dir=} ;;
    --build-dir=*) build=${arg#--build-dir=} ;;
    --no-build) do_build=0 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown option $arg" >&2; exit 2 ;;
  esac
done
build=$(mkdir -p "$build" && cd "$build" && pwd)

# The cases of one harness (load or save) in --case: "all", a comma list, or "" for none.
cases_of() {
  [[ -z $cases ]] && { echo all; return; }
  local picked="" c
  IFS=, read -ra list <<<"$cases"
  for c in "${list[@]}"; do
    case $c in
      "$1") echo all; return ;;
      "$1".*) picked+="${picked:+,}${c#"$1".}" ;;
      load | save | load.* | save.*) ;;
      *) echo "run.sh: unknown case $c (load.NAME or save.NAME)" >&2; exit 2 ;;
    esac
  done
  echo "$picked"
}
load_cases=$(cases_of load)
save_cases=$(cases_of save)

if [[ $mode == full ]]; then
  sizes=(--tensors=64 --rows-per=2048 --cols=2048)
  timing=(--reps=7 --io-reps=9 --small=100000)
  load_only=(--diag-reps=3 --entries=2560 --entry-rows=1024 --entry-cols=1024 --index=37)
  machine=(--mib=256)
else
  sizes=(--tensors=8 --rows-per=256 --cols=256)
  timing=(--reps=5 --io-reps=5 --small=2000)
  load_only=(--diag-reps=2 --entries=64 --entry-rows=256 --entry-cols=256 --index=37)
  machine=(--mib=64 --reps=3)
fi

if (( do_build )); then
  cmake -S "$root" -B "$build" -G Ninja -DCKPT_BUILD_BENCH=ON -DCMAKE_BUILD_TYPE=Release \
    -DCKPT_BUILD_TESTS=OFF -DCKPT_BUILD_EXAMPLES=OFF >/dev/null
  cmake --build "$build" --target ckpt_bench_load ckpt_bench_save readahead_probe ckpt_machine
fi

work=${work:-$build/work}
mkdir -p "$work"
work=$(cd "$work" && pwd)
trap 'rm -rf "$work"' EXIT
results=$build/results.txt
log=$build/bench.log
: >"$results"
: >"$log"

{
  echo "# ckpt benchmarks ($mode), $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "# cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), nproc $(nproc)"
  echo "# memory: $(free -h | awk '/^Mem:/ {print $2 " total, " $7 " available"}')"
  echo "# filesystem of $work: $(df -hT "$work" | awk 'NR==2 {print $1 " " $2 ", " $3 " size, " $5 " free"}')"
  echo "# load average: $(cut -d' ' -f1-3 /proc/loadavg)"
  # The machine's costs the figures depend on (bench/machine.cpp), beside the table.
  "$build/bench/ckpt_machine" --dir="$work" "${machine[@]}" 2>&1 | sed 's/^/# /' || echo "# ckpt_machine failed"
} | tee -a "$log"

start=$(date +%s)

# One harness: its RESULT lines to the table, everything else to the log.
harness() {  # program cases [options...]
  local program=$1 picked=$2
  shift 2
  [[ -z $picked ]] && return 0
  local only=()
  [[ $picked != all ]] && only=(--case="$picked")
  echo "== $program ${only[*]}" >>"$log"
  if ! "$build/bench/$program" --dir="$work" "${only[@]}" "$@" 2>>"$log" | tee -a "$log" | grep '^RESULT' >>"$results"; then
    echo "run.sh: $program failed; the end of $log:" >&2
    tail -n 20 "$log" >&2
    exit 1
  fi
}
harness ckpt_bench_load "$load_cases" "${sizes[@]}" "${timing[@]}" "${load_only[@]}"
harness ckpt_bench_save "$save_cases" "${sizes[@]}" "${timing[@]}"

elapsed=$(( $(date +%s) - start ))
echo "# finished in ${elapsed} s" | tee -a "$log"

# The table, in the order the harnesses printed it, as text and as Markdown.
{
  echo "case|what|ckpt|baseline|ratio|target|verdict|peak memory"
  cut -d'|' -f2- "$results"
} | column -t -s'|'
{
  echo "| case | what | ckpt | baseline | ratio | target | verdict | peak memory |"
  echo "|---|---|---|---|---|---|---|---|"
  cut -d'|' -f2- "$results" | sed 's/|/ | /g; s/^/| /; s/$/ |/'
} >"$build/results.md"
echo "(Markdown: $build/results.md; samples: $log)"
