#!/usr/bin/env bash
# gpu-check.sh's verify mode (sourced by it, with its helpers: part, say, finish,
# bench_row, pytorch_row, table_head): everything someone checking this project
# independently on one lent GPU would run, in one call of at most 10 minutes, each part
# under its own timeout (the tests take what the other parts' limits, 400 s, leave of
# the budget: 170 s of the default 570, 140 of 540; sized from the H200's times in
# docs/gpu-runs/2026-11-29-h200: 13 of the 17 tests 61 s, the default experiment 26 s,
# each bit-identity part 8-11 s, MPI 3 s, the speed rounds 126 s):
#
#   - the GPU test set, one process a test;
#   - the default experiment (mini, sppp, tp 2, 2000 steps) compared step by step with
#     the log the build machine's CPU made of it (cpu-reference.log.jsonl);
#   - bit identity: sppp and llll at tp 2 and tttt at tp 1 x dp 2 (rank threads on the
#     GPU), each trained 50 steps plainly, with CUDA_LAUNCH_BLOCKING=1, with
#     TP_CUDA_POOL=release and with TP_CUDA_EVENTS=on: the four runs' losses must be
#     the same bits (a difference is a race or a dependence on the allocator);
#   - the same sppp run as two MPI processes (the packed Open MPI's mpirun): equal bit
#     for bit to the rank threads' run (ranks sharing one GPU sum through the host;
#     with a GPU each, through NCCL);
#   - compute-sanitizer's memcheck, racecheck and initcheck over the kernel tests and
#     then a 4-step training run (every kernel of a step, at tp 2), as far as each
#     tool's 45 s allow (what it covered and what it did not are named);
#   - GPT-2 124M bf16 tp 1, batch 8 x 1024: this harness, PyTorch eager, eager with SDPA
#     and SDPA + torch.compile, interleaved over two rounds, each row the median.
#
# Sourced by gpu-check.sh (it needs its helpers): run `bash gpu-check.sh verify`, or
# `bash gpu-check.sh verify --dry-run` for the plan. --help (or -h) prints this header.
# shellcheck shell=bash
[[ "${1:-}" == -h || "${1:-}" == --help ]] && { sed -n '2,/^[^#]/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; exit 0; }
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  echo "gpu-verify.sh is gpu-check.sh's verify mode: run bash $(dirname "$0")/gpu-check.sh verify" >&2
  exit 2
fi

v_steps=50
# A mini run of `v_steps` steps with a loss logged at every step (then --out DIR and the
# layout's flags): the bit-identity matrix's and the MPI comparison's.
mini=(--device cuda --set max_iters=$v_steps --set eval_interval=$v_steps --set eval_iters=2
  --set log_interval=1 --set sample_tokens=0 --set checkpoint_interval=0 --quiet)

# The train losses of two logs: "same" when bitwise equal at every step both logged,
# else the largest difference and where it first appears.
same_losses() { # log_a log_b
  $py - "$1" "$2" <<'EOF'
import json, sys
def losses(p):
    return {l["step"]: l["train_loss"] for l in map(json.loads, open(p)) if "train_loss" in l}
a, b = losses(sys.argv[1]), losses(sys.argv[2])
steps = sorted(set(a) & set(b))
if not steps:
    print("no common steps"); sys.exit(1)
diff = [(abs(a[s] - b[s]), s) for s in steps if a[s] != b[s]]
if not diff:
    print(f"same bits at all {len(steps)} steps"); sys.exit(0)
print(f"differ at {len(diff)} of {len(steps)} steps, first at step {min(s for _, s in diff)}, largest {max(diff)[0]:.3g}")
sys.exit(1)
EOF
}

say ""
say "## Environment"
part 10 env bash -c "ldd '$train' | grep -E 'cuda|cublas|curand|nccl|nvrtc|mpi|not found'; nvidia-smi -L"
[ "$dry" = 0 ] && grep -q "not found" "$work/env.log" && say "- a library does not load: run diag"

say ""
say "## GPU test set (one process a test)"
tests=$( [ "$dry" = 1 ] && echo "each-test" || "$bin/gpu-tests" --list 2>/dev/null | sed -n 's/: test$//p')
# The tests' share: what is left after the parts below (400 s) are sure of theirs.
tests_until=$((budget - 400))
[ "$dry" = 1 ] && part $((tests_until - 10)) tests "$bin/gpu-tests" --exact NAME "(each test in its own process)"
for t in $tests; do
  [ "$dry" = 1 ] && break
  if [ $(($(date +%s) - started + 5)) -gt "$tests_until" ]; then
    say "- $t: SKIPPED (the tests' share of the budget is spent)"
    failures=$((failures + 1))
    continue
  fi
  limit=$((tests_until - ($(date +%s) - started)))
  [ "$limit" -gt 60 ] && limit=60
  part "$limit" "test-$t" "$bin/gpu-tests" --exact "$t" --test-threads=1 && say "- $t: ok in $took s"
done

say ""
say "## Default experiment (mini, sppp, tp 2, 2000 steps) step by step against the CPU's log"
part 40 default "$train" --device cuda --set max_iters=2000 --quiet --out "$work/default-run"
if [ "$dry" = 0 ] && [ -f "$work/default-run/log.jsonl" ]; then
  $py - "$work/default-run" "$here/cpu-reference.log.jsonl" "$here/cpu-reference.json" <<'EOF' | tee -a "$summary"
import json, sys
run, cpu_log, cpu_ref = sys.argv[1:]
read = lambda p: [json.loads(l) for l in open(p) if l.strip()]
g, c = read(run + "/log.jsonl"), read(cpu_log)
machine = json.load(open(cpu_ref))["machine"]
worst = {}
for key in ("train_loss", "val_loss"):
    gs = {l["step"]: l[key] for l in g if key in l}
    cs = {l["step"]: l[key] for l in c if key in l}
    steps = sorted(set(gs) & set(cs))
    d = [(abs(gs[s] - cs[s]), s) for s in steps]
    worst[key] = max(d) if d else (float("inf"), None)
    first = next((s for e, s in d if e > 1e-3), None)
    print(f"- {key}: {len(steps)} steps in both logs, largest |GPU - CPU| {worst[key][0]:.2g} (step {worst[key][1]})"
          + (f"; first above 1e-3 at step {first}" if first is not None else "; none above 1e-3"))
ok = all(e <= 0.02 for e, _ in worst.values())
print(f"- against the CPU ({machine}): {'every logged loss within' if ok else 'NOT within'} 0.02")
sys.exit(0 if ok else 1)
EOF
  [ "${PIPESTATUS[0]}" = 0 ] || failures=$((failures + 1))
fi

say ""
say "## Bit identity: $v_steps steps plainly, CUDA_LAUNCH_BLOCKING=1, TP_CUDA_POOL=release, TP_CUDA_EVENTS=on"
bits() { # name flags...
  local name=$1
  shift
  part 20 "bits-$name" bash -c '
    o=$1; shift
    "$@" --out "$o/plain" &&
      CUDA_LAUNCH_BLOCKING=1 "$@" --out "$o/blocking" &&
      TP_CUDA_POOL=release "$@" --out "$o/release" &&
      TP_CUDA_EVENTS=on "$@" --out "$o/events"' _ "$work/bits-$name" "$train" "${mini[@]}" "$@" || return 0
  [ "$dry" = 1 ] && return 0
  local v verdict all=1
  for v in blocking release events; do
    verdict=$(same_losses "$work/bits-$name/plain/log.jsonl" "$work/bits-$name/$v/log.jsonl") || all=0
    say "- $name, $v against plain: $verdict"
  done
  [ "$all" = 1 ] || failures=$((failures + 1))
}
bits sppp-tp2 --pattern sppp --tp 2
bits llll-tp2 --pattern llll --tp 2
bits tttt-tp1xdp2 --pattern tttt --tp 1 --dp 2

say ""
say "## MPI: the sppp run as two processes (the packed Open MPI) against the rank threads"
mpirun=${TP_MPIRUN:-$ompi/bin/mpirun}
if part 15 mpi-sppp-tp2 env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
  "$mpirun" --oversubscribe -np 2 -x LD_LIBRARY_PATH -x TP_DATA_DIR \
  "$train" "${mini[@]}" --pattern sppp --tp 2 --out "$work/mpi-sppp-tp2-run" && [ "$dry" = 0 ]; then
  how=$(grep -o '"nccl": *"[^"]*"' "$work/mpi-sppp-tp2-run/summary.json" | head -1)
  verdict=$(same_losses "$work/bits-sppp-tp2/plain/log.jsonl" "$work/mpi-sppp-tp2-run/log.jsonl") ||
    failures=$((failures + 1))
  say "- two MPI processes ($(nvidia-smi -L | wc -l) GPU(s); ${how:-sums through the host}) against two rank threads: $verdict"
fi

say ""
say "## compute-sanitizer: the kernel tests, then a 4-step training run (mini sppp, tp 2)"
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer \
  /usr/local/cuda-*/bin/compute-sanitizer /opt/nvidia/*/compute-sanitizer 2>/dev/null | head -1)
[ -n "$sanitizer" ] || [ "$dry" = 1 ] || say "- no compute-sanitizer on this machine: the three parts below fail"
export sanitizer train
for tool in memcheck racecheck initcheck; do
  # Each program under the tool, our kernels' tests first (what is new on a GPU), then the
  # training run (candle's kernels too), until 3 s before the part's limit: what the time
  # did not cover is said, not failed (racecheck did not finish a 2-step run in 150 s on
  # an H200). A finding exits 9 and fails the part.
  part 45 "sanitize-$tool" bash -c '
    tool=$1 o=$2 tests=$3 end=$(($(date +%s) + $4 - 3))
    under() { # what program...
      local what=$1 rc
      shift
      [ "$(date +%s)" -lt "$end" ] || { echo "time ran out before $what"; exit 0; }
      timeout -k 2 $((end - $(date +%s))) "$sanitizer" --tool "$tool" --error-exitcode 9 --print-limit 20 "$@"
      rc=$?
      [ "$rc" = 124 ] && { echo "time ran out in $what"; exit 0; }
      [ "$rc" = 0 ] || exit "$rc"
      echo "$what: clean"
    }
    for t in $("$tests" --list 2>/dev/null | sed -n "s/: test\$//p" | grep "^kernels::"); do
      under "$t" "$tests" --exact "$t" --test-threads=1
    done
    under "training run" "$train" --device cuda --set max_iters=4 --set eval_interval=4 --set eval_iters=1 \
      --set sample_tokens=0 --set checkpoint_interval=0 --quiet --out "$o"' _ "$tool" "$work/sanitize-$tool-run" "$bin/gpu-tests" 45
  rc=$?
  if [ "$dry" = 0 ] && [ "$rc" != 3 ]; then
    covered=$(grep -c ": clean$" "$work/sanitize-$tool.log")
    short=$(grep -m1 "^time ran out" "$work/sanitize-$tool.log")
    findings=$(grep -m1 -E "ERROR SUMMARY: [1-9]|RACECHECK SUMMARY: [1-9]" "$work/sanitize-$tool.log")
    say "- $tool: $covered program(s) clean (kernel tests, then the run)${short:+; $short}${findings:+; $findings}"
  fi
done

say ""
say "GPT-2 below: interleaved, two rounds of the four; each row the median of its rounds."
table_head
speed_round() { # round
  local r=$1 o
  o="$work/speed-r$r-harness"
  timeout 40 "$train" --bench --device cuda --dtype bf16 --preset gpt2 --pattern 12xt --tp 1 \
    --set kernels=fused --set batch_size=8 --bench-warmup 3 --bench-steps 10 --quiet --out "$o" >"$o.log" 2>&1
  for impl in eager:"" sdpa:"--sdpa" compile:"--sdpa --compile"; do
    # shellcheck disable=SC2086
    timeout 60 $py "$here/pytorch-gpt2.py" --device cuda --preset gpt2 --vocab 50304 --batch-size 8 \
      --warmup 5 --steps 10 --dtype bf16 ${impl#*:} >"$work/speed-r$r-${impl%%:*}.log" 2>&1
    tail -1 "$work/speed-r$r-${impl%%:*}.log" >"$work/speed-r$r-${impl%%:*}.json"
  done
}
export -f speed_round
export work here py
if part 150 speed bash -c 'speed_round 1; speed_round 2' && [ "$dry" = 0 ]; then
  $py - "$work" "$gpu" <<'EOF' | tee -a "$summary"
import json, statistics, sys
work, gpu = sys.argv[1:]
n_layer, c, t, vocab = 12, 768, 1024, 50304
per_token = 6 * (12 * n_layer * c * c + vocab * c) + 12 * n_layer * t * c
for impl, label in [("harness", "tp-harness (fused)"), ("eager", "pytorch"), ("sdpa", "pytorch-sdpa"), ("compile", "pytorch-compile-sdpa")]:
    ms = []
    for r in (1, 2):
        try:
            if impl == "harness":  # bench.json, one object over many lines
                ms.append(json.load(open(f"{work}/speed-r{r}-harness/bench.json"))["ms_per_step"])
            else:  # the last line the PyTorch reference printed
                ms.append(json.loads(open(f"{work}/speed-r{r}-{impl}.json").read().strip().splitlines()[-1])["ms_per_step"])
        except Exception:
            pass
    if not ms:
        print(f"| {label} | 12xt | 1 | bf16 | 8 | no result (log: speed-r*-{impl}.log) | | |")
        continue
    m = statistics.median(ms)
    tok = 8 * t / (m / 1e3)
    mfu = tok * per_token / 1e12 / 989.4 if ("H100" in gpu or "H200" in gpu) else float("nan")
    rounds = ", ".join(f"{x:.1f}" for x in ms)
    print(f"| {label} | 12xt | 1 | bf16 | 8 | {m:.1f} (rounds: {rounds}) | {tok:.0f} | {mfu:.1%} |")
EOF
fi
finish
