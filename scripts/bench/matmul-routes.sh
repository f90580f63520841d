#!/usr/bin/env bash
# The two matmul routes against each other on this CPU (issue 51): `matmul: gemm` (the
# gemm crate) and `matmul: blas` (a system BLAS found at run time), interleaved round by
# round, on GPT-2 124M at llm.c's CPU batch (4 x 64) with 1 and 2 threads and mini at 1
# thread; medians of the matmuls' and the whole step's shares of the FMA peak each
# bench measured for itself.
#
#   scripts/bench/matmul-routes.sh                       # the BLAS the run finds (MKL, else OpenBLAS)
#   TP_BLAS=/path/to/libmkl_rt.so.2 scripts/bench/matmul-routes.sh
#   MKL=pip ROUNDS=5 scripts/bench/matmul-routes.sh      # MKL from PyPI into target/mkl-venv
#
# Writes routes.md and each bench's bench.json under OUT (default
# runs/bench-matmul-routes-<time>). A tool, not part of the tests.
# --help (or -h) prints this header and exits, building and running nothing.
[[ "${1:-}" == -h || "${1:-}" == --help ]] && { sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0; }
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -d "$HOME/.cargo/bin" ] && export PATH="$HOME/.cargo/bin:$PATH"
if [ "${MKL:-}" = pip ]; then
    VENV=target/mkl-venv
    if ! ls "$VENV"/lib/libmkl_rt.so.* >/dev/null 2>&1; then
        echo "matmul-routes: installing MKL from PyPI into $VENV"
        python3 -m venv "$VENV"
        "$VENV/bin/pip" install --quiet mkl
    fi
    TP_BLAS=$(ls "$PWD/$VENV"/lib/libmkl_rt.so.* | head -1)
    export TP_BLAS
fi
cargo build --release --bins --quiet
[ -f datasets/shakespeare_char/train.bin ] || ./target/release/tp-prepare shakespeare_char
OUT=${OUT:-runs/bench-matmul-routes-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
CASES=${CASES:-gpt2-1 gpt2-2 mini-1}
for round in $(seq 1 "${ROUNDS:-3}"); do
    for case in $CASES; do
        preset=${case%-*} threads=${case#*-}
        # Plain GPT-2: every block a t block (the presets' default at tp 1 is all-t).
        args=(--preset "$preset" --tp 1)
        [ "$preset" = gpt2 ] && args+=(--set batch_size=4 --set block_size=64)
        [ "$preset" = mini ] && args+=(--pattern tttt)
        for route in gemm blas; do
            echo "matmul-routes: round $round, $preset at $threads thread(s), $route"
            RAYON_NUM_THREADS=$threads ./target/release/tp-train --bench "${args[@]}" \
                --set matmul=$route --out "$OUT/r$round-$case-$route" >"$OUT/r$round-$case-$route.log" 2>&1 ||
                { echo "matmul-routes: that bench failed: $OUT/r$round-$case-$route.log"; tail -3 "$OUT/r$round-$case-$route.log"; exit 1; }
        done
    done
done
python3 - "$OUT" <<'EOF'
import json, pathlib, statistics, sys
out = pathlib.Path(sys.argv[1])
rows = {}
for f in sorted(out.glob("r*-*/bench.json")):
    _, preset, threads, route = f.parent.name.split("-")
    case = f"{preset}-{threads}"
    b = json.loads(f.read_text())
    peak = b["fma_peak_gflops_per_core"]
    rows.setdefault((case, route), []).append(
        (b["ms_per_step"], b["matmul_gflops_per_core"] / peak, b["gflops_per_core"] / peak, b["matmul"], b["cpu_model"]))
med = lambda xs: statistics.median(xs)
lines = ["| case | route | n | ms/step (median, range) | matmuls of the FMA peak | step of the peak | what ran |",
         "|---|---|---|---|---|---|---|"]
for (case, route), r in sorted(rows.items()):
    ms = [x[0] for x in r]
    lines.append(f"| {case.replace('-', ' at ')} thread(s) | {route} | {len(r)} | {med(ms):.1f} ({min(ms):.1f}-{max(ms):.1f}) | "
                 f"{100 * med([x[1] for x in r]):.0f}% ({100 * min(x[1] for x in r):.0f}-{100 * max(x[1] for x in r):.0f}%) | "
                 f"{100 * med([x[2] for x in r]):.0f}% | {r[0][3]} |")
cpu = next(iter(rows.values()))[0][4]
text = f"Matmul routes on {cpu} (interleaved rounds, medians; each bench's own FMA peak)\n\n" + "\n".join(lines) + "\n"
(out / "routes.md").write_text(text)
print(text)
EOF
