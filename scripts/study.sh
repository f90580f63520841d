#!/usr/bin/env bash
# The study of issue 25, end to end: the loss penalty of removing, hiding and shrinking
# Megatron's synchronisations, with enough seeds to put intervals on it, over TP degree,
# training length and model size; then its table and figures in plots/study/.
#
#   scripts/study.sh            run (or resume) every sweep, then draw
#   scripts/study.sh --draw     draw from the runs there are (unfinished ones left out)
#
# plots/study/: penalty.md/csv and penalty_change.md/csv (the tables), penalty_vs_*.png
# (the figures), time/ (loss against modelled time at tp 2, 2000 iterations), time_length/
# (the same for 6000 iterations), time_size/ (for 6 x 256), compute_model.md (scripts/bench/compute-model.sh).
#
# Each sweep is resumable: interrupt it (Ctrl-C) and run this again; finished runs are
# skipped and a half-done one continues from its checkpoint. 156 runs, about 5.5 hours on
# 2 cores (AMD EPYC Zen 4, 2026-11-24: the runs' own wall time); the sweeps in order:
#   configs/sweeps/study_power_tp2.yaml   mini, tp 2, 6 patterns x 8 seeds
#   configs/sweeps/study_shrink.yaml      mini, tp 2, tttt and sppp with int8 sums, 4 seeds
#   configs/sweeps/study_tp_degree.yaml   mini (8 heads), tp 2/4/8, 6 patterns x 4 seeds
#   configs/sweeps/study_length.yaml      mini, tp 2, 6000 iterations, 4 patterns x 4 seeds
#   configs/sweeps/study_size.yaml        6 x 256, tp 2, 4 patterns x 3 seeds
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${TP_STUDY_BIN:-target/release}
SWEEPS="study_power_tp2 study_shrink study_tp_degree study_length study_size"
OUT=plots/study

if [ "${1:-}" != "--draw" ]; then
  [ -x "$BIN/tp-sweep" ] || cargo build --release
  for s in $SWEEPS; do
    echo "== $s ($(date -u +%FT%TZ))"
    "$BIN/tp-sweep" "configs/sweeps/$s.yaml"
  done
fi

mkdir -p "$OUT"
# The finished runs of a sweep (a run still training has no summary.json yet).
runs() {
  find "runs/$1" -mindepth 2 -maxdepth 2 -name summary.json 2>/dev/null | xargs -r -n1 dirname | sort
}
# The penalty table and figures over every setting.
# shellcheck disable=SC2046
"$BIN/tp-plot" --penalty $(for s in $SWEEPS; do runs "$s"; done) --out "$OUT" > /dev/null
# Loss against modelled time on 1 Gbit/s and 100 Mbit/s links (this machine's compute,
# the ring model at the links' rates with 50 us a message): Megatron's layout and the
# best of each family at tp 2 (remove: sppp and pppp; hide: llll; shrink: int8 sums).
# A run re-measured in runs/study_timing (the same config and seed, for runs made before
# compute was each rank's thread CPU time) stands in for its namesake.
time_runs=""
for r in $(runs study_power_tp2 | grep -E 'pattern=(tttt|sppp|pppp|llll),'); do
  again="runs/study_timing/$(basename "$r")"
  if [ -f "$again/summary.json" ]; then time_runs="$time_runs $again"; else time_runs="$time_runs $r"; fi
done
time_runs="$time_runs $(runs study_shrink | tr '\n' ' ')"
# shellcheck disable=SC2086
"$BIN/tp-plot" $time_runs --out "$OUT/time" --x time --link 1:50 --link 0.1:50 > /dev/null
# The 6000-iteration runs the same way, timed to tttt's mean final val loss there (the
# loss Megatron's layout ends at: which layouts get there, and how much sooner).
if [ -n "$(runs study_length)" ]; then
  target=$(awk -F, '$5 == 6000 && $6 == "tttt" { print $10 }' "$OUT/penalty.csv")
  # shellcheck disable=SC2046
  "$BIN/tp-plot" $(runs study_length) --out "$OUT/time_length" --x time --link 1:50 --link 0.1:50 \
    ${target:+--target "$target"} > /dev/null
fi
# The larger model's runs the same way (all-reduces twice as wide, a step's compute
# several times as long), timed like time/ to the worst final val loss (every layout
# reaches it; tttttt's sampled curve ends just above its whole-split final loss).
if [ -n "$(runs study_size)" ]; then
  # shellcheck disable=SC2046
  "$BIN/tp-plot" $(runs study_size) --out "$OUT/time_size" --x time --link 1:50 --link 0.1:50 > /dev/null
fi
cpu_field() { sed -n "s/^$1\s*: //p" /proc/cpuinfo | head -1; }
{
  echo "Drawn by scripts/study.sh on $(cpu_field 'model name') (family $(cpu_field 'cpu family')" \
    "model $(cpu_field model)), $(nproc) cores, $(date -u +%F). The machine each setting's" \
    "runs were trained on, and their hours of training, are in penalty.md (runs made" \
    "before summary.json kept its machine say \"not recorded\")."
} > "$OUT/MACHINE.md"
echo "table and figures in $OUT/"
