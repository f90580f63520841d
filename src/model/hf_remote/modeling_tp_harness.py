# A tp-harness model for transformers (`trust_remote_code=True`), written by `tp-export`.
#
# It computes the forward pass of docs/blocks.md literally, in one process: the block
# kinds t, s, p and l laid out by the exported pattern, with the TP ranks' paths of s and
# p run one after another at the tp the model was trained with (`config.tp`): those two
# kinds compute another function at another tp, so the tp is part of the model. t and l
# compute the same function at every tp (their sums are exact), so they run unsharded.
# Self-contained on purpose: torch and transformers, nothing of tp-harness.

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import GenerationMixin, PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutput


class TpHarnessConfig(PretrainedConfig):
    model_type = "tp_harness_gpt"

    def __init__(
        self,
        vocab_size=50257,
        n_positions=1024,
        n_embd=768,
        n_layer=12,
        n_head=12,
        kinds="tttttttttttt",
        pattern="12xt",
        tp=1,
        bias=True,
        norm="layernorm",
        activation="gelu",
        norm_eps=1e-5,
        **kwargs,
    ):
        self.vocab_size = vocab_size
        self.n_positions = n_positions
        self.n_embd = n_embd
        self.n_layer = n_layer
        self.n_head = n_head
        # One letter per layer, the pattern expanded (`pattern` is what the user wrote).
        self.kinds = kinds
        self.pattern = pattern
        self.tp = tp
        self.bias = bias
        self.norm = norm
        self.activation = activation
        self.norm_eps = norm_eps
        kwargs.setdefault("tie_word_embeddings", False)
        super().__init__(**kwargs)


class Norm(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.kind, self.eps = cfg.norm, cfg.norm_eps
        self.weight = nn.Parameter(torch.ones(cfg.n_embd))
        with_bias = cfg.bias and cfg.norm == "layernorm"
        self.bias = nn.Parameter(torch.zeros(cfg.n_embd)) if with_bias else None

    def forward(self, x):
        if self.kind == "rmsnorm":
            return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight
        return F.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)


def activation(name, x):
    if name == "gelu_tanh":
        return F.gelu(x, approximate="tanh")
    if name == "relu":
        return F.relu(x)
    return F.gelu(x)


class Conv1D(nn.Module):
    """GPT-2's linear: weight stored (in, out), so that the names and shapes of every
    tensor are GPT-2's (`h.0.attn.c_attn.weight`, ...)."""

    def __init__(self, n_in, n_out, bias=True):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(n_in, n_out))
        self.bias = nn.Parameter(torch.zeros(n_out)) if bias else None


class Block(nn.Module):
    """One layer's parameters; how they combine is the kind's (`TpHarnessModel`).

    The partial outputs of rank r out of n (docs/blocks.md's A_r and M_r, no output
    bias): Megatron's shards, the rank's heads and the rank's hidden units."""

    def __init__(self, cfg, kind):
        super().__init__()
        c = cfg.n_embd
        self.kind, self.n_head, self.act = kind, cfg.n_head, cfg.activation
        self.ln_1, self.ln_2 = Norm(cfg), Norm(cfg)
        # p blocks have no output biases (blocks.md); the others have them (zero when the
        # model was trained without biases).
        out_bias = kind != "p"
        self.attn = nn.Module()
        self.attn.c_attn = Conv1D(c, 3 * c)
        self.attn.c_proj = Conv1D(c, c, out_bias)
        self.mlp = nn.Module()
        self.mlp.c_fc = Conv1D(c, 4 * c)
        self.mlp.c_proj = Conv1D(4 * c, c, out_bias)

    @property
    def b_o(self):
        return self.attn.c_proj.bias

    @property
    def b_pr(self):
        return self.mlp.c_proj.bias

    def attn_partial(self, h, r, n):
        b, t, c = h.shape
        w = c // n  # the rank's columns of each of Q, K and V
        cols = lambda part: slice(part * c + r * w, part * c + (r + 1) * w)
        q, k, v = (
            h @ self.attn.c_attn.weight[:, cols(i)] + self.attn.c_attn.bias[cols(i)]
            for i in range(3)
        )
        heads = self.n_head // n
        q, k, v = (z.view(b, t, heads, w // heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(w // heads)
        causal = torch.ones(t, t, dtype=torch.bool, device=h.device).tril()
        att = att.masked_fill(~causal, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, w)
        return y @ self.attn.c_proj.weight[r * w : (r + 1) * w, :]

    def mlp_partial(self, h, r, n):
        fc = self.mlp.c_fc
        w = fc.weight.shape[1] // n
        units = slice(r * w, (r + 1) * w)
        u = activation(self.act, h @ fc.weight[:, units] + fc.bias[units])
        return u @ self.mlp.c_proj.weight[units, :]


class TpHarnessModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        if len(cfg.kinds) != cfg.n_layer or set(cfg.kinds) - set("tspl"):
            raise ValueError(f"kinds {cfg.kinds!r} must name one of t, s, p, l per layer")
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.n_positions, cfg.n_embd)
        self.h = nn.ModuleList(Block(cfg, k) for k in cfg.kinds)
        self.ln_f = Norm(cfg)

    def forward(self, ids):
        t = ids.shape[1]
        x = self.wte(ids) + self.wpe(torch.arange(t, device=ids.device))
        kinds, n, i = self.cfg.kinds, self.cfg.tp, 0
        while i < len(kinds):
            run = len(kinds[i:]) - len(kinds[i:].lstrip(kinds[i]))
            blocks = self.h[i : i + run]
            x = getattr(self, "run_" + kinds[i])(blocks, x, n)
            i += run
        return self.ln_f(x)

    # Each kind's run of consecutive blocks, as docs/blocks.md writes it.

    @staticmethod
    def run_t(blocks, x, n):
        for b in blocks:
            x = x + b.attn_partial(b.ln_1(x), 0, 1) + b.b_o
            x = x + b.mlp_partial(b.ln_2(x), 0, 1) + b.b_pr
        return x

    @staticmethod
    def run_s(blocks, x, n):
        for b in blocks:
            h = b.ln_1(x)
            total = 0
            for r in range(n):
                p_r = b.attn_partial(h, r, n)
                a_r = x + p_r + b.b_o
                total = total + p_r + b.mlp_partial(b.ln_2(a_r), r, n)
            x = x + total + b.b_o + b.b_pr
        return x

    @staticmethod
    def run_p(blocks, x, n):
        xs = [x] * n
        for j, b in enumerate(blocks):
            zs = []
            for r in range(n):
                p_r = b.attn_partial(b.ln_1(xs[r]), r, n)
                zs.append(p_r + b.mlp_partial(b.ln_2(xs[r] + p_r), r, n))
            if j + 1 < len(blocks):
                xs = [x_r + z_r for x_r, z_r in zip(xs, zs)]
        return sum(xs) / n + sum(zs)

    @staticmethod
    def run_l(blocks, x, n):
        pending_a = pending_m = 0
        for b in blocks:
            x = x + pending_a
            pending_a = b.attn_partial(b.ln_1(x), 0, 1) + b.b_o
            x = x + pending_m
            pending_m = b.mlp_partial(b.ln_2(x), 0, 1) + b.b_pr
        return x + pending_a + pending_m


class TpHarnessForCausalLM(PreTrainedModel, GenerationMixin):
    config_class = TpHarnessConfig
    base_model_prefix = "transformer"
    _supports_cache_class = False

    def __init__(self, config):
        super().__init__(config)
        self.transformer = TpHarnessModel(config)
        self.post_init()

    def _init_weights(self, module):
        pass  # every weight comes from the checkpoint

    def forward(self, input_ids, labels=None, **kwargs):
        # Longer contexts than the model saw are cut to its last n_positions tokens, as
        # tp-sample does.
        input_ids = input_ids[:, -self.config.n_positions :]
        h = self.transformer(input_ids)
        # The LM head is the token embedding (tied), applied here: no second matrix.
        logits = F.linear(h, self.transformer.wte.weight)
        loss = None
        if labels is not None:
            labels = labels[:, -logits.shape[1] :]
            loss = F.cross_entropy(
                logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1)
            )
        return CausalLMOutput(loss=loss, logits=logits)

    def prepare_inputs_for_generation(self, input_ids, **kwargs):
        return {"input_ids": input_ids}
