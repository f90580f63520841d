#!/usr/bin/env python3
"""transformers as the reader of tp-export's folder, any layout (tests/it/hf_export.rs).

Needs torch and transformers (`TP_HF_PYTHON`; not part of the suite's setup).

  hf-export-check.py DIR VAL_BIN BLOCK PROMPT TOKENS

loads DIR with AutoModelForCausalLM and AutoTokenizer (trust_remote_code=True, as
docs/checkpoints.md tells users to), and prints one JSON line: the tensors the loader
found missing, unexpected or mismatched (none for a faithful export), the mean loss over
every window of the split in VAL_BIN (uint16 ids; consecutive windows of BLOCK tokens,
the tail included, as tp-eval computes it), the number of predictions, whether the
tokenizer's decode-then-encode of the split's first 2000 ids gives them back, and PROMPT
followed by TOKENS greedy tokens, generated with the KV cache (`text`) and without it
(`text_no_cache`).
"""
import json
import sys

import numpy as np
import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM, AutoTokenizer


def split_loss(model, ids, block):
    total, count = 0.0, 0
    with torch.no_grad():
        for s in range(0, len(ids) - 1, block):
            n = min(block, len(ids) - 1 - s)
            x = torch.tensor(ids[s : s + n], dtype=torch.long)[None]
            y = torch.tensor(ids[s + 1 : s + n + 1], dtype=torch.long)
            logits = model(x).logits[0]
            total += F.cross_entropy(logits.double(), y, reduction="sum").item()
            count += n
    return total / count, count


def main():
    path, val_bin, block, prompt, tokens = sys.argv[1:6]
    model, info = AutoModelForCausalLM.from_pretrained(
        path, trust_remote_code=True, output_loading_info=True
    )
    model.eval()
    loading = {
        k: sorted(info.get(k) or [])
        for k in ("missing_keys", "unexpected_keys", "mismatched_keys")
    }
    tok = AutoTokenizer.from_pretrained(path, trust_remote_code=True)
    ids = np.fromfile(val_bin, dtype=np.uint16).astype(np.int64).tolist()
    loss, count = split_loss(model, ids, int(block))
    head = ids[:2000]
    round_trip = tok.encode(tok.decode(head)) == head
    start = torch.tensor([tok.encode(prompt)], dtype=torch.long)
    # Counts the forward calls that took one new token after cached ones: that the cache
    # was used, not just accepted.
    cached_steps = []
    forward = model.forward

    def counting_forward(input_ids, **kwargs):
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        if cache is not None and cache.get_seq_length() > 0 and input_ids.shape[1] == 1:
            cached_steps.append(1)
        return forward(input_ids, **kwargs)

    model.forward = counting_forward
    texts = {}
    for key, cache in (("text", True), ("text_no_cache", False)):
        out = model.generate(
            start, max_new_tokens=int(tokens), do_sample=False, use_cache=cache, pad_token_id=0
        )
        texts[key] = prompt + tok.decode(out[0, start.shape[1] :].tolist())
    print(
        json.dumps(
            {
                "loading": loading,
                "tied": bool(model.config.tie_word_embeddings),
                "loss": loss,
                "tokens": count,
                "round_trip": round_trip,
                "cached_steps": len(cached_steps),
                **texts,
            }
        )
    )


if __name__ == "__main__":
    main()
