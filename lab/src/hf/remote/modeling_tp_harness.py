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
from transformers.cache_utils import DynamicCache
from transformers.modeling_outputs import CausalLMOutputWithPast

# The KV cache's name in forward's and generate's arguments and in the output: `cache`
# from transformers 5.2x on, `past_key_values` before.
CACHE = "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"


class TpHarnessConfig(PretrainedConfig):
    model_type = "tp_harness_gpt"
    # GPT-2's names for the sizes, and the generic ones generation and the KV cache read.
    attribute_map = {
        "num_hidden_layers": "n_layer",
        "hidden_size": "n_embd",
        "num_attention_heads": "n_head",
        "max_position_embeddings": "n_positions",
    }

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
        use_cache=True,
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
        # Whether forward() keeps a KV cache by default (generate() passes its own choice).
        self.use_cache = use_cache
        # The LM head is the token embedding (no second matrix is stored).
        kwargs.setdefault("tie_word_embeddings", True)
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
    tensor are GPT-2's (`h.0.attn.c_attn.weight`, ...). A model trained without biases
    has none (`bias=None`), not zeros that an optimizer would move."""

    def __init__(self, n_in, n_out, bias=True):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(n_in, n_out))
        self.bias = nn.Parameter(torch.zeros(n_out)) if bias else None


def affine(x, weight, bias):
    """x @ weight (+ bias): GPT-2's Conv1D applied to the columns it is given."""
    y = x @ weight
    return y if bias is None else y + bias


def bias_of(linear):
    """A linear's output bias, or 0 where the model has none."""
    return 0 if linear.bias is None else linear.bias


class Block(nn.Module):
    """One layer's parameters; how they combine is the kind's (`TpHarnessModel`).

    The partial outputs of rank r out of n (docs/blocks.md's A_r and M_r, no output
    bias): Megatron's shards, the rank's heads and the rank's hidden units."""

    def __init__(self, cfg, kind, layer):
        super().__init__()
        c = cfg.n_embd
        self.kind, self.n_head, self.act = kind, cfg.n_head, cfg.activation
        # This layer's place in the KV cache.
        self.layer = layer
        self.ln_1, self.ln_2 = Norm(cfg), Norm(cfg)
        # p blocks have no output biases (blocks.md), nor has a model trained without.
        out_bias = kind != "p" and cfg.bias
        self.attn = nn.Module()
        self.attn.c_attn = Conv1D(c, 3 * c, cfg.bias)
        self.attn.c_proj = Conv1D(c, c, out_bias)
        self.mlp = nn.Module()
        self.mlp.c_fc = Conv1D(c, 4 * c, cfg.bias)
        self.mlp.c_proj = Conv1D(4 * c, c, out_bias)

    @property
    def b_o(self):
        return bias_of(self.attn.c_proj)

    @property
    def b_pr(self):
        return bias_of(self.mlp.c_proj)

    def attn_partials(self, hs, n, cache):
        """Every rank's attention partial [A_0, .., A_{n-1}], rank r's from its input
        hs[r] (one input shared by all where len(hs) == 1). Rank r's heads are the
        model's heads r*H/n .. (r+1)*H/n, so the cache holds one layer's keys and values
        for all heads at once, each rank's in its own slice."""
        b, t, c = hs[0].shape
        w = c // n  # the rank's columns of each of Q, K and V
        heads = self.n_head // n
        qkv = self.attn.c_attn
        qs, ks, vs = [], [], []
        for r in range(n):
            h = hs[r] if len(hs) > 1 else hs[0]
            cols = lambda part: slice(part * c + r * w, part * c + (r + 1) * w)
            bias = lambda part: None if qkv.bias is None else qkv.bias[cols(part)]
            q, k, v = (
                affine(h, qkv.weight[:, cols(i)], bias(i)).view(b, t, heads, w // heads).transpose(1, 2)
                for i in range(3)
            )
            qs.append(q)
            ks.append(k)
            vs.append(v)
        k, v = torch.cat(ks, 1), torch.cat(vs, 1)
        if cache is not None:
            k, v = cache.update(k, v, self.layer)
        # The t new positions are the last of the keys' length: each sees every earlier one.
        length = k.shape[2]
        causal = torch.ones(t, length, dtype=torch.bool, device=k.device).tril(length - t)
        out = []
        for r in range(n):
            mine = slice(r * heads, (r + 1) * heads)
            att = (qs[r] @ k[:, mine].transpose(-2, -1)) / math.sqrt(w // heads)
            att = att.masked_fill(~causal, float("-inf")).softmax(-1)
            y = (att @ v[:, mine]).transpose(1, 2).reshape(b, t, w)
            out.append(y @ self.attn.c_proj.weight[r * w : (r + 1) * w, :])
        return out

    def mlp_partial(self, h, r, n):
        fc = self.mlp.c_fc
        w = fc.weight.shape[1] // n
        units = slice(r * w, (r + 1) * w)
        u = activation(self.act, affine(h, fc.weight[:, units], None if fc.bias is None else fc.bias[units]))
        return u @ self.mlp.c_proj.weight[units, :]


class TpHarnessModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        # A kind runs here by its method run_<letter> below (tp-export checks the same).
        known = sorted(k for k in set(cfg.kinds) if hasattr(type(self), "run_" + k))
        if len(cfg.kinds) != cfg.n_layer or len(known) != len(set(cfg.kinds)):
            raise ValueError(f"kinds {cfg.kinds!r} must name one kind this file runs per layer")
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.n_positions, cfg.n_embd)
        self.h = nn.ModuleList(Block(cfg, k, i) for i, k in enumerate(cfg.kinds))
        self.ln_f = Norm(cfg)

    def forward(self, ids, cache=None):
        """The final normalised hidden states of `ids`, which follow the `cache`'s
        positions when one is given (and are added to it)."""
        past = 0 if cache is None else cache.get_seq_length()
        t = ids.shape[1]
        x = self.wte(ids) + self.wpe(torch.arange(past, past + t, device=ids.device))
        kinds, n, i = self.cfg.kinds, self.cfg.tp, 0
        while i < len(kinds):
            run = len(kinds[i:]) - len(kinds[i:].lstrip(kinds[i]))
            blocks = self.h[i : i + run]
            x = getattr(self, "run_" + kinds[i])(blocks, x, n, cache)
            i += run
        return self.ln_f(x)

    # Each kind's run of consecutive blocks, as docs/blocks.md writes it.

    @staticmethod
    def run_t(blocks, x, n, cache):
        for b in blocks:
            x = x + b.attn_partials([b.ln_1(x)], 1, cache)[0] + b.b_o
            x = x + b.mlp_partial(b.ln_2(x), 0, 1) + b.b_pr
        return x

    @staticmethod
    def run_s(blocks, x, n, cache):
        for b in blocks:
            partials = b.attn_partials([b.ln_1(x)], n, cache)
            total = 0
            for r, p_r in enumerate(partials):
                a_r = x + p_r + b.b_o
                total = total + p_r + b.mlp_partial(b.ln_2(a_r), r, n)
            x = x + total + b.b_o + b.b_pr
        return x

    @staticmethod
    def run_p(blocks, x, n, cache):
        xs = [x] * n
        for j, b in enumerate(blocks):
            partials = b.attn_partials([b.ln_1(x_r) for x_r in xs], n, cache)
            zs = [
                p_r + b.mlp_partial(b.ln_2(x_r + p_r), r, n)
                for r, (x_r, p_r) in enumerate(zip(xs, partials))
            ]
            if j + 1 < len(blocks):
                xs = [x_r + z_r for x_r, z_r in zip(xs, zs)]
        return sum(xs) / n + sum(zs)

    @staticmethod
    def run_l(blocks, x, n, cache):
        pending_a = pending_m = 0
        for b in blocks:
            x = x + pending_a
            pending_a = b.attn_partials([b.ln_1(x)], 1, cache)[0] + b.b_o
            x = x + pending_m
            pending_m = b.mlp_partial(b.ln_2(x), 0, 1) + b.b_pr
        return x + pending_a + pending_m


class TpHarnessForCausalLM(PreTrainedModel, GenerationMixin):
    config_class = TpHarnessConfig
    base_model_prefix = "transformer"

    def __init__(self, config):
        super().__init__(config)
        self.transformer = TpHarnessModel(config)
        self.post_init()

    def _init_weights(self, module):
        pass  # every weight comes from the checkpoint

    def get_input_embeddings(self):
        return self.transformer.wte

    def forward(self, input_ids, labels=None, use_cache=None, **kwargs):
        """GPT-2's logits of `input_ids`; with a KV cache (what `generate()` passes, as
        `cache` or `past_key_values`) they follow the cached positions, and the cache
        comes back holding them too."""
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        use_cache = self.config.use_cache if use_cache is None else use_cache
        if cache is None and use_cache:
            cache = DynamicCache()
        if cache is None:
            # Longer contexts than the model saw are cut to its last n_positions tokens,
            # as tp-sample does.
            input_ids = input_ids[:, -self.config.n_positions :]
        elif cache.get_seq_length() + input_ids.shape[1] > self.config.n_positions:
            raise ValueError(
                f"{cache.get_seq_length()} cached and {input_ids.shape[1]} new positions "
                f"exceed the model's {self.config.n_positions}: pass at most that many tokens"
            )
        h = self.transformer(input_ids, cache)
        # The LM head is the token embedding (tied), applied here: no second matrix.
        logits = F.linear(h, self.transformer.wte.weight)
        loss = None
        if labels is not None:
            labels = labels[:, -logits.shape[1] :]
            loss = F.cross_entropy(
                logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1)
            )
        return CausalLMOutputWithPast(
            loss=loss, logits=logits, **{CACHE: cache if use_cache else None}
        )

    def prepare_inputs_for_generation(self, input_ids, use_cache=None, **kwargs):
        """The tokens the cache has not seen. Once the text outgrows the model's positions
        the window slides and every position moves: the cache restarts from the window's
        last n_positions tokens each step, as tp-sample recomputes them."""
        window = self.config.n_positions
        cache = kwargs.get(CACHE)
        if cache is not None:
            past = cache.get_seq_length()
            if input_ids.shape[1] > window:
                cache, past = DynamicCache(), 0
            input_ids = input_ids[:, past:]
        return {"input_ids": input_ids[:, -window:], CACHE: cache, "use_cache": use_cache}
