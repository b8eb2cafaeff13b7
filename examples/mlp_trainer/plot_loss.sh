#!/usr/bin/env bash
# Plots the loss of an uninterrupted run and of a stopped-and-resumed run on one PNG, with gnuplot
# (Debian: gnuplot-nox).
#
#   plot_loss.sh OUT.png STRAIGHT.csv RESUMED.csv STOP_STEP
#
# Each CSV is the `step,loss` file a run writes (<ckpt-dir>/loss.csv); a resumed run's file holds
# the whole curve. A vertical line marks where the interrupted run stopped.
set -euo pipefail
[[ $# -eq 4 ]] || { echo "usage: $0 OUT.png STRAIGHT.csv RESUMED.csv STOP_STEP" >&2; exit 2; }
out="$1" straight="$2" resumed="$3" stop="$4"
gnuplot <<GP
set terminal pngcairo size 900,500 noenhanced
set output "$out"
set datafile separator ","
set key top right
set logscale y
set xlabel "step"
set ylabel "training loss (log scale)"
set title "mlp_trainer: uninterrupted vs stopped at step $stop and resumed"
set arrow from $stop, graph 0 to $stop, graph 1 nohead dashtype 2 linecolor rgb "gray40"
plot "$straight" every ::1 using 1:2 with lines linewidth 3 linecolor rgb "#1f77b4" title "uninterrupted", \
     "$resumed" every ::1 using 1:2 with lines linewidth 1 linecolor rgb "#ff7f0e" title "stopped at $stop and resumed"
GP
echo "wrote $out"
