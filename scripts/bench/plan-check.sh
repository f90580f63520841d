#!/usr/bin/env bash
# tp-plan's predictions against measured steps: mini at tp 2, each layout trained STEPS
# steps, its median ms/step against tp-plan's for the same link, with the compute rate
# of the run itself (`--device RUN`: the error is the link and hiding model's alone) and
# with one rate measured without a link (the compute's own run-to-run spread added).
#
#   scripts/bench/plan-check.sh [OUT]           emulated links (ranks as threads) of 1
#                                               and 0.1 Gbit/s at 50 us a message; the
#                                               shared rate is one tttt run's
#   scripts/bench/plan-check.sh --netns [OUT]   real shaped links between two namespace
#                                               hosts (root; scripts/cluster/netns.sh,
#                                               one rank per host) of 1 and 0.1 Gbit/s,
#                                               planned on tp-plan's ns-1gbit and
#                                               ns-100mbit; the shared rate is the same
#                                               pattern's run with both ranks in one
#                                               process (link-calibration.sh's)
#
# OUT defaults to target/plan-check (target/plan-check-netns). Prints a Markdown table.
# Minutes on a 2-core machine; run it on a quiet one.
# --help (or -h) prints this header and exits, building and running nothing.
[[ "${1:-}" == -h || "${1:-}" == --help ]] && { sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0; }
set -euo pipefail
cd "$(dirname "$0")/../.."
netns=0
[ "${1:-}" = --netns ] && { netns=1; shift; }
out=${1:-target/plan-check$([ "$netns" = 1 ] && echo -netns)}
bin=${CARGO_TARGET_DIR:-target}/release
steps=${STEPS:-30}
patterns="tttt sppp pppp llll"
mkdir -p "$out"
field() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))$2)" "$1"; }
planned() { # PATTERN LINK DEVICE
  "$bin/tp-plan" --model mini --vocab 65 --pattern "$1" --tp 2 --batch 12 \
    --link "$2" --device "$3" --out "$out/plan" >/dev/null
  python3 -c "
import json,sys
rows=json.load(open(sys.argv[1]))['rows']
print([r for r in rows if r['step']['pattern']==sys.argv[2]][0]['step_s']*1e3)" "$out/plan/plan.json" "$1"
}
row() { # PATTERN LINK-LABEL RUN PLAN-LINK SHARED-DEVICE
  local measured own shared
  measured=$(field "$3/summary.json" "['step_ms']")
  own=$(planned "$1" "$4" "$3")
  shared=$(planned "$1" "$4" "$5")
  python3 -c "
m,a,b=float('$measured'),float('$own'),float('$shared')
print(f'| $1 | $2 | {m:.1f} | {a:.1f} | {100*(a-m)/m:+.0f}% | {b:.1f} | {100*(b-m)/m:+.0f}% |')"
}
header() {
  echo "| pattern | link | measured ms/step | tp-plan, its own compute | error | tp-plan, $1 | error |"
  echo "|---|---|---|---|---|---|---|"
}
if [ "$netns" = 1 ]; then
  [ -f "$out/runs.csv" ] || scripts/cluster/link-calibration.sh "$out" --rates "1gbit 100mbit" \
    --patterns "$patterns" --steps "$steps" >&2
  header "the one-process run's compute"
  for r in 1gbit 100mbit; do
    for p in $patterns; do
      row "$p" "$r shaped, namespace hosts" "$out/$r-$p" "ns-$r" "$out/threads-$p"
    done
  done
  exit 0
fi
train() { # NAME ARGS...
  local name=$1; shift
  [ -f "$out/$name/summary.json" ] || "$bin/tp-train" --tp 2 --set max_iters="$steps" \
    --set eval_interval=0 --set sample_tokens=0 --set final_eval=sampled --quiet \
    --out "$out/$name" "$@" >/dev/null
}
train compute --pattern tttt
header "tttt's compute"
for gbit in 1 0.1; do
  for p in $patterns; do
    train "$p-$gbit" --pattern "$p" --set link_gbps="$gbit" --set link_latency_us=50
    row "$p" "$gbit Gbit/s, 50 us" "$out/$p-$gbit" "$gbit:50" "$out/compute"
  done
done
