#!/usr/bin/env bash
# Our training step against PyTorch (eager, and SDPA + torch.compile) on this CPU: the same GPT-2 (all-t pattern, i.e.
# plain GPT-2), the same shapes, fp32, the same thread counts, interleaved, medians.
#
#   scripts/bench/vs-pytorch.sh                  # mini and baby, 1 and 2 threads, 3 rounds
#   PRESETS=mini ROUNDS=5 scripts/bench/vs-pytorch.sh
#   SIMD=avx2 PYTORCH="eager sdpa compile" scripts/bench/vs-pytorch.sh   # both capped at AVX2
#
# Installs PyTorch into a throwaway venv (TORCH_VENV, default target/torch-venv). PyPI's
# wheel is the CUDA build, about 5 GB; it runs on the CPU. A tool, not part of the tests.
# Writes comparison.md and comparison.json under OUT (default runs/bench-vs-pytorch-<time>).
# --help (or -h) prints this header and exits, building and running nothing.
[[ "${1:-}" == -h || "${1:-}" == --help ]] && { sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0; }
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -d "$HOME/.cargo/bin" ] && export PATH="$HOME/.cargo/bin:$PATH"
VENV=${TORCH_VENV:-target/torch-venv}
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import torch' 2>/dev/null; then
    echo "bench-vs-pytorch: installing PyTorch into $VENV (about 5 GB from PyPI)"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet torch numpy
fi
cargo build --release --bins --quiet
[ -f datasets/shakespeare_char/train.bin ] || ./target/release/tp-prepare shakespeare_char
OUT=${OUT:-runs/bench-vs-pytorch-$(date +%Y%m%d-%H%M%S)}
exec "$VENV/bin/python" scripts/bench/vs-pytorch.py --out "$OUT" \
    --presets ${PRESETS:-mini baby} --threads ${THREADS:-1 2} --rounds "${ROUNDS:-3}" \
    --pytorch ${PYTORCH:-eager compile} ${SIMD:+--simd "$SIMD"}
