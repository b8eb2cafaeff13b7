#!/usr/bin/env bash
# bench/s3_run.sh [--mib=N] [--reps=N] [--no-build]: a checkpoint in object storage against the
# tests' local S3 server (tests/s3/s3_server.sh: Swift's s3api on 127.0.0.1), beside Debian's AWS
# CLI (/usr/bin/aws, awscli 2.9) moving the same bytes; the table of bench/README.md ("What does
# object storage cost?"). Runs alternate ckpt and aws, --reps rounds (default 3). Builds
# build-bench/ unless --no-build. Not part of CI.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
mib=1024 reps=3 build=1
for a in "$@"; do
  case "$a" in
    --mib=*) mib=${a#--mib=} ;;
    --reps=*) reps=${a#--reps=} ;;
    --no-build) build=0 ;;
    *) echo "unknown argument $a" >&2; exit 2 ;;
  esac
done
if ((build)); then
  cmake -S . -B build-bench -G Ninja -DCMAKE_BUILD_TYPE=Release -DCKPT_BUILD_BENCH=ON -DCKPT_BUILD_TESTS=OFF -DCKPT_BUILD_EXAMPLES=OFF > /dev/null
  cmake --build build-bench --target ckpt_s3_bench > /dev/null
fi
work=build-bench/s3-work
server="$work/server"
mkdir -p "$work"
tests/s3/s3_server.sh start "$server"
trap 'tests/s3/s3_server.sh stop "$server"; rm -rf "$work"' EXIT
export AWS_ENDPOINT_URL=$(cat "$server/endpoint") AWS_ACCESS_KEY_ID=test:tester AWS_SECRET_ACCESS_KEY=testing \
       AWS_REGION=us-east-1 AWS_EC2_METADATA_DISABLED=true
aws=(/usr/bin/aws --endpoint-url "$AWS_ENDPOINT_URL")
"${aws[@]}" s3 mb s3://bench > /dev/null
bench=build-bench/bench/ckpt_s3_bench
# The file aws moves: the one ckpt writes (downloaded once), from the page cache.
"$bench" --what=save --mib="$mib" --url=s3://bench/ckpt.safetensors > /dev/null
"${aws[@]}" s3 cp s3://bench/ckpt.safetensors "$work/local.safetensors" > /dev/null
timed() { local t0=$(date +%s.%N); "$@" > /dev/null; printf "%.3f" "$(echo "$(date +%s.%N) - $t0" | bc)"; }
echo "machine: $(nproc) CPUs, $(awk '/MemTotal/ {print int($2/1024)}' /proc/meminfo) MiB, loopback; $(date -u +%F' '%H:%M) UTC; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| round | ckpt save: s, MiB/s, peak RSS above the state MiB | aws s3 cp up: s | ckpt load: s, MiB/s, peak RSS MiB | aws s3 cp down: s | ckpt load of one 4 MiB tensor: s, bytes fetched of the object's |"
echo "|---|---|---|---|---|---|"
for round in $(seq 1 "$reps"); do
  read -r _ _ s_save r_save m_save < <("$bench" --what=save --mib="$mib" --url=s3://bench/ckpt.safetensors | grep '^RESULT')
  up=$(timed "${aws[@]}" s3 cp "$work/local.safetensors" s3://bench/aws.safetensors)
  read -r _ _ s_load r_load m_load < <("$bench" --what=load --mib="$mib" --url=s3://bench/ckpt.safetensors | grep '^RESULT')
  down=$(timed "${aws[@]}" s3 cp s3://bench/aws.safetensors "$work/down.safetensors")
  rm -f "$work/down.safetensors"
  read -r _ _ s_part fetched size < <("$bench" --what=partial --mib="$mib" --url=s3://bench/ckpt.safetensors | grep '^RESULT')
  echo "| $round | $s_save, $r_save, $m_save | $up | $s_load, $r_load, $m_load | $down | $s_part, $fetched of $size |"
done
