#!/usr/bin/env bash
# Builds the benchmarks of issue 5 in build-bench/ (Release), runs every row with its baseline side
# by side, prints the table and removes the files it wrote. Not run by CI.
#
#   bench/run.sh            the full sizes (1 GiB, 100,000 tensors, 10 GiB sparse): ~12 minutes here
#   bench/run.sh --smoke    tiny sizes: seconds
#   options: --rows=1,2,2k,3,4,5,6,7 (a subset; 2k is to_params against an allocating loader alone, 7 the digest's cost)   --dir=DIR (scratch folder; default build-bench/work)
#            --no-build (use the binaries already in build-bench/)
#
# Needs /usr/bin/time (Debian's `time` package: apt-get install -y time) for the peak-RSS rows.
# Results: the table on stdout, build-bench/results.md (Markdown), build-bench/bench.log (samples).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$root/build-bench
mode=full rows=1,2,2k,3,4,5,6,7 work="" do_build=1
for arg in "$@"; do
  case $arg in
    --smoke) mode=smoke ;;
    --rows=*) rows=${arg#--rows=} ;;
    --dir=*) work=${arg#--dir=} ;;
    --no-build) do_build=0 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown option $arg" >&2; exit 2 ;;
  esac
done
wants() { [[ ",$rows," == *",$1,"* ]]; }

if [[ ! -x /usr/bin/time ]]; then
  echo "run.sh: /usr/bin/time is missing (apt-get install -y time)" >&2
  exit 1
fi

if [[ $mode == full ]]; then
  sizes=(--tensors=64 --rows-per=2048 --cols=2048)
  timing=(--reps=7 --io-reps=9 --diag-reps=3 --small=100000 --train-intervals=7)
  sparse=(--entries=2560 --entry-rows=1024 --entry-cols=1024)
  machine=(--mib=256)
else
  sizes=(--tensors=8 --rows-per=256 --cols=256)
  timing=(--reps=5 --io-reps=5 --diag-reps=2 --small=2000 --train-intervals=5 --train-min-steps=3 --train-batch=16)
  sparse=(--entries=64 --entry-rows=256 --entry-cols=256)
  machine=(--mib=64 --reps=3)
fi

if (( do_build )); then
  cmake -S "$root" -B "$build" -G Ninja -DCKPT_BUILD_BENCH=ON -DCMAKE_BUILD_TYPE=Release \
    -DCKPT_BUILD_TESTS=OFF -DCKPT_BUILD_EXAMPLES=OFF >/dev/null
  cmake --build "$build" --target ckpt_bench ckpt_bench_rss readahead_probe ckpt_machine
fi
bench=$build/bench/ckpt_bench
rss=$build/bench/ckpt_bench_rss

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
  # The machine's costs the rows depend on (bench/machine.cpp), beside the table.
  "$build/bench/ckpt_machine" --dir="$work" "${machine[@]}" 2>&1 | sed 's/^/# /' || echo "# ckpt_machine failed"
} | tee -a "$log"

start=$(date +%s)

# Row 0: a fact of the machine that the rows below depend on.
"$rss" machine - --mib=256 >>"$results" 2>>"$log"

# Rows 1, 2, 2k, 3, 6 and 7: in one process, baselines side by side.
in_process=""
for r in 1 2 2k 3 6 7; do wants $r && in_process+="${in_process:+,}$r"; done
if [[ -n $in_process ]]; then
  "$bench" --dir="$work" --rows="$in_process" "${sizes[@]}" "${timing[@]}" 2>>"$log" | tee -a "$results" >/dev/null
fi

# One program under /usr/bin/time -v: prints "peak_kib wall_seconds".
timed() {
  /usr/bin/time -v -o "$work/time.txt" "$@" >>"$log" 2>&1
  local peak wall
  peak=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$work/time.txt")
  wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$work/time.txt" |
    awk -F: '{ s = 0; for (i = 1; i <= NF; i++) s = s * 60 + $i; print s }')
  echo "$peak $wall"
}

# Row 4: peak RSS of separate programs, each against a baseline program.
if wants 4; then
  model=$work/r4.safetensors
  "$rss" make "$model" "${sizes[@]}" >>"$log" 2>&1
  mib=$(awk -v s="${sizes[*]}" 'BEGIN { n = split(s, a, /[ =]/); for (i = 1; i < n; i += 2) v[a[i]] = a[i + 1];
        printf "%.1f", v["--tensors"] * v["--rows-per"] * v["--cols"] * 4 / 1048576 }')
  load_target=$(awk -v m="$mib" 'BEGIN { printf "%.1f", 1.15 * m + 64 }')
  save_target=$(awk -v m="$mib" 'BEGIN { printf "%.1f", m + 64 }')
  row4() {  # label target_mib base(peak wall) ckpt(peak wall)
    awk -v what="$1" -v target="$2" -v bp="$3" -v bw="$4" -v cp="$5" -v cw="$6" 'BEGIN {
      printf "RESULT|4|%s|%.2f s|%.2f s|%.2fx RSS|<= %.1f MiB|%s|%.0f MiB (baseline %.0f MiB)\n",
        what, cw, bw, cp / bp, target, (cp / 1024 <= target ? "pass" : "MISS"), cp / 1024, bp / 1024 }' >>"$results"
  }
  echo "== row 4: peak RSS (/usr/bin/time -v)" >>"$log"
  read -r bp bw < <(timed "$rss" pread-extract "$model" "${sizes[@]}")
  read -r cp cw < <(timed "$rss" load-extract "$model" "${sizes[@]}" --layout=row --template=shape)
  row4 "load + read_params of all $mib MiB into a struct (row-major, fresh leaves: shapes only) vs a program that preads into a fresh struct" \
    "$load_target" "$bp" "$bw" "$cp" "$cw"
  read -r cp cw < <(timed "$rss" load-extract "$model" "${sizes[@]}" --layout=row --template=init)
  row4 "the same, restoring into initialized params: read_params(load(f), params)" "$load_target" "$bp" "$bw" "$cp" "$cw"
  read -r bp bw < <(timed "$rss" write-plain "$work/r4_plain.safetensors" "${sizes[@]}")
  read -r cp cw < <(timed "$rss" save-live "$work/r4_live.safetensors" "${sizes[@]}")
  row4 "hold $mib MiB of params and save_params them (live) vs a program that writes them with write+fsync" \
    "$save_target" "$bp" "$bw" "$cp" "$cw"
  read -r cp cw < <(timed "$rss" save-snapshot "$work/r4_snapshot.safetensors" "${sizes[@]}")
  row4 "the same through save(of_params(...)) (snapshot; the target is for the live path)" "$save_target" "$bp" "$bw" "$cp" "$cw"
  rm -f "$work"/r4*.safetensors
fi

# Row 5: a 10 GiB sparse file, one 4 MiB entry extracted; the program reports RSS and page-cache
# pages of the file (mincore) before and after.
if wants 5; then
  echo "== row 5: sparse file" >>"$log"
  sparse_file=$work/r5_sparse.safetensors
  "$rss" make-sparse "$sparse_file" "${sparse[@]}"
  /usr/bin/time -v -o "$work/time.txt" "$rss" sparse-extract "$sparse_file" "${sparse[@]}" --index=37 \
    2>>"$log" | tee -a "$log" | grep '^RESULT' >>"$results" || true
  peak=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$work/time.txt")
  sed -i "/^RESULT|5|/ s/\$/; process peak RSS $((peak / 1024)) MiB/" "$results"
  rm -f "$sparse_file"
fi

elapsed=$(( $(date +%s) - start ))
echo "# finished in ${elapsed} s" | tee -a "$log"

# The table: sorted by row, as text and as Markdown.
sort -t'|' -k2,2 -s "$results" >"$results.sorted"
{
  echo "row|what|ckpt|baseline|ratio|target|verdict|peak memory"
  cut -d'|' -f2- "$results.sorted"
} | column -t -s'|'
{
  echo "| row | what | ckpt | baseline | ratio | target | verdict | peak memory |"
  echo "|---|---|---|---|---|---|---|---|"
  cut -d'|' -f2- "$results.sorted" | sed 's/|/ | /g; s/^/| /; s/$/ |/'
} >"$build/results.md"
rm -f "$results.sorted"
echo "(Markdown: $build/results.md; samples: $log)"
