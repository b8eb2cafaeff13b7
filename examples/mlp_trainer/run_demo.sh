#!/usr/bin/env bash
# Trains mlp_trainer once without interruption and once stopped halfway and resumed, checks that
# the final parameters are byte-identical, and plots both loss curves into loss.png.
#
#   examples/mlp_trainer/run_demo.sh [path/to/mlp_trainer] [output folder]
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
trainer="${1:-$here/../../build/examples/mlp_trainer}"
out="${2:-mlp_demo}"
steps=3000
half=$((steps / 2))

rm -rf "$out"
mkdir -p "$out"
"$trainer" --steps "$steps" --ckpt-dir "$out/straight" --params-out "$out/straight.safetensors"
"$trainer" --steps "$half" --ckpt-dir "$out/resumed"
"$trainer" --steps "$steps" --ckpt-dir "$out/resumed" --resume --params-out "$out/resumed.safetensors"

if cmp -s "$out/straight.safetensors" "$out/resumed.safetensors"; then
  echo "final parameters: byte-identical"
else
  echo "final parameters differ" >&2
  exit 1
fi
if ! command -v gnuplot >/dev/null; then
  echo "no gnuplot (Debian: gnuplot-nox): skipping the plot (the CSVs are in $out/*/loss.csv)"
  exit 0
fi
"$here/plot_loss.sh" "$out/loss.png" "$out/straight/loss.csv" "$out/resumed/loss.csv" "$half"
