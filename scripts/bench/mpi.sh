#!/usr/bin/env bash
# Step time under mpirun -n 2 (tp 2) for tttt, tstt, sppp, pppp, without emulation and
# with a 10 GbE-like emulated link (10 Gbit/s, 25 us), interleaved; prints each and the
# ratio to tttt. Extra arguments go to every tp-train call (e.g. --set n_embd=256).
# --help (or -h) prints this header and exits, building and running nothing.
[[ "${1:-}" == -h || "${1:-}" == --help ]] && { sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0; }
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${BENCH_OUT:-runs/bench-mpi-$(date +%Y%m%d-%H%M%S)}
steps=${BENCH_STEPS:-30}
mkdir -p "$out"
for link in none 10gbe; do
  extra=()
  [ "$link" = 10gbe ] && extra=(--set link_gbps=10 --set link_latency_us=25)
  for p in tttt tstt sppp pppp; do
    scripts/cluster/mpirun.sh -n 2 target/release/tp-train --bench --bench-steps "$steps" --pattern "$p" \
      --out "$out/$link-$p" "${extra[@]}" "$@" | grep "ms/step,"
  done
done
python3 - "$out" <<'PY'
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
for link in ["none", "10gbe"]:
    ms = {p: json.load(open(out / f"{link}-{p}" / "bench.json"))["ms_per_step"] for p in ["tttt", "tstt", "sppp", "pppp"]}
    print(f"link {link:6}: " + ", ".join(f"{p} {v:.1f} ms ({v / ms['tttt']:.2f}x)" for p, v in ms.items()))
PY
