#!/usr/bin/env bash
# Holds the time model's compute to a measurement: each pattern at tp N with its ranks as
# threads sharing this machine's cores (compute = each rank's thread CPU time, what the
# model uses) against the same run with the ranks taking turns (TP_ONE_RANK_AT_A_TIME=1:
# one rank computes at a time, with the machine to itself; compute = its wall-clock time
# less its waits). Interleaved, REPEATS times; the medians, and their ratio.
#
#   scripts/bench/compute-model.sh [OUT_DIR]     (env: PATTERNS, TP, STEPS, REPEATS)
#
# Writes OUT_DIR/compute_model.md (default plots/study). About 5 minutes on 2 cores.
# --help (or -h) prints this header and exits, building and running nothing.
[[ "${1:-}" == -h || "${1:-}" == --help ]] && { sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0; }
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-plots/study}
PATTERNS=${PATTERNS:-"tttt sppp pppp"}
TP=${TP:-4}
STEPS=${STEPS:-60}
REPEATS=${REPEATS:-3}
BIN=target/release/tp-train
[ -x "$BIN" ] || cargo build --release --bin tp-train
mkdir -p "$OUT"
WORK=$(mktemp -d /tmp/tp-harness-compute-model.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

for r in $(seq 1 "$REPEATS"); do
  for p in $PATTERNS; do
    for turns in 0 1; do
      echo "repeat $r: $p at tp $TP, one rank at a time: $turns" >&2
      TP_ONE_RANK_AT_A_TIME=$turns "$BIN" --quiet --tp "$TP" --pattern "$p" \
        --set max_iters="$STEPS" --set eval_interval=0 --set final_eval=sampled \
        --set sample_tokens=0 --out "$WORK/$p-$turns-$r" >/dev/null
    done
  done
done

python3 - "$WORK" "$TP" "$STEPS" "$REPEATS" "$PATTERNS" > "$OUT/compute_model.md" <<'EOF'
import json, statistics, subprocess, sys
work, tp, steps, repeats, patterns = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5].split()
info = dict(l.split(":", 1) for l in open("/proc/cpuinfo").read().split("\n\n")[0].splitlines() if ":" in l)
info = {k.strip(): v.strip() for k, v in info.items()}
simd = "AVX-512" if "avx512f" in info.get("flags", "").split() else "AVX2" if "avx2" in info.get("flags", "").split() else "no AVX2"
cpu = f"{info.get('model name', 'unknown CPU')}, family {info.get('cpu family', '?')} model {info.get('model', '?')}, {simd}"
cores = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
def compute(p, turns, r):
    c = json.load(open(f"{work}/{p}-{turns}-{r}/comm.json"))["compute"]
    return c
print(f"# Modelled compute against one rank at a time\n")
import datetime
print(f"mini, tp {tp}, {steps} steps, {repeats} interleaved repeats (medians), on {cpu} ({cores} cores), {datetime.date.today()}; `scripts/bench/compute-model.sh`.\n")
print("- **model**: ranks as threads sharing the cores; compute = the slowest rank's thread CPU time (less its time inside collectives), the figure `tp-plot --x time` uses;")
print("- **shared wall**: the same runs' wall-clock step less the rank's waits (what the model used before: it counts a rank's turns waiting for a core as compute);")
print("- **one at a time**: `TP_ONE_RANK_AT_A_TIME=1`, each rank computing with the machine to itself; compute = the slowest rank's wall-clock step less its waits.\n")
print("| pattern | model ms | shared wall ms | one at a time ms | model / one at a time | imbalance (model) |")
print("|---|---|---|---|---|---|")
for p in patterns:
    model = statistics.median(max(compute(p, 0, r)["per_rank_ms"]) for r in range(1, repeats + 1))
    shared = statistics.median(max(compute(p, 0, r)["per_rank_wall_ms"]) for r in range(1, repeats + 1))
    alone = statistics.median(max(compute(p, 1, r)["per_rank_wall_ms"]) for r in range(1, repeats + 1))
    imb = statistics.median(1 - min(c) / max(c) for c in (compute(p, 0, r)["per_rank_ms"] for r in range(1, repeats + 1)))
    print(f"| {p} | {model:.2f} | {shared:.2f} | {alone:.2f} | {model / alone:.3f} | {100 * imb:.1f}% |")
EOF
cat "$OUT/compute_model.md"
