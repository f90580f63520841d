#!/usr/bin/env bash
# The studies of issues 25 and 35, end to end: the loss penalty of removing, hiding and
# shrinking Megatron's synchronisations, with enough seeds to put intervals on it, over
# TP degree, training length, model size, depth and a second corpus; then their tables
# and figures in plots/study/.
#
#   scripts/study.sh              run (or resume) every sweep, keep their records, draw
#   scripts/study.sh SWEEP...     only these sweeps (e.g. study_depth), then draw
#   scripts/study.sh --draw       draw from the records there are (unfinished runs left out)
#   scripts/study.sh --keep       keep the records of the runs finished so far (while a
#                                 sweep trains: commit them, and nothing finished is lost)
#   scripts/study.sh --status [SWEEP...]  where each sweep stands (default: issue 63's), read
#                                 from runs/<sweep>, or the kept records where runs/ has
#                                 none: each round's runs, the hours left, the tuning so
#                                 far (tp-sweep --status; runs and writes nothing)
#
# Every finished run's records (config.yaml, log.jsonl as log.jsonl.gz, comm.json,
# summary.json, eval.json: what the tables and figures read, ~10 KB a run, no
# checkpoints) are kept in plots/study/runs/<sweep>/<point>/ and committed with the
# figures, so a fresh clone redraws every figure without training, and a sweep
# interrupted in one checkout resumes in another: kept runs are put back into runs/ first and the sweep skips them. (The
# records of issue 25's own runs were not kept, so its tables in plots/study/*.md are
# redrawn only when all of its sweeps are trained again.)
#
# Issue 25's figures (plots/study/): penalty.md/csv and penalty_change.md/csv (the
# tables), penalty_vs_*.png, time/ (loss against modelled time at tp 2, 2000
# iterations), time_length/ (6000 iterations), time_size/ (6 x 256), compute_model.md
# (scripts/bench/compute-model.sh). 156 runs, about 5.5 hours on 2 cores (AMD EPYC Zen 4,
# 2026-11-24: the runs' own wall time):
#   configs/sweeps/study_power_tp2.yaml   mini, tp 2, 6 patterns x 8 seeds
#   configs/sweeps/study_shrink.yaml      mini, tp 2, tttt and sppp with int8 sums, 4 seeds
#   configs/sweeps/study_tp_degree.yaml   mini (8 heads), tp 2/4/8, 6 patterns x 4 seeds
#   configs/sweeps/study_length.yaml      mini, tp 2, 6000 iterations, 4 patterns x 4 seeds
#   configs/sweeps/study_size.yaml        6 x 256, tp 2, 4 patterns x 3 seeds
# Issue 35's (plots/study/depth/ and plots/study/names/; study_power_tp2 is its 4-layer
# reference, re-trained with its records kept): 140 runs and the 48 of study_power_tp2,
# 6.5 hours of training steps on 2-core AMD EPYC VMs (family 25 model 1 and family 26
# model 2; wall time about twice that with evaluations), 2026-11-25:
#   configs/sweeps/study_depth.yaml       12 x 128, tp 2, 8 layouts x 8 seeds
#   configs/sweeps/study_depth_tp4.yaml   12 x 128, tp 4, 4 layouts x 4 seeds
#   configs/sweeps/study_names.yaml       mini on the names corpus, 6 patterns x 8 seeds
#   configs/sweeps/study_names_depth.yaml 12 x 128 on names, 3 layouts x 4 seeds
# Issue 46's (plots/study/tuned/): each layout at its own best peak learning rate, chosen
# on selection seeds (tune: in the sweep file), compared on report seeds:
#   configs/sweeps/study_tuned.yaml       12 x 128, tp 2, 6 layouts x 5+ rates x 2
#                                         selection seeds, then 8 report seeds at each best
#   configs/sweeps/study_tuned_long.yaml  the same at 6000 iterations, 3 layouts x 4 seeds
#   configs/sweeps/study_tuned_depth.yaml 4, 6 and 8 layers, all-t, s-then-p, all-p at
#                                         their 12-layer family's rate, 8 seeds
#   configs/sweeps/study_names_tuned.yaml 12 x 128 on names, 3 layouts tuned, 4 seeds
#   configs/sweeps/study_names_tuned_lower.yaml  12xt of it at the next rate down (a check)
# Issue 63's (plots/study/scale/): the tuned answer along width, TP degree and length, each
# (setting, layout) cell tuned on its own (selection seeds 101 and 102, the grid extended
# past an edge and refined once at the geometric midpoints), report seeds disjoint:
#   configs/sweeps/study_scale_width.yaml  W: 12 x 256 (4 heads of 64), tp 2, 4 layouts x 6 seeds
#   configs/sweeps/study_scale_tp.yaml     N: 12 x 128 (8 heads of 16) at tp 2 and 4, 3 layouts x 6 seeds
#   configs/sweeps/study_scale_length.yaml T: 12 x 128, 6000 iterations re-tuned, 3 layouts x 4 seeds
#   configs/sweeps/study_scale_width_tp.yaml WN: 12 x 256 (8 heads) at tp 4, C/N as N's tp 2 cell (last: if time allows)
# --help (or -h) prints this header and exits, building and running nothing.
[[ "${1:-}" == -h || "${1:-}" == --help ]] && { sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0; }
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${TP_STUDY_BIN:-${CARGO_TARGET_DIR:-target}/release}
ISSUE25="study_power_tp2 study_shrink study_tp_degree study_length study_size"
ISSUE35="study_depth study_depth_tp4 study_names study_names_depth"
ISSUE46="study_tuned study_tuned_long study_tuned_depth study_names_tuned study_names_tuned_lower"
ISSUE63="study_scale_width study_scale_tp study_scale_length study_scale_width_tp"
OUT=plots/study
KEPT=$OUT/runs
RECORDS="config.yaml log.jsonl comm.json summary.json eval.json diverged.json"
# A tuned sweep's record of what it tunes and chose, beside its runs.
SWEEP_RECORDS="tuning.json"

# Whether a run ended: finished (summary.json), or diverged (diverged.json: a learning
# rate too high, a tuned sweep's outcome like any other).
ended() {
  [ -f "$1/summary.json" ] || [ -f "$1/diverged.json" ]
}
# Whether a run's records agree and nothing writes them now: not held by a tp-train
# (a sweep extending a finished run rewrites its config and log before its summary),
# and its summary of as many steps as its config asks (a summary of 600 steps beside a
# config of 1000 would be kept as the 1000-step result).
settled() {
  local steps iters
  [ -f "$1/.lock" ] && ! flock -n -E 99 "$1/.lock" true 2>/dev/null && return 1
  [ -f "$1/summary.json" ] || return 0
  steps=$(sed -n 's/^ *"steps": *\([0-9]*\).*/\1/p' "$1/summary.json" | head -1)
  iters=$(sed -n 's/^max_iters: *//p' "$1/config.yaml" | head -1)
  [ -n "$steps" ] && [ "$steps" = "$iters" ]
}
# Kept runs back into runs/, where a sweep finds them finished (never over a finished run).
restore() {
  local sweep=$1 run f
  for f in $SWEEP_RECORDS; do
    [ -f "$KEPT/$sweep/$f" ] && [ ! -f "runs/$sweep/$f" ] && mkdir -p "runs/$sweep" && cp "$KEPT/$sweep/$f" "runs/$sweep/$f"
  done
  for run in "$KEPT/$sweep"/*/; do
    ended "$run" || continue
    local to="runs/$sweep/$(basename "$run")"
    ended "$to" && continue
    rm -rf "$to" && mkdir -p "$to"
    cp "$run"/* "$to/"
    # (-f: a plain log beside it, kept by an older study.sh, holds the same lines.)
    if [ -f "$to/log.jsonl.gz" ]; then gzip -df "$to/log.jsonl.gz"; fi
  done
  return 0
}
# The finished runs' records into the kept folder (a record replaced only by a newer run).
keep() {
  local sweep=$1 run f
  for f in $SWEEP_RECORDS; do
    [ -f "runs/$sweep/$f" ] && mkdir -p "$KEPT/$sweep" && cp -p "runs/$sweep/$f" "$KEPT/$sweep/$f"
  done
  for run in runs/"$sweep"/*/; do
    ended "$run" || continue
    settled "$run" || { echo "study.sh: $run is being extended or its records disagree: not kept now"; continue; }
    local to="$KEPT/$sweep/$(basename "$run")"
    mkdir -p "$to"
    for f in $RECORDS; do
      [ -f "$run/$f" ] || continue
      if [ "$f" = log.jsonl ]; then
        # Kept compressed (an eighth of the bytes; tp-plot reads it as it lies): written
        # beside, then moved over, so a kill leaves the old record or the new one.
        gzip -9n -c "$run/$f" >"$to/$f.gz.tmp" && mv "$to/$f.gz.tmp" "$to/$f.gz" && rm -f "$to/$f"
      else
        cp -p "$run/$f" "$to/$f"
      fi
    done
  done
  # A missing record ends the loop on a false test: under `set -e` that would stop the
  # whole script, silently, before it keeps the next sweep.
  return 0
}
# The ended runs of a sweep (finished or diverged): kept ones, and any in runs/ not kept
# yet.
runs() {
  {
    find "$KEPT/$1" -mindepth 2 -maxdepth 2 \( -name summary.json -o -name diverged.json \) 2>/dev/null
    find "runs/$1" -mindepth 2 -maxdepth 2 \( -name summary.json -o -name diverged.json \) 2>/dev/null |
      while read -r s; do ended "$KEPT/$1/$(basename "$(dirname "$s")")" || echo "$s"; done
  } | xargs -r -n1 dirname | sort -u
}
# Whether every sweep named has finished runs to draw from.
all_there() {
  local s
  for s in "$@"; do [ -n "$(runs "$s")" ] || return 1; done
}

# A signal to this script reaches the sweep it waits for (which passes it to its run and
# stops once that run has ended), then the script keeps what finished and stops: no
# tp-sweep or tp-train is left running under PID 1.
child="" stopped=0
forward() { # signal
  stopped=1
  [ -n "$child" ] && kill -"$1" "$child" 2>/dev/null
}
trap 'forward TERM' TERM
trap 'forward INT' INT
trap 'forward HUP' HUP
run_sweep() { # sweep file
  local status=0
  "$BIN/tp-sweep" "$1" &
  child=$!
  # `wait` returns early when a trapped signal arrives: wait again until the sweep ends.
  while :; do
    status=0
    wait "$child" || status=$?
    kill -0 "$child" 2>/dev/null || break
  done
  child=""
  return "$status"
}

if [ "${1:-}" = "--keep" ]; then
  for s in $ISSUE25 $ISSUE35 $ISSUE46 $ISSUE63; do keep "$s"; done
  echo "records of the finished runs in $KEPT/"
  exit 0
fi
if [ "${1:-}" = "--status" ]; then
  shift
  [ -x "$BIN/tp-sweep" ] || cargo build --release
  for s in ${*:-$ISSUE63}; do
    dir=runs/$s
    [ -d "$dir" ] || dir=$KEPT/$s
    "$BIN/tp-sweep" "configs/sweeps/$s.yaml" --out "$dir" --status
    echo
  done
  exit 0
fi
if [ "${1:-}" != "--draw" ]; then
  sweeps=${*:-"$ISSUE25 $ISSUE35 $ISSUE46 $ISSUE63"}
  [ -x "$BIN/tp-sweep" ] || cargo build --release
  for s in $sweeps; do
    echo "== $s ($(date -u +%FT%TZ))"
    # study_tuned reuses study_depth's runs at its own config (reuse:); the tuned
    # sweeps after it take its choices (tune.from).
    case $s in
      study_tuned) restore study_depth ;;
      study_tuned_*) restore study_tuned ;;
      study_names_tuned) restore study_names_depth ;;
      # Its report runs at study_tuned_long's rate and seeds are copied from there (reuse:).
      study_scale_length) restore study_tuned_long ;;
    esac
    restore "$s"
    status=0
    run_sweep "configs/sweeps/$s.yaml" || status=$?
    keep "$s"
    [ "$stopped" = 0 ] || { echo "study.sh: stopped by a signal after $s's run under way ended; run it again to resume"; exit "$status"; }
    [ "$status" = 0 ] || exit "$status"
  done
fi

mkdir -p "$OUT"
cpu_field() { sed -n "s/^$1\s*: //p" /proc/cpuinfo | head -1; }
machine_note() {
  echo "Drawn by scripts/study.sh on $(cpu_field 'model name') (family $(cpu_field 'cpu family')" \
    "model $(cpu_field model)), $(nproc) cores, $(date -u +%F). The machine each setting's" \
    "runs were trained on, and their hours of training, are in penalty.md (runs made" \
    "before summary.json kept its machine say \"not recorded\")."
}

# Issue 25 (plots/study/): only with every one of its sweeps there, so that a partial
# set of runs never overwrites its tables.
# shellcheck disable=SC2086
if all_there $ISSUE25; then
  # shellcheck disable=SC2046
  "$BIN/tp-plot" --penalty $(for s in $ISSUE25; do runs "$s"; done) --out "$OUT" > /dev/null
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
  target=$(awk -F, '$5 == 6000 && $6 == "tttt" { print $10 }' "$OUT/penalty.csv")
  # shellcheck disable=SC2046
  "$BIN/tp-plot" $(runs study_length) --out "$OUT/time_length" --x time --link 1:50 --link 0.1:50 \
    ${target:+--target "$target"} > /dev/null
  # The larger model's runs the same way, timed like time/ to the worst final val loss
  # (every layout reaches it).
  # shellcheck disable=SC2046
  "$BIN/tp-plot" $(runs study_size) --out "$OUT/time_size" --x time --link 1:50 --link 0.1:50 > /dev/null
  machine_note > "$OUT/MACHINE.md"
else
  echo "plots/study/*.md kept as they are: not every sweep of issue 25 has runs here ($ISSUE25)"
fi

# Issue 35, depth (plots/study/depth/): the 12-layer layouts at tp 2 and 4, beside the
# 4-layer runs of study_power_tp2 (the same seeds: layouts stretched across depths pair
# by seed in penalty_change.md); the s-then-p family against the length of its p runs;
# the 12-layer family against modelled time, timed to the worst final val loss of 12xt's
# seeds (which each of them reaches, so that every seed pairs in "x sooner").
if all_there study_depth; then
  # shellcheck disable=SC2046
  "$BIN/tp-plot" --penalty --margin 0.01 $(runs study_power_tp2) $(runs study_depth | grep -v "pattern=6x_sp_$") \
    $(runs study_depth_tp4) --out "$OUT/depth" > /dev/null
  # shellcheck disable=SC2046
  "$BIN/tp-plot" $(runs study_depth | grep -v "pattern=6x_sp_$") --out "$OUT/depth/time" --x time --link 1:50 --link 0.1:50 \
    --baseline 12xt --target baseline > /dev/null
  # The 4-layer layouts kept in study_power_tp2 (Megatron's, the ladder, the two cuts) the
  # same way: one CPU's compute, timed to the worst final loss of tttt's seeds.
  # shellcheck disable=SC2046
  "$BIN/tp-plot" $(runs study_power_tp2 | grep -E 'pattern=(tttt|sppp|pppp|llll),') --out "$OUT/depth/time_4layers" \
    --x time --link 1:50 --link 0.1:50 --baseline tttt --target baseline > /dev/null
  machine_note > "$OUT/depth/MACHINE.md"
fi
# Issue 35, other data (plots/study/names/): the names corpus beside Shakespeare, the
# same layouts at 4 and 12 layers, each corpus paired with its own all-t runs.
if all_there study_names; then
  # shellcheck disable=SC2046
  "$BIN/tp-plot" --penalty --margin 0.01 $(runs study_names) $(runs study_names_depth) \
    $(runs study_power_tp2) $(runs study_depth | grep -E 'pattern=(12xt|3xsppp|12xp)$') \
    --out "$OUT/names" > /dev/null
  machine_note > "$OUT/names/MACHINE.md"
fi
# Issue 46, tuned (plots/study/tuned/): each layout at its own best learning rate. The
# penalty tables (Holm-corrected, non-inferiority at a margin of 0.01) over 12 layers at
# 2000 and 6000 iterations and 4, 6 and 8 layers; the tuning figure; loss against
# modelled time at 1 and 0.1 Gbit/s from one CPU's compute, timed to the worst final
# loss of 12xt's seeds.
if all_there study_tuned && { [ -f "$KEPT/study_tuned/tuning.json" ] || [ -f runs/study_tuned/tuning.json ]; }; then
  # With the same layouts at lr 1e-3 (study_depth at 12 layers, study_power_tp2 at 4,
  # study_names_depth on names): penalty_change.md's tuning rows say what the tuned rate
  # did to each penalty, paired by seed.
  # shellcheck disable=SC2046
  "$BIN/tp-plot" --penalty --margin 0.01 $(for s in $ISSUE46; do runs "$s"; done) \
    $(runs study_depth | grep -E 'pattern=(12xt|12xs|3xsppp|s11xp|12xp|12xl)$') \
    $(runs study_power_tp2 | grep -E 'pattern=(tttt|sppp|pppp)(,|$)') \
    $(if all_there study_names_tuned; then runs study_names_depth; fi) \
    --out "$OUT/tuned" > /dev/null
  # On names, the check by hand (exploratory: chosen after 12xt's report seeds stalled
  # at its selected 8e-3): 12xt at 4e-3 on the report seeds (study_names_tuned_lower)
  # against 3xsppp and 12xp at their selected rates, each as it ran (--each-at).
  if all_there study_names_tuned_lower; then
    # shellcheck disable=SC2046
    "$BIN/tp-plot" --penalty --margin 0.01 --each-at learning_rate $(runs study_names_tuned_lower) \
      $(runs study_names_tuned | grep -E 'pattern=(3xsppp,learning_rate=0.002|12xp,learning_rate=0.008),seed=(1337|1|2|3)$') \
      --out "$OUT/tuned/names_check" > /dev/null
  fi
  # The README's figure: the tuned penalty against all-reduces a pass at 4, 6, 8 and 12
  # layers (Shakespeare, 2000 iterations; the longer runs and names left out).
  if all_there study_tuned_depth; then
    # shellcheck disable=SC2046
    "$BIN/tp-plot" --penalty --margin 0.01 $(runs study_tuned) $(runs study_tuned_depth) \
      --out "$OUT/tuned/depth" > /dev/null
  fi
  # shellcheck disable=SC2046
  "$BIN/tp-plot" $(runs study_tuned) --out "$OUT/tuned/time" --x time --link 1:50 --link 0.1:50 \
    --baseline 12xt --target baseline-mean,baseline,1.85 > /dev/null
  # The step ratio is the CPU's: study_tuned ran on one (an AVX2 Zen 3); the same
  # layouts' compute was also measured on an AVX-512 EPYC (family 26 model 2) by
  # study_depth's runs (lr 1e-3: the step, not the curve, is what this table is for).
  if all_there study_depth; then
    # shellcheck disable=SC2046
    "$BIN/tp-plot" $(runs study_depth | grep -E 'pattern=(12xt|12xs|3xsppp|s11xp|12xp)$') --out "$OUT/tuned/time_other_cpu" \
      --x time --link 1:50 --link 0.1:50 --baseline 12xt --cpu "family 26" > /dev/null
  fi
  machine_note > "$OUT/tuned/MACHINE.md"
elif all_there study_tuned; then
  echo "plots/study/tuned/ not drawn: study_tuned has not made its choices final (its tuning.json is written when its report runs end)"
fi
# Issue 63, scale (plots/study/scale/): the tuned 12 x 128 setting (study_tuned) beside
# the cells of its scale study that have made their choices (a tuning.json: a cell still
# selecting is not drawn, since its runs would read as untuned): penalty_by_axis.md
# gives each layout's penalty along width, TP degree and length with corrected intervals
# and sign tests; the time tables take x sooner apart (step ratio x loss-curve ratio) at
# the baseline's mean final loss and its worst seed's, on one CPU's compute each.
tuned_there() { [ -f "$KEPT/$1/tuning.json" ] || [ -f "runs/$1/tuning.json" ]; }
scale=""
for s in $ISSUE63; do
  # (runs' find fails where runs/ has no such sweep: an assignment's status is its
  # substitution's, and under set -e that would end the script here.)
  if tuned_there "$s"; then scale="$scale $(runs "$s" | tr '\n' ' ' || true)"; fi
done
if [ -n "$scale" ] && all_there study_tuned && tuned_there study_tuned; then
  # shellcheck disable=SC2046,SC2086
  "$BIN/tp-plot" --penalty --margin 0.01 $(runs study_tuned | grep -E 'pattern=(12xt|3xsppp|s11xp|12xp),') \
    $scale --out "$OUT/scale" > /dev/null
  for s in $ISSUE63; do
    tuned_there "$s" || continue
    name=${s#study_scale_}
    case $s in
      # Two degrees, two baselines: a table each (time_tp/tp=2, time_tp/tp=4).
      # (study_scale_width_tp is one degree: its name's suffix is width_tp.)
      study_scale_tp) cells="tp=2 tp=4" ;;
      *) cells="all" ;;
    esac
    for c in $cells; do
      out="$OUT/scale/time_$name"
      [ "$c" = all ] || out="$out/$c"
      # shellcheck disable=SC2046
      "$BIN/tp-plot" $(runs "$s" | { [ "$c" = all ] && cat || grep -F -- "$c,"; }) --out "$out" \
        --x time --link 1:50 --link 0.1:50 --baseline 12xt --target baseline-mean,baseline > /dev/null
    done
  done
  machine_note > "$OUT/scale/MACHINE.md"
fi
echo "tables and figures in $OUT/"
