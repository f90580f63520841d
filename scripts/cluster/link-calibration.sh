#!/usr/bin/env bash
# Measures step time on real shaped links and sets it next to the link model.
#
#   scripts/cluster/link-calibration.sh [OUT] [--rates "1gbit 500mbit 200mbit 100mbit"]
#                               [--patterns "tttt sppp pppp"] [--steps 40] [--append]
#
# A pattern may carry a compressed all-reduce type: `llll+int8` runs llll with
# comm_dtype int8 (also fp8, bf16). TP_MPI_COMM_THREAD=0 in the environment runs the
# ladder's started all-reduces inline under MPI (no communication thread), for comparison.
#
# For every pattern: one run with both ranks as threads of one process (the compute,
# nothing on a wire), then for every rate a run of tp 2 over two hosts
# (scripts/cluster/netns.sh, one rank per host, so every TP all-reduce crosses the
# shaped link). Each run is the mini model, batch 12 x 64, `steps` steps. The runs land
# in OUT/ (default runs/link-calibration) with OUT/runs.csv listing them, and
# `tp-plot --link-calibration OUT` turns them into the table and figure (`--append` adds
# patterns to an OUT measured before). Root only.
# --help (or -h) prints this header and exits, building and running nothing.
[[ "${1:-}" == -h || "${1:-}" == --help ]] && { sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0; }
set -euo pipefail
cd "$(dirname "$0")/../.."

out=runs/link-calibration
rates="1gbit 500mbit 200mbit 100mbit"
patterns="tttt sppp pppp"
steps=40
append=0
while [ "$#" -gt 0 ]; do
  case "$1" in
    --rates) rates=$2; shift 2 ;;
    --patterns) patterns=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --append) append=1; shift ;;
    -*) echo "link-calibration: error: unknown option $1" >&2; exit 2 ;;
    *) out=$1; shift ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "link-calibration: error: the hosts are network namespaces: run it as root" >&2; exit 2; }
bin=target/release/tp-train
[ -x "$bin" ] || { echo "link-calibration: error: $bin is missing: run scripts/setup.sh first" >&2; exit 2; }

mkdir -p "$out"
common=(--tp 2 --quiet --set max_iters="$steps" --set eval_interval=0 --set sample_tokens=0
  --set final_eval=sampled --set eval_iters=1 --set checkpoint_interval=0)
[ "$append" = 1 ] && [ -f "$out/runs.csv" ] || echo "kind,rate,pattern,run" >"$out/runs.csv"
for p in $patterns; do
  pattern=${p%%+*}
  dtype=f32
  [ "$pattern" != "$p" ] && dtype=${p#*+}
  run=(--pattern "$pattern" --set comm_dtype="$dtype" "${common[@]}")
  dir="$out/threads-$p"
  rm -rf "$dir"
  RAYON_NUM_THREADS=1 "$bin" "${run[@]}" --backend threads --out "$dir" >/dev/null
  echo "threads,,$p,threads-$p" >>"$out/runs.csv"
  for r in $rates; do
    dir="$out/$r-$p"
    rm -rf "$dir"
    scripts/cluster/netns.sh run 2 --slots 1 --rate "$r" -- \
      "$bin" "${run[@]}" --out "$dir" >/dev/null
    echo "link,$r,$p,$r-$p" >>"$out/runs.csv"
    echo "link-calibration: $p at $r: $(grep -o '"step_ms": [0-9.]*' "$dir/summary.json")"
  done
done
echo "link-calibration: runs in $out (runs.csv); next: tp-plot --link-calibration $out"
