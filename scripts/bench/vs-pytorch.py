"""Driver of scripts/bench/vs-pytorch.sh: runs PyTorch (pytorch-gpt2.py: eager, eager with
SDPA attention, and SDPA + torch.compile) and `tp-train --bench` on the same model,
alternating them round by round so that drift in the machine's speed hits all of them,
and reports medians and ratios. `--simd avx2` caps both sides at AVX2 (ours with
TP_SIMD, PyTorch with ATEN_CPU_CAPABILITY, MKL_ENABLE_INSTRUCTIONS, ONEDNN_MAX_CPU_ISA)."""

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

# warm-up and measured steps a run: mini steps take tens of ms, baby steps ~10-20 s.
STEPS = {"mini": (3, 20), "baby": (1, 3)}
LAYERS = {"mini": 4, "baby": 6}


# PyTorch's ways of running the same model: the flags of pytorch-gpt2.py.
PYTORCH_VARIANTS = {
    "eager": [],
    "sdpa": ["--sdpa"],
    "compile": ["--sdpa", "--compile"],
}
# What caps each side at a SIMD level below the machine's.
PYTORCH_CAPS = {
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
             "ONEDNN_MAX_CPU_ISA": "AVX2"},
}


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def run_pytorch(preset, threads, warmup, steps, variant, simd):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_WAIT_POLICY="PASSIVE")
    env.update(PYTORCH_CAPS.get(simd, {}))
    cmd = [sys.executable, "scripts/bench/pytorch-gpt2.py", "--preset", preset,
           "--threads", str(threads), "--warmup", str(warmup), "--steps", str(steps)]
    cmd += PYTORCH_VARIANTS[variant]
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def run_ours(preset, tp, threads_per_rank, warmup, steps, out_dir, simd):
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads_per_rank))
    if simd:
        env["TP_SIMD"] = simd
    env.pop("CANDLE_NUM_THREADS", None)
    cmd = ["./target/release/tp-train", "--bench", "--quiet", "--preset", preset,
           "--pattern", f"{LAYERS[preset]}xt", "--tp", str(tp),
           "--bench-warmup", str(warmup), "--bench-steps", str(steps), "--out", str(out_dir)]
    subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
    return json.loads((out_dir / "bench.json").read_text())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--presets", nargs="+", default=["mini", "baby"])
    ap.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--pytorch", nargs="+", default=["eager", "compile"],
                    choices=sorted(PYTORCH_VARIANTS))
    ap.add_argument("--simd", choices=sorted(PYTORCH_CAPS), help="cap both sides at this level")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    # (preset, threads, who) -> ms per step of each round
    ms, last, failed = {}, {}, {}
    for preset in a.presets:
        warmup, steps = STEPS[preset]
        for r in range(a.rounds):
            for th in a.threads:
                runs = [(f"pytorch {v}", lambda v=v: run_pytorch(preset, th, warmup, steps, v,
                                                                 a.simd)) for v in a.pytorch]
                runs.append(("ours tp 1", lambda: run_ours(
                    preset, 1, th, warmup, steps, out / f"{preset}-tp1-{th}t-r{r}", a.simd)))
                if th % 2 == 0:
                    # tp 2 on the same cores: two ranks (threads) of th/2 math threads.
                    runs.append(("ours tp 2", lambda: run_ours(
                        preset, 2, th // 2, warmup, steps, out / f"{preset}-tp2-{th}t-r{r}",
                        a.simd)))
                for who, fn in runs:
                    try:
                        res = fn()
                    except subprocess.CalledProcessError as e:
                        # One way of running failing (torch.compile can crash on some
                        # CPUs) leaves the others' figures standing; the table says so.
                        why = (e.stderr or "").strip().splitlines()[-1:] or [str(e)]
                        failed[(preset, th, who)] = why[0][:200]
                        print(f"round {r + 1}/{a.rounds} {preset} {th} thread(s) {who}: "
                              f"failed: {why[0][:200]}", flush=True)
                        continue
                    ms.setdefault((preset, th, who), []).append(res["ms_per_step"])
                    last[(preset, th, who)] = res
                    print(f"round {r + 1}/{a.rounds} {preset} {th} thread(s) {who}: "
                          f"{res['ms_per_step']:.1f} ms/step", flush=True)
    rows = []
    head = " | ".join(f"vs PyTorch {v}" for v in a.pytorch)
    lines = [f"| preset | threads | run | ms/step | tokens/s | {head} | step / matmuls, "
             "of the FMA peak | peak RSS MB |",
             "|---|---|---|---|---|" + "---|" * len(a.pytorch) + "---|---|"]
    for (preset, th, who), v in ms.items():
        med = statistics.median(v)
        res = last[(preset, th, who)]
        tokens = res["batch_size"] * res["block_size"]
        rss = res.get("peak_rss_mb")
        # tokens/s relative to each PyTorch variant: its ms/step over ours.
        ratios = {p: statistics.median(ms[(preset, th, f"pytorch {p}")]) / med
                  for p in a.pytorch if (preset, th, f"pytorch {p}") in ms}
        # Ours against one core's measured FMA peak (docs/performance.md's goals): the
        # step at its median time, the matmuls as the last round measured them.
        peak = res.get("fma_peak_gflops_per_core") or 0.0
        of_peak = None
        if peak > 0 and "flops_per_step" in res:
            step = res["flops_per_step"] / (med / 1e3) / 1e9 / res["cores"] / peak
            of_peak = (step, res["matmul_gflops_per_core"] / peak)
        rows.append({"preset": preset, "threads": th, "run": who, "ms_per_step": med,
                     "rounds": v, "tokens_per_s": tokens / (med / 1e3),
                     "speedup_vs_pytorch": ratios, "peak_rss_mb": rss,
                     "of_fma_peak": of_peak})
        cells = " | ".join(f"{ratios[p]:.2f}x" if p in ratios else "failed" for p in a.pytorch)
        shares = "" if of_peak is None else f"{100 * of_peak[0]:.0f}% / {100 * of_peak[1]:.0f}%"
        lines.append(f"| {preset} | {th} | {who} | {med:.1f} | {tokens / (med / 1e3):.0f} | "
                     f"{cells} | {shares} | {'' if rss is None else f'{rss:.0f}'} |")
    for (preset, th, who), why in sorted(failed.items()):
        if (preset, th, who) not in ms:
            lines.append(f"| {preset} | {th} | {who} | failed | | "
                         + " | ".join("" for _ in a.pytorch) + " | | |")
        rows.append({"preset": preset, "threads": th, "run": who, "failed": why})
    if failed:
        lines.append("")
        lines.append("Failed runs: " + "; ".join(
            f"{p} {t} thread(s) {w}: {why}" for (p, t, w), why in sorted(failed.items())))
    torch_version = next((r["torch"] for r in last.values() if "torch" in r), "?")
    simd = (f"both capped at {a.simd} (TP_SIMD; PyTorch: "
            + ", ".join(f"{k}={v}" for k, v in PYTORCH_CAPS[a.simd].items()) + ")"
            if a.simd else "each at the machine's best SIMD level")
    lines.append("")
    lines.append(f"{cpu_model()}, {os.cpu_count()} logical CPUs; medians of {a.rounds} "
                 f"interleaved round(s); PyTorch {torch_version} (eager: plain attention; "
                 "sdpa: F.scaled_dot_product_attention; compile: SDPA + torch.compile, "
                 "inductor), OMP_WAIT_POLICY=PASSIVE; ours: pattern all-t (plain GPT-2), "
                 f"ranks as threads; {simd}.")
    (out / "comparison.json").write_text(json.dumps(rows, indent=2))
    (out / "comparison.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"comparison.md and comparison.json in {out}")


if __name__ == "__main__":
    main()
