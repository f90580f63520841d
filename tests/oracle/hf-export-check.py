#!/usr/bin/env python3
"""transformers as the reader of tp-export's folder, any layout (tests/it/hf_export.rs).

Needs torch and transformers (`TP_HF_PYTHON`; not part of the suite's setup).

  hf-export-check.py DIR VAL_BIN BLOCK PROMPT TOKENS

loads DIR with AutoModelForCausalLM and AutoTokenizer (trust_remote_code=True), and
prints one JSON line: the mean loss over every window of the split in VAL_BIN (uint16
ids; consecutive windows of BLOCK tokens, the tail included, as tp-eval computes it),
the number of predictions, whether the tokenizer's decode-then-encode of the split's
first 2000 ids gives them back, and PROMPT followed by TOKENS greedy tokens.
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
    model = AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True).eval()
    tok = AutoTokenizer.from_pretrained(path, trust_remote_code=True)
    ids = np.fromfile(val_bin, dtype=np.uint16).astype(np.int64).tolist()
    loss, count = split_loss(model, ids, int(block))
    head = ids[:2000]
    round_trip = tok.encode(tok.decode(head)) == head
    start = torch.tensor([tok.encode(prompt)], dtype=torch.long)
    out = model.generate(
        start, max_new_tokens=int(tokens), do_sample=False, use_cache=False, pad_token_id=0
    )
    text = prompt + tok.decode(out[0, start.shape[1] :].tolist())
    print(json.dumps({"loss": loss, "tokens": count, "round_trip": round_trip, "text": text}))


if __name__ == "__main__":
    main()
