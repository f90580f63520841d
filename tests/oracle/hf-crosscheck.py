#!/usr/bin/env python3
"""transformers' own GPT-2 as the reference for tp-import and tp-export.

Needs torch and transformers (not part of the test setup: tests/import.rs runs this only
in its ignored cross-check, `TP_HF_PYTHON=/path/to/python cargo test --release --test
import -- --ignored`).

  hf-crosscheck.py make DIR      a random GPT2LMHeadModel saved with save_pretrained, and
                                 DIR/reference.safetensors: token ids and the last
                                 position's logits
  hf-crosscheck.py logits DIR    the same reference for the model already in DIR (e.g.
                                 written by tp-export)
"""
import sys

import torch
from safetensors.torch import save_file
from transformers import GPT2Config, GPT2LMHeadModel

IDS = [[15496, 11, 995, 0, 50256, 464, 2068, 7586, 21831, 18045, 625, 262]]


def reference(model, out_dir, vocab):
    ids = torch.tensor([[i % vocab for i in row] for row in IDS], dtype=torch.long)
    with torch.no_grad():
        logits = model(ids).logits[:, -1, :].float().contiguous()
    save_file(
        {"ids": ids.to(torch.int64), "logits": logits},
        f"{out_dir}/reference.safetensors",
    )


def main():
    mode, out_dir = sys.argv[1], sys.argv[2]
    torch.manual_seed(0)
    if mode == "make":
        cfg = GPT2Config(
            vocab_size=50257, n_positions=64, n_embd=64, n_layer=2, n_head=4,
            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        )
        model = GPT2LMHeadModel(cfg).eval()
        # Non-zero biases and norm parameters, so that a mapping error shows.
        with torch.no_grad():
            for name, p in model.named_parameters():
                if p.dim() == 1:
                    p.add_(0.05 * torch.randn_like(p))
        model.save_pretrained(out_dir)
    elif mode == "logits":
        model = GPT2LMHeadModel.from_pretrained(out_dir).eval()
    else:
        sys.exit(f"unknown mode {mode}: make or logits")
    reference(model, out_dir, model.config.vocab_size)


if __name__ == "__main__":
    main()
