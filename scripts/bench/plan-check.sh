#!/usr/bin/env bash
# tp-plan's predictions against measured steps on the emulated link: mini at tp 2
# (ranks as threads), each layout trained STEPS steps on links of 1 and 0.1 Gbit/s at
# 50 us a message, its median ms/step against tp-plan's for the same link: with the
# compute rate of the run itself (`--device RUN`: the error is the link and hiding
# model's alone) and with one rate for all, a tttt run's without a link (the compute's
# own run-to-run spread added).
# Usage: scripts/bench/plan-check.sh [OUT] (default target/plan-check); prints a
# Markdown table. Minutes on a 2-core machine; run it on a quiet one.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-target/plan-check}
bin=${CARGO_TARGET_DIR:-target}/release
steps=${STEPS:-30}
mkdir -p "$out"
train() { # NAME ARGS...
  local name=$1; shift
  [ -f "$out/$name/summary.json" ] || "$bin/tp-train" --tp 2 --set max_iters="$steps" \
    --set eval_interval=0 --set sample_tokens=0 --set final_eval=sampled --quiet \
    --out "$out/$name" "$@" >/dev/null
}
field() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))$2)" "$1"; }
train compute --pattern tttt
echo "| pattern | link | measured ms/step | tp-plan, its own compute | error | tp-plan, tttt's compute | error |"
echo "|---|---|---|---|---|---|---|"
planned() { # PATTERN GBIT DEVICE
  "$bin/tp-plan" --model mini --vocab 65 --pattern "$1" --tp 2 --batch 12 \
    --link "$2:50" --device "$3" --out "$out/plan" >/dev/null
  python3 -c "
import json,sys
rows=json.load(open(sys.argv[1]))['rows']
print([r for r in rows if r['step']['pattern']==sys.argv[2]][0]['step_s']*1e3)" "$out/plan/plan.json" "$1"
}
for gbit in 1 0.1; do
  for p in tttt sppp pppp llll; do
    train "$p-$gbit" --pattern "$p" --set link_gbps="$gbit" --set link_latency_us=50
    measured=$(field "$out/$p-$gbit/summary.json" "['step_ms']")
    own=$(planned "$p" "$gbit" "$out/$p-$gbit")
    shared=$(planned "$p" "$gbit" "$out/compute")
    python3 -c "
m,a,b=float('$measured'),float('$own'),float('$shared')
print(f'| $p | $gbit Gbit/s, 50 us | {m:.1f} | {a:.1f} | {100*(a-m)/m:+.0f}% | {b:.1f} | {100*(b-m)/m:+.0f}% |')"
  done
done
