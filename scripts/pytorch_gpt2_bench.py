"""PyTorch eager reference for `tp-train --bench`: the same GPT-2 (pre-LN blocks,
LayerNorm without bias, exact-erf GELU, learned positions, tied head, GPT-2 init), the same
AdamW step and shapes, fp32 on the CPU. Prints one JSON object with the median ms/step
after warm-up, like our bench.json.

Used by scripts/bench-vs-pytorch.sh; not part of the test command.
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
}


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

    def attn(self, x, causal_mask):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(causal_mask[:, :, :t, :t] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.o(y)

    def forward(self, x, causal_mask):
        x = x + self.attn(self.ln1(x), causal_mask)
        return x + self.pr(F.gelu(self.fc(self.ln2(x))))


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
        x = self.wte(idx) + self.wpe(torch.arange(t))
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
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1337)
    n_layer, n_head, c, block, batch = PRESETS[a.preset]
    batch = a.batch_size or batch
    model = Gpt(a.vocab, n_layer, n_head, c, block, bias=False)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1)
    times = []
    for step in range(a.warmup + a.steps):
        x = torch.randint(0, a.vocab, (batch, block))
        y = torch.randint(0, a.vocab, (batch, block))
        t0 = time.perf_counter()
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        times.append((time.perf_counter() - t0) * 1e3)
    ms = statistics.median(times[a.warmup :])
    print(
        json.dumps(
            {
                "impl": "pytorch",
                "torch": torch.__version__,
                "preset": a.preset,
                "threads": a.threads,
                "batch_size": batch,
                "block_size": block,
                "measured_steps": a.steps,
                "ms_per_step": ms,
                "tokens_per_s": batch * block / (ms / 1e3),
                # Peak of the whole process (Linux reports KiB).
                "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            }
        )
    )


if __name__ == "__main__":
    main()
