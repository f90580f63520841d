"""Driver of scripts/bench/vs-pytorch.sh: runs PyTorch eager (pytorch-gpt2.py) and
`tp-train --bench` on the same model, alternating them round by round so that drift in
the machine's speed hits both, and reports medians and ratios."""

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


def run_pytorch(preset, threads, warmup, steps):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_WAIT_POLICY="PASSIVE")
    cmd = [sys.executable, "scripts/bench/pytorch-gpt2.py", "--preset", preset,
           "--threads", str(threads), "--warmup", str(warmup), "--steps", str(steps)]
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def run_ours(preset, tp, threads_per_rank, warmup, steps, out_dir):
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads_per_rank))
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
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    # (preset, threads, who) -> ms per step of each round
    ms, last = {}, {}
    for preset in a.presets:
        warmup, steps = STEPS[preset]
        for r in range(a.rounds):
            for th in a.threads:
                runs = [("pytorch", lambda: run_pytorch(preset, th, warmup, steps)),
                        ("ours tp 1", lambda: run_ours(preset, 1, th, warmup, steps,
                                                       out / f"{preset}-tp1-{th}t-r{r}"))]
                if th % 2 == 0:
                    # tp 2 on the same cores: two ranks (threads) of th/2 math threads.
                    runs.append(("ours tp 2", lambda: run_ours(
                        preset, 2, th // 2, warmup, steps, out / f"{preset}-tp2-{th}t-r{r}")))
                for who, fn in runs:
                    res = fn()
                    ms.setdefault((preset, th, who), []).append(res["ms_per_step"])
                    last[(preset, th, who)] = res
                    print(f"round {r + 1}/{a.rounds} {preset} {th} thread(s) {who}: "
                          f"{res['ms_per_step']:.1f} ms/step", flush=True)
    rows = []
    lines = ["| preset | threads | run | ms/step | tokens/s | tokens/s vs PyTorch | peak RSS MB |",
             "|---|---|---|---|---|---|---|"]
    for (preset, th, who), v in ms.items():
        med = statistics.median(v)
        base = statistics.median(ms[(preset, th, "pytorch")])
        res = last[(preset, th, who)]
        tokens = res["batch_size"] * res["block_size"]
        rss = res.get("peak_rss_mb")
        rows.append({"preset": preset, "threads": th, "run": who, "ms_per_step": med,
                     "rounds": v, "tokens_per_s": tokens / (med / 1e3),
                     "speedup_vs_pytorch": base / med, "peak_rss_mb": rss})
        lines.append(f"| {preset} | {th} | {who} | {med:.1f} | {tokens / (med / 1e3):.0f} | "
                     f"{base / med:.2f}x | {'' if rss is None else f'{rss:.0f}'} |")
    torch_version = next((r["torch"] for r in last.values() if "torch" in r), "?")
    lines.append("")
    lines.append(f"Medians of {a.rounds} interleaved round(s); PyTorch {torch_version} eager, "
                 "OMP_WAIT_POLICY=PASSIVE; ours: pattern all-t (plain GPT-2), ranks as threads.")
    (out / "comparison.json").write_text(json.dumps(rows, indent=2))
    (out / "comparison.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"comparison.md and comparison.json in {out}")


if __name__ == "__main__":
    main()
