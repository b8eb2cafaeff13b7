#!/bin/sh
# How does reading torch.save compare with safetensors? A 1 GiB torch.save file (256 x 1024 x
# 1024 F32, written by python3-torch) against the same tensors as safetensors (written by `ckpt
# convert`), loaded and extracted into a struct of Eigen::MatrixXf; then each format's peak RSS in
# a fresh process.
#
#   bench/torch_run.sh BUILD_DIR [WORK_DIR]   (BUILD_DIR configured with -DCKPT_BUILD_BENCH=ON)
set -eu
build=$1
work=${2:-/tmp/ckpt-torch-bench}
mkdir -p "$work"
cmake --build "$build" --target ckpt_bench_torch ckpt_tool ckpt_machine
# The machine's costs the figures depend on (bench/machine.cpp), printed above them.
"$build/bench/ckpt_machine" --dir="$work"
if [ ! -f "$work/model.pt" ]; then
  /usr/bin/python3 -c "
import torch
torch.manual_seed(0)
torch.save({'layers': [torch.randn(1024, 1024) for _ in range(256)]}, '$work/model.pt')"
fi
[ -f "$work/model.safetensors" ] || "$build/tools/ckpt" convert "$work/model.pt" "$work/model.safetensors" --no-digest
# Seven alternating runs of each in fresh processes (the first pair warms the page cache).
bench="$build/bench/ckpt_bench_torch"
"$bench" time "$work/model.pt" >/dev/null; "$bench" time "$work/model.safetensors" >/dev/null
: >"$work/times"
for _ in 1 2 3 4 5 6 7; do
  echo "pt $("$bench" time "$work/model.pt")" >>"$work/times"
  echo "st $("$bench" time "$work/model.safetensors")" >>"$work/times"
done
median() { grep "^$1 " "$work/times" | cut -d' ' -f2 | sort -n | sed -n 4p; }
pt=$(median pt); st=$(median st)
echo "RESULT torch.save load+extract: $pt s (median of 7)"
echo "RESULT safetensors load+extract: $st s (median of 7)"
echo "RESULT ratio torch/safetensors: $(echo "$pt $st" | awk '{printf "%.2f", $1 / $2}')"
"$build/bench/ckpt_bench_torch" rss "$work/model.pt"
"$build/bench/ckpt_bench_torch" rss "$work/model.safetensors"
