#!/bin/sh
# How does ckpt compare with its peers? ckpt against HDF5, cereal, Boost.Serialization, libtorch
# and a raw write/pread, on (a) 1 GiB in 64 column-major MatrixXf, (b) the same row-major, (c)
# 100,000 vectors of 16 floats. Installs the peers' Debian packages, builds in build-peers/, prints
# the RESULT lines. Not part of CI.
#
#   bench/peers/run.sh [--smoke] [--reps=N] [--dir=SCRATCH]
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${CKPT_PEERS_BUILD:-$root/build-peers}
sizes="" reps=5 dir=/tmp/ckpt-peers
for arg in "$@"; do
  case $arg in
    --smoke) sizes="--count=4 --rows=256 --cols=256" reps=2 ;;
    --reps=*) reps=${arg#--reps=} ;;
    --dir=*) dir=${arg#--dir=} ;;
    *) echo "usage: $0 [--smoke] [--reps=N] [--dir=SCRATCH]" >&2; exit 2 ;;
  esac
done
missing=""
for p in libhdf5-dev libcereal-dev libboost-serialization1.81-dev libtorch-dev; do
  dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
[ -z "$missing" ] || { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $missing; }
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCKPT_BUILD_BENCH=ON -DCKPT_BUILD_PEERS=ON \
  -DCKPT_BUILD_TESTS=OFF -DCKPT_BUILD_EXAMPLES=OFF -DCKPT_BUILD_TOOLS=OFF >/dev/null
cmake --build "$build" --target ckpt_peers
peers="$build/bench/peers/ckpt_peers"
mkdir -p "$dir"
for c in col row; do
  # The first run prints the machine's costs the table depends on (bench/machine.hpp) above it.
  if [ $c = col ]; then machine=1; else machine=0; fi
  # shellcheck disable=SC2086
  "$peers" time --case=$c --reps="$reps" --dir="$dir" --machine=$machine $sizes
done
if [ -n "$sizes" ]; then small="--count=1000"; else small=""; fi
# shellcheck disable=SC2086
"$peers" time --case=small --reps="$reps" --dir="$dir" --machine=0 $small
# Peak RSS of one save and one load, each in a fresh process (column-major case).
for p in raw ckpt_save_sections ckpt_save_of_params HDF5 cereal Boost libtorch; do
  for op in save load; do  # the save writes the file the load reads
    # shellcheck disable=SC2086
    "$peers" rss --case=col --peer=$p --op=$op --dir="$dir" $sizes
  done
done
rm -rf "$dir"
