#!/usr/bin/env bash
# The GPU checks, run on the GPU machine from the folder scripts/build-cuda.sh packed
# (dist/cuda: no Rust needed there, only the NVIDIA driver and PyTorch's NVIDIA wheels for
# cuBLAS, cuRAND, the CUDA runtime and NCCL):
#
#   bash dist/cuda/gpu-check.sh [all|tests|train|bench|seeds]...   (default: all)
#
# Writes everything under $OUT (default dist/cuda/results) and one summary, gpu-check.md:
#   tests   the GPU test set (GPU == CPU proofs, kernels vs portable, NCCL, thread sums)
#   train   the default experiment for 2000 iterations on the GPU and on this machine's CPU
#   bench   tp-train --bench --preset gpt2 (12xt, 3xsppp; tp 1, 2; f32, bf16) against
#           PyTorch (eager, SDPA, torch.compile; bf16): tokens/s, MFU, peak GPU memory
#   seeds   the seeds' GPU tables: seed 001 (mini run: CPU threads vs GPU) and seed 000
#           (forward pass over 2500/5000/10000 names, three model sizes, GPU vs CPU)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
res=${OUT:-$here/results}
mkdir -p "$res"
report="$res/gpu-check.md"
py=${PYTHON:-python3}
parts=("${@:-all}")
want() { [[ " ${parts[*]} " == *" all "* || " ${parts[*]} " == *" $1 "* ]]; }
say() { echo "$*" | tee -a "$report"; }
failures=0

# The NVIDIA libraries of PyTorch's wheels (libcublas, libcudart, libnccl, ...).
libdirs=$($py - <<'EOF'
import glob, os
try:
    import nvidia
except ImportError:
    raise SystemExit("")
dirs = {os.path.dirname(p) for r in nvidia.__path__ for p in glob.glob(r + "/**/lib/lib*.so*", recursive=True)}
print(":".join(sorted(dirs)))
EOF
)
export LD_LIBRARY_PATH="$libdirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export TP_DATA_DIR="$here/data" TP_GOLDEN_DIR="$here/golden" TP_GOLDEN_LADDER_DIR="$here/golden-ladder"

bin="$res/bin"
mkdir -p "$bin"
for b in tp-train gpu-tests; do
  if [ ! -x "$bin/$b" ]; then
    $py -c "import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], 'wb'))" "$here/$b.xz" "$bin/$b"
    chmod +x "$bin/$b"
  fi
done
train="$bin/tp-train"

{
  echo "# GPU check, $(date -u +%Y-%m-%dT%H:%MZ)"
  echo
  echo '```'
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
  echo "CPU: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores"
  $py -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1
  echo '```'
} >"$report"
cat "$report"

# Peak GPU memory of a command, sampled by nvidia-smi every 50 ms (all processes).
with_gpu_peak() { # file cmd...
  local peakf=$1; shift
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 50 >"$peakf.samples" 2>/dev/null &
  local mon=$!
  "$@"
  local rc=$?
  kill $mon 2>/dev/null; wait $mon 2>/dev/null
  sort -n "$peakf.samples" | tail -1 >"$peakf"
  return $rc
}

if want tests; then
  say ""
  say "## GPU test set"
  if "$bin/gpu-tests" --test-threads=1 >"$res/gpu-tests.log" 2>&1; then r=ok; else r=FAILED; failures=$((failures + 1)); fi
  say "result: $r ($(grep -E '^test result' "$res/gpu-tests.log" | tail -1))"
  grep -E "^test |worst|matches" "$res/gpu-tests.log" | sed 's/^/    /' >>"$report"
fi

final_val() { $py -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["final_val_loss"], 4))' "$1/summary.json" 2>/dev/null || echo "?"; }

if want train; then
  say ""
  say "## Default experiment, 2000 iterations (mini, sppp, tp 2)"
  for dev in cuda cpu; do
    if "$train" --device "$dev" --set max_iters=2000 --quiet --out "$res/default-$dev" >"$res/default-$dev.log" 2>&1; then
      say "- $dev: val loss $(final_val "$res/default-$dev"), $($py -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["wall_seconds"]))' "$res/default-$dev/summary.json") s"
    else
      failures=$((failures + 1)); say "- $dev: FAILED (see default-$dev.log): $(tail -1 "$res/default-$dev.log")"
    fi
  done
  $py - "$res/default-cuda" "$res/default-cpu" <<'EOF' | tee -a "$report"
import json, sys
a, b = (json.load(open(d + "/summary.json")) for d in sys.argv[1:])
d = abs(a["final_val_loss"] - b["final_val_loss"])
print(f"- |GPU - CPU| val loss: {d:.4f} ({'within' if d <= 0.02 else 'NOT within'} 0.02)")
EOF
fi

if want bench; then
  say ""
  say "## GPT-2 124M training step (batch x 1024 tokens)"
  say ""
  say "| implementation | pattern | tp | dtype | batch | ms/step | tokens/s | MFU | peak GPU MiB |"
  say "|---|---|---|---|---|---|---|---|---|"
  for dtype in bf16 f32; do
    for pattern in 12xt 3xsppp; do
      for tp in 1 2; do
        for batch in ${BATCHES:-16 8 4}; do
          o="$res/bench-$pattern-tp$tp-$dtype-b$batch"
          if with_gpu_peak "$o.peak" "$train" --bench --device cuda --dtype "$dtype" --preset gpt2 \
            --pattern "$pattern" --tp "$tp" --set batch_size="$batch" --bench-warmup 3 --bench-steps 10 \
            --quiet --out "$o" >"$o.log" 2>&1; then
            $py - "$o/bench.json" "$(cat "$o.peak")" "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" <<'EOF' | tee -a "$report"
import json, sys
b = json.load(open(sys.argv[1])); peak_mem = sys.argv[2]; gpu = sys.argv[3]
peaks = {"bf16": 989.4, "f32": 66.9}  # H100/H200 SXM dense TFLOP/s
tflops = b["flops_per_step"] / (b["ms_per_step"] / 1e3) / 1e12
mfu = tflops / peaks[b["dtype"]] if ("H100" in gpu or "H200" in gpu) else float("nan")
print(f"| tp-harness ({b['kernels']}) | {b['pattern']} | {b['tp']} | {b['dtype']} | {b['batch_size']} | {b['ms_per_step']:.1f} | {b['tokens_per_s']:.0f} | {mfu:.1%} | {peak_mem} |")
EOF
            break
          else
            echo "   (batch $batch failed: $(tail -1 "$o.log"))" >>"$report"
          fi
        done
      done
    done
  done
  for variant in "--dtype bf16" "--dtype bf16 --sdpa" "--dtype bf16 --sdpa --compile" "--dtype f32 --sdpa"; do
    for batch in ${BATCHES:-16 8 4}; do
      o="$res/pytorch-$(echo "$variant" | tr -d ' -')-b$batch"
      if with_gpu_peak "$o.peak" $py "$here/pytorch-gpt2.py" --device cuda --preset gpt2 --vocab 50304 \
        --batch-size "$batch" --warmup 5 --steps 10 --profile $variant >"$o.json" 2>"$o.log"; then
        $py - "$o.json" "$(cat "$o.peak")" <<'EOF' | tee -a "$report"
import json, sys
b = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
mfu = b.get("mfu") or float("nan")
print(f"| {b['impl']} | 12xt | 1 | {b['dtype']} | {b['batch_size']} | {b['ms_per_step']:.1f} | {b['tokens_per_s']:.0f} | {mfu:.1%} | {sys.argv[2]} |")
EOF
        break
      fi
    done
  done
  say ""
  say "Per-op profiles: bench-*/bench.json (\`profile\`: host-side op times; on a GPU the"
  say "phases are synchronised, the ops are not) and pytorch-*.json (\`profile\`: GPU time)."
fi

if want seeds; then
  say ""
  say "## Seed 001: the mini run (sppp, tp 2, 2000 iterations)"
  say "$(grep -h '^- ' "$report" | grep -E '^- (cuda|cpu):' | head -2 | tr '\n' ' ')"
  say "(CPU under MPI and GPU under MPI: no MPI on this machine; the GPU binary is built without it.)"
  say ""
  say "## Seed 000: forward pass over N names (RMSNorm, ReLU, tp 1)"
  say ""
  say "| model | names | GPU forward ms | CPU forward ms |"
  say "|---|---|---|---|"
  for spec in "4 256 8" "6 384 12" "8 512 16"; do
    set -- $spec
    for n in 2500 5000 10000; do
      row="| ${1}L/${2}/${3}H | $n |"
      for dev in cuda cpu; do
        o="$res/seed000-${1}L-$n-$dev"
        if "$train" --bench --device "$dev" --tp 1 --preset micro --pattern "${1}xt" --set n_layer="$1" \
          --set n_embd="$2" --set n_head="$3" --set batch_size="$n" --set block_size=16 \
          --bench-warmup 2 --bench-steps 5 --quiet --out "$o" >"$o.log" 2>&1; then
          row="$row $($py -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["forward_ms"], 2))' "$o/bench.json") |"
        else
          row="$row failed |"
        fi
      done
      say "$row"
    done
  done
  say "(seed 000 reports 0.19 / 0.74 / 2.9 s on its GPU for its three sizes.)"
fi

say ""
say "failures: $failures"
exit $((failures > 0))
