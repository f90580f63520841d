"""PyTorch reference for `tp-train --bench`: the same GPT-2 (pre-LN blocks, LayerNorm
without bias, exact-erf GELU, learned positions, tied head, GPT-2 init), the same AdamW
step and shapes. On the CPU in fp32 (scripts/bench/vs-pytorch.sh); on a GPU
(scripts/cuda/gpu-check.sh) also bf16 autocast, SDPA (flash) attention and `torch.compile`.
Prints one JSON object with the median ms/step after warm-up, like our bench.json, with
MFU and peak GPU memory on CUDA, and optionally the profiler's top ops.

Not part of the test command.
"""

import argparse
import json
import math
import resource
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

PRESETS = {
    # name: (n_layer, n_head, n_embd, block_size, batch_size)
    "mini": (4, 4, 128, 64, 12),
    "baby": (6, 6, 384, 256, 64),
    "gpt2": (12, 12, 768, 1024, 8),
}

# Dense peak TFLOP/s of the GPUs we report MFU on (NVIDIA's datasheets, SXM parts):
# bf16 tensor cores, TF32 tensor cores, plain fp32.
PEAK_TFLOPS = {
    "H100": {"bf16": 989.4, "tf32": 494.7, "f32": 66.9},
    "H200": {"bf16": 989.4, "tf32": 494.7, "f32": 66.9},
}


def flops_per_token(n_layer, n_head, c, block, vocab):
    """Training FLOPs per token (PaLM appendix B, as nanoGPT's estimate_mfu): 6 per
    parameter (weights of the blocks and the tied head) plus attention's 12 L T C."""
    n = 12 * n_layer * c * c + vocab * c
    return 6 * n + 12 * n_layer * block * c


def peak_tflops(device_name, precision):
    for key, peaks in PEAK_TFLOPS.items():
        if key in device_name:
            return peaks[precision]
    return None


class Block(nn.Module):
    def __init__(self, c, n_head, bias):
        super().__init__()
        self.n_head = n_head
        self.ln1 = nn.LayerNorm(c, bias=bias)
        self.qkv = nn.Linear(c, 3 * c, bias=bias)
        self.o = nn.Linear(c, c, bias=bias)
        self.ln2 = nn.LayerNorm(c, bias=bias)
        self.fc = nn.Linear(c, 4 * c, bias=bias)
        self.pr = nn.Linear(4 * c, c, bias=bias)

    sdpa = False
    # GPT-2's tanh approximation (the gpt2 preset) or the exact erf form (mini, baby).
    gelu = "none"

    def attn(self, x, causal_mask):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.o(y.transpose(1, 2).contiguous().view(b, t, c))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(causal_mask[:, :, :t, :t] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.o(y)

    def forward(self, x, causal_mask):
        x = x + self.attn(self.ln1(x), causal_mask)
        return x + self.pr(F.gelu(self.fc(self.ln2(x)), approximate=self.gelu))


class Gpt(nn.Module):
    def __init__(self, vocab, n_layer, n_head, c, block_size, bias):
        super().__init__()
        self.wte = nn.Embedding(vocab, c)
        self.wpe = nn.Embedding(block_size, c)
        self.blocks = nn.ModuleList([Block(c, n_head, bias) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(c, bias=bias)
        mask = torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size)
        self.register_buffer("mask", mask)
        for name, p in self.named_parameters():
            if name.endswith(".weight") and p.dim() == 2:
                std = 0.02 / math.sqrt(2 * n_layer) if name.endswith(("o.weight", "pr.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith(".bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        t = idx.size(1)
        x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
        for blk in self.blocks:
            x = blk(x, self.mask)
        logits = self.ln_f(x) @ self.wte.weight.t()  # tied head
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="mini", choices=sorted(PRESETS))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--vocab", type=int, default=65)
    ap.add_argument("--batch-size", type=int)
    ap.add_argument("--block-size", type=int, help="sequence length (default: the preset's)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--dtype", default="f32", choices=["f32", "bf16"])
    ap.add_argument("--tf32", action="store_true", help="TF32 matmuls for f32 on GPUs")
    ap.add_argument("--sdpa", action="store_true", help="F.scaled_dot_product_attention")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    ap.add_argument("--profile", action="store_true", help="add the profiler's top ops")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1337)
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = a.tf32
        torch.backends.cudnn.allow_tf32 = a.tf32
    n_layer, n_head, c, block, batch = PRESETS[a.preset]
    batch = a.batch_size or batch
    block = a.block_size or block
    Block.sdpa = a.sdpa
    # As our presets: GPT-2 124M has biases and tanh GELU, the small ones neither.
    gpt2 = a.preset == "gpt2"
    Block.gelu = "tanh" if gpt2 else "none"
    model = Gpt(a.vocab, n_layer, n_head, c, block, bias=gpt2).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1)
    step_model = torch.compile(model) if a.compile else model
    autocast = torch.autocast(dev.type, dtype=torch.bfloat16, enabled=a.dtype == "bf16")

    def step():
        x = torch.randint(0, a.vocab, (batch, block), device=dev)
        y = torch.randint(0, a.vocab, (batch, block), device=dev)
        with autocast:
            loss = step_model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    times = []
    for i in range(a.warmup + a.steps):
        if cuda and i == a.warmup:
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        step()
        if cuda:
            torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    ms = statistics.median(times[a.warmup :])
    tokens_per_s = batch * block / (ms / 1e3)
    out = {
        "impl": "pytorch" + ("-compile" if a.compile else "") + ("-sdpa" if a.sdpa else ""),
        "torch": torch.__version__,
        "device": a.device,
        "dtype": a.dtype,
        "preset": a.preset,
        "threads": a.threads,
        "batch_size": batch,
        "block_size": block,
        "measured_steps": a.steps,
        "ms_per_step": ms,
        "tokens_per_s": tokens_per_s,
        # Peak of the whole process (Linux reports KiB).
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    if cuda:
        name = torch.cuda.get_device_name(dev)
        precision = "bf16" if a.dtype == "bf16" else ("tf32" if a.tf32 else "f32")
        peak = peak_tflops(name, precision)
        achieved = tokens_per_s * flops_per_token(n_layer, n_head, c, block, a.vocab) / 1e12
        out.update(
            gpu=name,
            peak_gpu_mem_mb=torch.cuda.max_memory_allocated(dev) / 2**20,
            achieved_tflops=achieved,
            mfu=achieved / peak if peak else None,
        )
    if a.profile:
        from torch.profiler import ProfilerActivity, profile

        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        with profile(activities=acts) as prof:
            for _ in range(3):
                step()
            if cuda:
                torch.cuda.synchronize()
        key = "self_device_time_total" if cuda else "self_cpu_time_total"
        rows = sorted(prof.key_averages(), key=lambda e: getattr(e, key, 0), reverse=True)[:15]
        out["profile"] = [
            {"op": e.key, "ms_per_step": getattr(e, key, 0) / 1e3 / 3, "calls": e.count // 3} for e in rows
        ]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
