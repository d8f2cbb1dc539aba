#!/usr/bin/env python3
"""llama_oracle.py — a small NumPy reference for models of architecture `llama`
(incl. Mistral), `gemma3`, `qwen2` and `qwen3`, read from a GGUF file or from a
Hugging Face directory (config.json + safetensors).

It exists to check inferd's C runtime against something written independently:
this file follows the architecture's definition (MODEL-FORMATS.md §2 and §5.1),
not inferd's code. Weights are read and dequantized by the PyPI `gguf` package
(gguf.GGUFReader + gguf.quants.dequantize) and kept as float64; every activation
is float64 too, so the oracle's own rounding error (~1e-13 relative) is far
below the 1e-3 tolerance it is used with.

The forward pass, for token t at position p (0-based, counting every token):
    h = E[t]
    per layer:  a = RMSNorm(h; attn_norm)
                q, k, v = Wq a, Wk a, Wv a                 (heads of head_dim)
                q, k = RoPE(q, p), RoPE(k, p)              interleaved pairs (x[2i], x[2i+1])
                o = softmax(q·K^T / sqrt(head_dim), causal) V     grouped-query attention
                h = h + Wo o
                f = RMSNorm(h; ffn_norm)
                h = h + Wdown(silu(Wgate f) * (Wup f))
    logits = W_out RMSNorm(h; output_norm)     (W_out = token_embd when output.weight is absent)

Gemma 3 (`gemma3`, MODEL-FORMATS.md §2.2 and §5.2) differs in:
    h = E[t] * sqrt(n_embd)
    per layer:  a = RMSNorm(h; attn_norm)         (GGUF norm weights already hold 1 + w)
                q, k = RMSNorm per head (q_norm, k_norm) BEFORE RoPE; v as is
                RoPE on NEOX pairs (x[i], x[i + n_rot/2]); base 10000 on local layers
                (`rope.freq_base_swa` if present), `rope.freq_base` on global ones
                local layers also mask keys with i - j >= sliding_window
                h = h + RMSNorm(Wo o; post_attention_norm)
                f = RMSNorm(h; ffn_norm)
                h = h + RMSNorm(Wdown(gelu_tanh(Wgate f) * (Wup f)); post_ffw_norm)
    local layers: `attention.sliding_window_pattern` (per-layer bools, true = local) when
    present, else llama.cpp's period 6 (layer l is global iff (l + 1) % 6 == 0).
    Scores are scaled by 1/sqrt(head_dim) as for llama (query_pre_attn_scalar = 256).

RoPE pairs (x[2i], x[2i+1]) because llama.cpp's converter permuted the Q/K rows
of the HF checkpoint back to Meta's interleaved order (§2.4). The angle of pair
i at position p is p * freq_scale * base^(-2i/n_rot) / ff[i], where base is
`llama.rope.freq_base`, freq_scale = 1 / `llama.rope.scaling.factor` for linear
scaling, and ff = the `rope_freqs.weight` tensor (Llama 3's frequency factors)
when the file has one, else 1.

Qwen 2 / Qwen 3 (`qwen2`, `qwen3`): the llama pass with NEOX pairs (no Q/K permutation
in their GGUFs either), q/k/v biases (Qwen 2), per-head QK-norm before RoPE (Qwen 3).

Hugging Face directories (read with NumPy from the safetensors format, §4.1; config.json
§4.2/§4.3): the weights are in HF order, so RoPE uses rotate-half pairs (x[i], x[i+d/2])
for every architecture (§4.4) — the same rotation GGUF llama gets from its permuted rows.
Gemma's HF norm weights are w, used as (1 + w) (§5.2). Llama 3 `rope_scaling` follows HF's
formula (inv_freq / factor on the low band, a linear blend in between); Mistral's
`sliding_window` masks every layer; Gemma 3's `query_pre_attn_scalar` sets the score scale,
`layer_types` / `sliding_window_pattern` the local layers, `rope_local_base_freq` their base,
`final_logit_softcapping` c (when set) maps logits to c·tanh(logits/c); the embedding scale
sqrt(hidden) is rounded to bfloat16 when torch_dtype is bfloat16, as transformers does.

Logit rows (the --dump-logits convention shared with inferd-worker): for a
prompt of n_prompt tokens and N >= 1 generated tokens, the dump holds
n_prompt + N - 1 rows: the logits at every prompt position, then the logits
after feeding each generated token except the last. Row i is the distribution
that predicts token i+1 of the sequence prompt + generated, so row
n_prompt - 1 + j predicted generated token j. With N = 0 it holds the n_prompt
prompt rows.

Usage as a library:
    m = LlamaOracle("model.gguf")
    res = m.generate([1, 9690, ...], n_new=64)   # res.tokens, res.logits [rows, vocab]
CLI:
    llama_oracle.py --model PATH --tokens "id id ..." [-n N] [--dump-logits F.npy] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass, field

import numpy as np

try:
    import gguf
except ImportError:  # the caller decides whether that is a skip or an error
    gguf = None

ARCHS = ("llama", "gemma3", "qwen2", "qwen3")
HF_ARCHS = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "llama",
            "Gemma3ForCausalLM": "gemma3", "Gemma3ForConditionalGeneration": "gemma3",
            "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3"}


# ---- GGUF reading -------------------------------------------------------------------------------

def _field(reader, key, default=None):
    """The value of metadata key `key` (scalar, string or list), or `default`."""
    f = reader.fields.get(key)
    if f is None:
        return default
    return f.contents()


def _scalar(reader, key, default=None):
    v = _field(reader, key, default)
    if isinstance(v, list):  # a per-layer array; these models use one value for all layers
        if len(set(v)) != 1:
            raise ValueError(f"{key}: per-layer values {v} are not supported by the oracle")
        v = v[0]
    return v


@dataclass
class HParams:
    n_vocab: int
    n_embd: int
    n_layer: int
    n_ff: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_rot: int
    eps: float
    rope_base: float
    freq_scale: float
    bos: int | None
    eos: int | None
    eot: int | None
    arch: str = "llama"
    emb_scale: float = 1.0             # gemma3: sqrt(n_embd)
    window: int = 0                    # sliding window of local layers (gemma3)
    local: tuple = ()                  # per layer: True = local (sliding-window) layer
    rope_base_local: float = 10000.0
    local_scaled: bool = False         # local layers use freq_scale too (not gemma3)
    neox: bool = False                 # RoPE pairs (x[i], x[i + n_rot/2])
    qk_norm: bool = False              # per-head RMSNorm of q, k before RoPE
    norm_plus_one: bool = False        # HF gemma: norm weights are w, used as 1 + w
    attn_scale: float = 0.0            # 0: 1/sqrt(head_dim)
    softcap: float = 0.0               # final logit soft-cap (0: none)
    llama3: dict | None = None         # HF rope_scaling of type llama3


def read_hparams(reader) -> HParams:
    arch = _field(reader, "general.architecture")
    if arch not in ARCHS:
        raise ValueError(f"architecture is {arch!r}; this oracle implements {ARCHS} only")
    p = arch + "."
    n_embd = int(_scalar(reader, p + "embedding_length"))
    n_head = int(_scalar(reader, p + "attention.head_count"))
    head_dim = int(_scalar(reader, p + "attention.key_length", n_embd // n_head))
    vlen = int(_scalar(reader, p + "attention.value_length", head_dim))
    if vlen != head_dim:
        raise ValueError(f"value_length {vlen} != key_length {head_dim}: not a llama layout")
    tokens = _field(reader, "tokenizer.ggml.tokens") or []
    scaling = _field(reader, p + "rope.scaling.type", "none")
    factor = float(_scalar(reader, p + "rope.scaling.factor", 0.0) or 0.0)
    if scaling not in ("none", "linear") and factor not in (0.0, 1.0):
        raise ValueError(f"rope scaling {scaling!r} is not supported by the oracle")
    freq_scale = 1.0 / factor if (scaling == "linear" and factor > 0.0) else 1.0
    n_layer = int(_scalar(reader, p + "block_count"))
    extra = dict(neox=arch != "llama", qk_norm=arch in ("gemma3", "qwen3"))
    if arch == "gemma3":
        pattern = _field(reader, p + "attention.sliding_window_pattern")
        if isinstance(pattern, list):
            local = tuple(bool(x) for x in pattern)
        else:
            local = tuple((l + 1) % 6 != 0 for l in range(n_layer))
        extra.update(emb_scale=float(np.sqrt(n_embd)),
                     window=int(_scalar(reader, p + "attention.sliding_window")),
                     local=local,
                     rope_base_local=float(_scalar(reader, p + "rope.freq_base_swa", 10000.0)))
    else:
        extra.update(rope_base_local=float(_scalar(reader, p + "rope.freq_base", 10000.0)),
                     local_scaled=True)
        window = int(_scalar(reader, p + "attention.sliding_window", 0) or 0)
        if window:                         # Mistral-style: every layer sees the window
            extra.update(window=window, local=tuple(True for _ in range(n_layer)))
    return HParams(
        arch=arch,
        **extra,
        n_vocab=int(_scalar(reader, p + "vocab_size", len(tokens))),
        n_embd=n_embd,
        n_layer=n_layer,
        n_ff=int(_scalar(reader, p + "feed_forward_length")),
        n_head=n_head,
        n_head_kv=int(_scalar(reader, p + "attention.head_count_kv", n_head)),
        head_dim=head_dim,
        n_rot=int(_scalar(reader, p + "rope.dimension_count", head_dim)),
        eps=float(_scalar(reader, p + "attention.layer_norm_rms_epsilon")),
        rope_base=float(_scalar(reader, p + "rope.freq_base", 10000.0)),
        freq_scale=freq_scale,
        bos=_scalar(reader, "tokenizer.ggml.bos_token_id"),
        eos=_scalar(reader, "tokenizer.ggml.eos_token_id"),
        eot=_scalar(reader, "tokenizer.ggml.eot_token_id"),
    )


# ---- Hugging Face directories ---------------------------------------------------------------

_ST_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": "bf16", "F64": np.float64}


def read_safetensors(path: str) -> dict:
    """{name: float64 array} of one safetensors file (format: MODEL-FORMATS.md §4.1)."""
    with open(path, "rb") as f:
        raw = f.read()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    data = memoryview(raw)[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        dt = _ST_DTYPES.get(e["dtype"])
        if dt is None:
            continue                       # not a weight the model uses
        buf = data[b:end]
        if dt == "bf16":
            a = (np.frombuffer(buf, np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            a = np.frombuffer(buf, dt)
        out[name] = a.astype(np.float64).reshape(e["shape"])
    return out


def read_hf_dir(path: str):
    """(config dict of the text model, top-level config, {name: array}) of an HF directory."""
    with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
        top = json.load(f)
    index = os.path.join(path, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index, encoding="utf-8") as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    tensors = {}
    for fn in files:
        tensors.update(read_safetensors(os.path.join(path, fn)))
    cfg = top.get("text_config", top) if top["architectures"][0].endswith(
        "ConditionalGeneration") else top
    return cfg, top, tensors


def hf_hparams(cfg: dict, top: dict) -> HParams:
    cls = top["architectures"][0]
    if cls not in HF_ARCHS:
        raise ValueError(f"HF architecture {cls!r} is not implemented by the oracle")
    arch = HF_ARCHS[cls]
    gemma = arch == "gemma3"
    g = (lambda k, d: cfg.get(k, d) if cfg.get(k) is not None else d)
    n_embd = g("hidden_size", 2304 if gemma else None)
    n_head = g("num_attention_heads", 8 if gemma else None)
    head_dim = g("head_dim", 256 if gemma else n_embd // n_head)
    n_layer = g("num_hidden_layers", 26 if gemma else None)
    rs = cfg.get("rope_scaling") or {}
    rtype = rs.get("rope_type", rs.get("type", "default"))
    freq_scale, llama3 = 1.0, None
    if rtype == "linear":
        freq_scale = 1.0 / rs["factor"]
    elif rtype == "llama3":
        llama3 = rs
    elif rtype != "default":
        raise ValueError(f"rope_scaling {rtype!r} is not implemented by the oracle")
    hp = HParams(
        arch=arch, n_vocab=g("vocab_size", 262208 if gemma else None), n_embd=n_embd,
        n_layer=n_layer, n_ff=g("intermediate_size", 9216 if gemma else None), n_head=n_head,
        n_head_kv=g("num_key_value_heads", 4 if gemma else n_head), head_dim=head_dim,
        n_rot=head_dim, eps=g("rms_norm_eps", 1e-6),
        rope_base=g("rope_theta", 1e6 if gemma else 10000.0), freq_scale=freq_scale,
        bos=None, eos=None, eot=None, neox=True, qk_norm=arch in ("gemma3", "qwen3"),
        llama3=llama3, softcap=g("final_logit_softcapping", 0.0))
    if gemma:
        es = np.float32(np.sqrt(n_embd))
        if (top.get("torch_dtype") or cfg.get("torch_dtype")) == "bfloat16":
            b = int(es.view(np.uint32))
            b = (b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000
            es = np.uint32(b).view(np.float32)
        lt = cfg.get("layer_types")
        if lt:
            local = tuple(t == "sliding_attention" for t in lt)
        else:
            per = g("sliding_window_pattern", 6)
            local = tuple((l + 1) % per != 0 for l in range(n_layer))
        hp.emb_scale = float(es)
        hp.window = g("sliding_window", 4096)
        hp.local = local
        hp.rope_base_local = g("rope_local_base_freq", 10000.0)
        hp.norm_plus_one = True
        hp.attn_scale = 1.0 / np.sqrt(g("query_pre_attn_scalar", 256))
    else:
        hp.rope_base_local = hp.rope_base
        hp.local_scaled = True
        if cls == "MistralForCausalLM" and cfg.get("sliding_window"):
            hp.window = int(cfg["sliding_window"])
            hp.local = tuple(True for _ in range(n_layer))
        if cls in ("Qwen2ForCausalLM", "Qwen3ForCausalLM") and cfg.get("use_sliding_window"):
            # transformers: the window on layers >= max_window_layers, or as layer_types says
            w = cfg.get("sliding_window", 4096)
            lt = cfg.get("layer_types")
            mwl = cfg.get("max_window_layers", 28)
            if w:
                hp.window = int(w)
                hp.local = tuple(t == "sliding_attention" for t in lt) if lt else \
                    tuple(l >= mwl for l in range(n_layer))
    return hp


# HF name (after the text prefix) of each Layer field; gemma differs for the norms.
_HF_LAYER = {"attn_norm": "input_layernorm", "wq": "self_attn.q_proj", "wk": "self_attn.k_proj",
             "wv": "self_attn.v_proj", "wo": "self_attn.o_proj", "q_norm": "self_attn.q_norm",
             "k_norm": "self_attn.k_norm", "ffn_norm": "post_attention_layernorm",
             "w_gate": "mlp.gate_proj", "w_up": "mlp.up_proj", "w_down": "mlp.down_proj"}
_HF_LAYER_GEMMA = dict(_HF_LAYER, ffn_norm="pre_feedforward_layernorm",
                       post_attn_norm="post_attention_layernorm",
                       post_ffw_norm="post_feedforward_layernorm")


def _dequant(t, dtype) -> np.ndarray:
    """Tensor `t` as a dense array of shape (ne[n-1], ..., ne[0]) — for a matrix that is
    [out, in], i.e. y = W @ x, the HF orientation (GGUF's ne0 is the input dimension)."""
    a = gguf.quants.dequantize(t.data, t.tensor_type)
    shape = tuple(int(d) for d in reversed(t.shape))
    return np.asarray(a, dtype=dtype).reshape(shape)


# ---- the model ----------------------------------------------------------------------------------

@dataclass
class Layer:
    attn_norm: np.ndarray  # [n_embd]
    wq: np.ndarray         # [n_head*hd, n_embd]
    wk: np.ndarray         # [n_head_kv*hd, n_embd]
    wv: np.ndarray         # [n_head_kv*hd, n_embd]
    wo: np.ndarray         # [n_embd, n_head*hd]
    ffn_norm: np.ndarray   # [n_embd]
    w_gate: np.ndarray     # [n_ff, n_embd]
    w_up: np.ndarray       # [n_ff, n_embd]
    w_down: np.ndarray     # [n_embd, n_ff]
    bq: np.ndarray | None = None
    bk: np.ndarray | None = None
    bv: np.ndarray | None = None
    bo: np.ndarray | None = None
    q_norm: np.ndarray | None = None      # gemma3 [hd]
    k_norm: np.ndarray | None = None      # gemma3 [hd]
    post_attn_norm: np.ndarray | None = None  # gemma3 [n_embd]
    post_ffw_norm: np.ndarray | None = None   # gemma3 [n_embd]


@dataclass
class Cache:
    """Per-layer K (after RoPE) and V of every position fed so far: [n_head_kv, n_ctx, hd]."""
    k: list
    v: list
    n: int = 0


@dataclass
class Result:
    prompt: list
    tokens: list                       # generated tokens
    logits: np.ndarray                 # [rows, n_vocab] float64, rows as in the module doc
    timings: dict = field(default_factory=dict)


class LlamaOracle:
    def __init__(self, path: str, dtype=np.float64):
        self.dtype = dtype
        if os.path.isdir(path):
            self._init_hf(path)
            return
        if gguf is None:
            raise ImportError("the PyPI package 'gguf' is required")
        reader = gguf.GGUFReader(path, "r")
        self.hp = hp = read_hparams(reader)
        self.vocab = _field(reader, "tokenizer.ggml.tokens")
        self.token_type = _field(reader, "tokenizer.ggml.token_type")
        tensors = {t.name: t for t in reader.tensors}

        def get(name, shape, required=True):
            t = tensors.get(name)
            if t is None:
                if required:
                    raise ValueError(f"tensor {name} is missing")
                return None
            a = _dequant(t, dtype)
            if a.shape != shape:
                raise ValueError(f"tensor {name}: shape {a.shape}, expected {shape}")
            return a

        E, D, hd = hp.n_vocab, hp.n_embd, hp.head_dim
        qd, kvd = hp.n_head * hd, hp.n_head_kv * hd
        self.tok_embd = get("token_embd.weight", (E, D))
        self.output_norm = get("output_norm.weight", (D,))
        out = get("output.weight", (E, D), required=False)
        self.output = self.tok_embd if out is None else out      # tied embedding (§2.3)
        self.tied = out is None
        ff = get("rope_freqs.weight", (hp.n_rot // 2,), required=False)
        self.layers = []
        gemma = hp.arch == "gemma3"
        for i in range(hp.n_layer):
            b = f"blk.{i}."
            self.layers.append(Layer(
                q_norm=get(b + "attn_q_norm.weight", (hd,)) if hp.qk_norm else None,
                k_norm=get(b + "attn_k_norm.weight", (hd,)) if hp.qk_norm else None,
                post_attn_norm=get(b + "post_attention_norm.weight", (D,)) if gemma else None,
                post_ffw_norm=get(b + "post_ffw_norm.weight", (D,)) if gemma else None,
                attn_norm=get(b + "attn_norm.weight", (D,)),
                wq=get(b + "attn_q.weight", (qd, D)),
                wk=get(b + "attn_k.weight", (kvd, D)),
                wv=get(b + "attn_v.weight", (kvd, D)),
                wo=get(b + "attn_output.weight", (D, qd)),
                ffn_norm=get(b + "ffn_norm.weight", (D,)),
                w_gate=get(b + "ffn_gate.weight", (hp.n_ff, D)),
                w_up=get(b + "ffn_up.weight", (hp.n_ff, D)),
                w_down=get(b + "ffn_down.weight", (D, hp.n_ff)),
                bq=get(b + "attn_q.bias", (qd,), required=False),
                bk=get(b + "attn_k.bias", (kvd,), required=False),
                bv=get(b + "attn_v.bias", (kvd,), required=False),
                bo=get(b + "attn_output.bias", (D,), required=False),
            ))
        self._set_rope(ff)

    def _set_rope(self, ff):
        hp = self.hp
        # Inverse frequency of rotation pair i (§2.4): freq_scale * base^(-2i/n_rot) / ff[i].
        i = np.arange(hp.n_rot // 2, dtype=np.float64)
        inv = hp.freq_scale * hp.rope_base ** (-2.0 * i / hp.n_rot)
        if ff is not None:
            inv = inv / ff.astype(np.float64)
        if hp.llama3 is not None:          # HF _compute_llama3_parameters, §2.4
            r = hp.llama3
            factor, lo, hi = r["factor"], r.get("low_freq_factor", 1.0), r.get("high_freq_factor", 4.0)
            orig = r.get("original_max_position_embeddings", 8192)
            wl = 2 * np.pi / inv
            scaled = np.where(wl > orig / lo, inv / factor, inv)
            smooth = (orig / wl - lo) / (hi - lo)
            blended = (1 - smooth) * inv / factor + smooth * inv
            medium = (wl >= orig / hi) & (wl <= orig / lo)
            inv = np.where(medium, blended, scaled)
        self.inv_freq = inv
        # local layers: gemma3's own base, never scaled (§5.2); others as the global ones.
        self.inv_freq_local = inv if hp.local_scaled else \
            hp.rope_base_local ** (-2.0 * i / hp.n_rot)
        self.has_rope_freqs = ff is not None or hp.llama3 is not None

    def _init_hf(self, path):
        """Loads an HF directory: weights in HF order (rotate-half RoPE), names §2.1/§2.2."""
        cfg, top, t = read_hf_dir(path)
        self.hp = hp = hf_hparams(cfg, top)
        self.vocab, self.token_type = None, None
        dtype = self.dtype
        pre = next((p for p in ("model.", "language_model.model.", "model.language_model.")
                    if p + "embed_tokens.weight" in t), None)
        if pre is None:
            raise ValueError("no embed_tokens.weight in the checkpoint")

        def get(name, shape, required=True):
            a = t.get(name)
            if a is None:
                if required:
                    raise ValueError(f"tensor {name} is missing")
                return None
            if a.shape != shape:
                raise ValueError(f"tensor {name}: shape {a.shape}, expected {shape}")
            return a.astype(dtype)

        E, D, hd = hp.n_vocab, hp.n_embd, hp.head_dim
        qd, kvd = hp.n_head * hd, hp.n_head_kv * hd
        gemma = hp.arch == "gemma3"
        tied = cfg.get("tie_word_embeddings", top.get("tie_word_embeddings", gemma))
        self.tok_embd = get(pre + "embed_tokens.weight", (E, D))
        self.output_norm = get(pre + "norm.weight", (D,))
        head = None if tied else next((get(n, (E, D)) for n in
                                       ("lm_head.weight", "language_model.lm_head.weight")
                                       if n in t), None)
        if not tied and head is None:
            raise ValueError("lm_head.weight is missing and tie_word_embeddings is false")
        self.output = self.tok_embd if tied else head
        self.tied = tied
        names = _HF_LAYER_GEMMA if gemma else _HF_LAYER
        shapes = {"attn_norm": (D,), "wq": (qd, D), "wk": (kvd, D), "wv": (kvd, D),
                  "wo": (D, qd), "q_norm": (hd,), "k_norm": (hd,), "ffn_norm": (D,),
                  "w_gate": (hp.n_ff, D), "w_up": (hp.n_ff, D), "w_down": (D, hp.n_ff),
                  "post_attn_norm": (D,), "post_ffw_norm": (D,)}
        self.layers = []
        for i in range(hp.n_layer):
            b = f"{pre}layers.{i}."
            kw = {}
            for fld, hn in names.items():
                if fld in ("q_norm", "k_norm") and not hp.qk_norm:
                    continue
                kw[fld] = get(b + hn + ".weight", shapes[fld])
            for fld, hn, n in (("bq", "self_attn.q_proj", qd), ("bk", "self_attn.k_proj", kvd),
                               ("bv", "self_attn.v_proj", kvd), ("bo", "self_attn.o_proj", D)):
                kw[fld] = get(b + hn + ".bias", (n,), required=False)
            self.layers.append(Layer(**kw))
        self._set_rope(None)

    # -- building blocks (each follows MODEL-FORMATS.md §5.1) --

    def rmsnorm(self, x, w):
        """x / sqrt(mean(x^2) + eps) * w over the last axis ((1 + w) for HF Gemma)."""
        ms = np.mean(x * x, axis=-1, keepdims=True)
        if self.hp.norm_plus_one:
            w = w + self.dtype(1.0)
        return x / np.sqrt(ms + self.hp.eps) * w

    def rope(self, x, pos, inv_freq=None):
        """Rotate x [heads, T, hd] at positions pos [T] over the first n_rot dims: pairs
        (x[2i], x[2i+1]) for llama (GGUF layout), (x[i], x[i + n_rot/2]) for gemma3."""
        nr = self.hp.n_rot
        inv = self.inv_freq if inv_freq is None else inv_freq
        ang = pos.astype(np.float64)[:, None] * inv[None, :]               # [T, nr/2]
        cos, sin = np.cos(ang).astype(self.dtype), np.sin(ang).astype(self.dtype)
        if self.hp.neox:
            ia, ib = slice(0, nr // 2), slice(nr // 2, nr)
        else:
            ia, ib = slice(0, nr, 2), slice(1, nr, 2)
        a, b = x[..., ia], x[..., ib]
        y = x.copy()
        y[..., ia] = a * cos - b * sin
        y[..., ib] = a * sin + b * cos
        return y

    @staticmethod
    def silu(x):
        return x / (1.0 + np.exp(-x))

    @staticmethod
    def gelu_tanh(x):
        return 0.5 * x * (1.0 + np.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))

    def new_cache(self, n_ctx: int) -> Cache:
        hp = self.hp
        shape = (hp.n_head_kv, n_ctx, hp.head_dim)
        return Cache(k=[np.zeros(shape, self.dtype) for _ in range(hp.n_layer)],
                     v=[np.zeros(shape, self.dtype) for _ in range(hp.n_layer)])

    def forward(self, tokens, cache: Cache, images=()) -> np.ndarray:
        """Feed `tokens` (continuing the sequence held in `cache`, which it extends) and
        return the logits at each of their positions: [len(tokens), n_vocab].
        images: Gemma 3's images among these tokens, (start, rows) with start a position
        and rows [len, n_embd]: the rows replace those tokens' embeddings (unscaled, as
        transformers' masked_scatter after the scaled embedding), and the image's tokens
        see each other both ways — transformers 5's create_masks_for_vision_model:
        OR(causal, same image) on global layers, AND(sliding window, OR(causal, same
        image)) on local ones (docs/vision.md)."""
        hp = self.hp
        T = len(tokens)
        p0 = cache.n
        if p0 + T > cache.k[0].shape[1]:
            raise ValueError(f"cache holds {cache.k[0].shape[1]} positions, need {p0 + T}")
        pos = np.arange(p0, p0 + T)
        S = p0 + T                                     # keys visible to the last query
        nh, nkv, hd = hp.n_head, hp.n_head_kv, hp.head_dim
        group = nh // nkv
        scale = self.dtype(hp.attn_scale or 1.0 / np.sqrt(hd))
        # Causal mask: query t (position p0+t) sees keys 0..p0+t; on gemma3's local layers
        # also only keys with (p0+t) - j < window.
        keys = np.arange(S)[None, :]
        group_of = np.full(S, -1)                      # each position's image, -1 for text
        for i, (start, rows) in enumerate(images):
            if start < p0 or start + len(rows) > S:
                raise ValueError(f"image at {start} (+{len(rows)}) is not among these tokens")
            group_of[start:start + len(rows)] = i
        qg, kg = group_of[pos][:, None], group_of[keys]
        seen = (keys <= pos[:, None]) | ((qg == kg) & (qg >= 0))
        mask = np.where(seen, 0.0, -np.inf).astype(self.dtype)
        mask_local = mask
        if hp.window > 0:
            mask_local = np.where(seen & (keys > pos[:, None] - hp.window),
                                  0.0, -np.inf).astype(self.dtype)
        gemma = hp.arch == "gemma3"

        h = self.tok_embd[np.asarray(tokens, dtype=np.int64)]                 # [T, D]
        if gemma:
            h = h * self.dtype(hp.emb_scale)
        for start, rows in images:
            h[start - p0:start - p0 + len(rows)] = np.asarray(rows, dtype=self.dtype)
        # Every array stays in self.dtype: one stray float64 operand would make NumPy
        # convert whole weight matrices at every step.
        for li, L in enumerate(self.layers):
            local = bool(hp.local) and hp.local[li]
            a = self.rmsnorm(h, L.attn_norm)
            q = a @ L.wq.T
            k = a @ L.wk.T
            v = a @ L.wv.T
            if L.bq is not None:
                q = q + L.bq
            if L.bk is not None:
                k = k + L.bk
            if L.bv is not None:
                v = v + L.bv
            q = q.reshape(T, nh, hd).transpose(1, 0, 2)                         # [nh, T, hd]
            k = k.reshape(T, nkv, hd).transpose(1, 0, 2)                        # [nkv, T, hd]
            if hp.qk_norm:                            # QK-norm over each head, before RoPE
                q = self.rmsnorm(q, L.q_norm)
                k = self.rmsnorm(k, L.k_norm)
            inv = self.inv_freq_local if local else None
            q = self.rope(q, pos, inv)
            k = self.rope(k, pos, inv)
            v = v.reshape(T, nkv, hd).transpose(1, 0, 2)
            cache.k[li][:, p0:S] = k
            cache.v[li][:, p0:S] = v
            K = cache.k[li][:, :S]                                              # [nkv, S, hd]
            V = cache.v[li][:, :S]
            # GQA: query head j uses kv head j // group (consecutive heads share one).
            qg = q.reshape(nkv, group * T, hd)
            s = (qg @ K.transpose(0, 2, 1)).reshape(nkv, group, T, S) * scale
            s = s + (mask_local if local else mask)
            s = s - s.max(axis=-1, keepdims=True)
            pr = np.exp(s)
            pr /= pr.sum(axis=-1, keepdims=True)
            o = (pr.reshape(nkv, group * T, S) @ V).reshape(nh, T, hd)          # [nh, T, hd]
            o = o.transpose(1, 0, 2).reshape(T, nh * hd)
            att = o @ L.wo.T
            if L.bo is not None:
                att = att + L.bo
            if gemma:
                att = self.rmsnorm(att, L.post_attn_norm)
            h = h + att
            f = self.rmsnorm(h, L.ffn_norm)
            if gemma:
                m = (self.gelu_tanh(f @ L.w_gate.T) * (f @ L.w_up.T)) @ L.w_down.T
                h = h + self.rmsnorm(m, L.post_ffw_norm)
            else:
                h = h + (self.silu(f @ L.w_gate.T) * (f @ L.w_up.T)) @ L.w_down.T
        cache.n = S
        logits = self.rmsnorm(h, self.output_norm) @ self.output.T
        if hp.softcap:
            c = self.dtype(hp.softcap)
            logits = c * np.tanh(logits / c)
        assert logits.dtype == self.dtype, logits.dtype
        return logits

    def score(self, tokens) -> np.ndarray:
        """Logits at every position of `tokens` from one pass over the whole sequence
        (no cache reuse): [len(tokens), n_vocab]. Scoring prompt + generated[:-1] gives
        the same rows as generate() whenever the generated tokens are the oracle's own
        greedy choices, in one compute-bound pass instead of a step per token."""
        return self.forward(list(tokens), self.new_cache(len(tokens)))

    def stop_tokens(self):
        return {t for t in (self.hp.eos, self.hp.eot) if t is not None}

    def generate(self, prompt, n_new: int, stop_at_eos: bool = False,
                 use_cache: bool = True, images=()) -> Result:
        """Greedy generation of up to n_new tokens after `prompt` (ids used as-is: no BOS or
        template is added). Returns the generated tokens and the logit rows of the module
        doc. With stop_at_eos, generation ends after the first EOS/EOT token (which is kept).
        use_cache=False recomputes the whole sequence at every step (slow; a self-check).
        images: in the prompt, as forward() takes them."""
        prompt = [int(t) for t in prompt]
        if not prompt:
            raise ValueError("empty prompt")
        for t in prompt:
            if not 0 <= t < self.hp.n_vocab:
                raise ValueError(f"token id {t} out of range [0, {self.hp.n_vocab})")
        stops = self.stop_tokens()
        t0 = time.perf_counter()
        cache = self.new_cache(len(prompt) + max(n_new, 1))
        rows = [self.forward(prompt, cache, images)]
        t1 = time.perf_counter()
        out = []
        while len(out) < n_new:
            tok = int(np.argmax(rows[-1][-1]))
            out.append(tok)
            if len(out) == n_new or (stop_at_eos and tok in stops):
                break
            if use_cache:
                rows.append(self.forward([tok], cache))
            else:
                c = self.new_cache(len(prompt) + len(out))
                rows.append(self.forward(prompt + out, c, images)[-1:])
        t2 = time.perf_counter()
        logits = np.concatenate(rows, axis=0)
        return Result(prompt=prompt, tokens=out, logits=logits,
                      timings={"prefill_s": t1 - t0, "decode_s": t2 - t1})

    # -- text, for humans only (the comparison is on ids and logits) --

    def detokenize(self, ids) -> str:
        """Byte-level BPE decode (GPT-2 byte↔unicode map, MODEL-FORMATS.md §6.1), or for
        gemma3's SentencePiece vocabulary ▁ → space and <0xXX> → that byte; control tokens
        are rendered as their text."""
        if self.vocab is None:             # HF directory: the oracle reads no tokenizer
            return ""
        out = bytearray()
        if self.hp.arch == "gemma3":
            for t in ids:
                s = self.vocab[t]
                if len(s) == 6 and s.startswith("<0x") and s.endswith(">"):
                    out.append(int(s[3:5], 16))
                else:
                    out += s.replace("\u2581", " ").encode("utf-8")
            return out.decode("utf-8", errors="replace")
        inv = _unicode_to_byte()
        for t in ids:
            s = self.vocab[t]
            if self.token_type is not None and self.token_type[t] == 3:   # control
                out += s.encode("utf-8")
                continue
            for ch in s:
                b = inv.get(ch)
                out += bytes([b]) if b is not None else ch.encode("utf-8")
        return out.decode("utf-8", errors="replace")


def _unicode_to_byte():
    keep = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    m = {chr(b): b for b in keep}
    n = 0
    for b in range(256):
        if b not in keep:
            m[chr(0x100 + n)] = b
            n += 1
    return m


# ---- CLI ----------------------------------------------------------------------------------------

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description="NumPy reference forward pass for llama/gemma3/qwen2/qwen3 models from GGUF "
                    "or a Hugging Face directory (greedy generation).")
    ap.add_argument("--model", required=True,
                    help="GGUF file, or Hugging Face directory (config.json + safetensors)")
    ap.add_argument("--tokens", required=True,
                    help='prompt token ids, space-separated ("1 9690 198 ..."); used as-is')
    ap.add_argument("-n", type=int, default=16, help="tokens to generate (default 16)")
    ap.add_argument("--dump-logits", metavar="FILE.npy",
                    help="write float32 logits [n_prompt + n - 1, vocab] (see module doc)")
    ap.add_argument("--stop-at-eos", action="store_true",
                    help="stop after an EOS/EOT token (default: always generate n tokens)")
    ap.add_argument("--no-kv-cache", action="store_true",
                    help="recompute the whole sequence at every step")
    ap.add_argument("--float32", action="store_true", help="compute in float32, not float64")
    ap.add_argument("--image-embd", action="append", default=[], metavar="POS:F.npy",
                    help="an image as its input-embedding rows [len, n_embd] at prompt "
                         "positions POS.. (Gemma 3's image mask; repeatable), as inferd-worker")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    a = ap.parse_args(argv)
    if a.n < 0:
        ap.error("-n must be >= 0")
    try:
        prompt = [int(x) for x in a.tokens.replace(",", " ").split()]
    except ValueError:
        ap.error("--tokens takes integer ids")
    t0 = time.perf_counter()
    m = LlamaOracle(a.model, np.float32 if a.float32 else np.float64)
    t_load = time.perf_counter() - t0
    images = []
    for spec in a.image_embd:
        at, _, path = spec.partition(":")
        images.append((int(at), np.load(path)))
    res = m.generate(prompt, a.n, stop_at_eos=a.stop_at_eos, use_cache=not a.no_kv_cache,
                     images=images)
    if a.dump_logits:
        np.save(a.dump_logits, res.logits.astype(np.float32))
    text = m.detokenize(res.tokens)
    if a.json:
        json.dump({"prompt_tokens": res.prompt, "tokens": res.tokens, "text": text,
                   "load_s": round(t_load, 3),
                   "prefill_s": round(res.timings["prefill_s"], 3),
                   "decode_s": round(res.timings["decode_s"], 3)}, sys.stdout)
        print()
    else:
        print(text)
        print(f"[oracle] {len(prompt)} prompt + {len(res.tokens)} generated tokens: "
              f"{' '.join(map(str, res.tokens))}", file=sys.stderr)
        print(f"[oracle] load {t_load:.2f}s prefill {res.timings['prefill_s']:.2f}s "
              f"decode {res.timings['decode_s']:.2f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
