#!/usr/bin/env python3
"""tiny_models.py — writes tiny random-weight models of every architecture inferd runs, as
a Hugging Face directory (config.json, generation_config.json, safetensors written with
NumPy, tokenizer.json + tokenizer_config.json) and, where GGUF can say the same thing, as a
GGUF file converted the way llama.cpp's converter does it (MODEL-FORMATS.md §2):
  * llama / Mistral: Q/K rows permuted per head into interleaved-RoPE order (§2.4):
    GGUF row head·d + 2i + h = HF row head·d + h·(d/2) + i;
  * Llama 3 rope_scaling: a rope_freqs.weight tensor of the converter's factors (§2.4);
  * Gemma 3: every *norm.weight stored as 1 + w (§2.2);
  * tied embeddings: no output.weight / lm_head.weight (§2.3).
The tokenizer is the shared GPT-2 vocabulary (/work/shared/testdata/vocab) plus the
ChatML tokens <|im_start|> and <|im_end|> (ids 50257, 50258), so every model has 50259
rows; the GGUF gets the same vocabulary as tokenizer.ggml.* metadata.

The variants (VARIANTS) between them cover: llama3 and linear RoPE scaling, tied and
untied output, F32 / F16 / BF16 weights, q/k/v biases (Qwen 2), QK-norm and
head_dim != hidden/heads (Qwen 3), a sliding window on every layer (Mistral) or on the
layers from max_window_layers on (Qwen 2 use_sliding_window, HF only: GGUF has no key for
it), Gemma 3's
layer_types, local RoPE base, (1 + w) norms, and the multimodal checkpoint layout
(Gemma3ForConditionalGeneration: text_config, language_model.model.* names, vision tensors
to skip, two shards, query_pre_attn_scalar != head_dim, a final logit soft-cap, and 61
vocabulary rows past the tokenizer's, as gemma-3-4b-it has; and the newer
model.language_model.* names with an untied language_model.lm_head.weight).

    tiny_models.py OUT_DIR [--only NAME ...]      # writes OUT_DIR/NAME/ and OUT_DIR/NAME.gguf
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

VOCAB_GGUF = "ggml-vocab-gpt-2.gguf"
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
EXTRA_TOKENS = ["<|im_start|>", "<|im_end|>"]

# name → what to build. Keys: cls, layers, embd, heads, kv, head_dim (None: embd/heads), ff,
# tie, dtype (F32/F16/BF16), gguf (write a GGUF twin), vocab_pad (vocabulary rows past the
# tokenizer's, as gemma-3-4b-it has 262208 for 262145 tokens: their embedding rows are 8x
# larger, so unmasked they would win every argmax), prefix and lm_head (the text model's
# tensor prefix and output name, when not the class's usual ones), plus per-architecture
# config extras.
VARIANTS = {
    "llama": dict(cls="LlamaForCausalLM", layers=2, embd=64, heads=4, kv=2, ff=96, tie=False,
                  dtype="F32", gguf=True, theta=500000.0,
                  rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                "high_freq_factor": 4.0,
                                "original_max_position_embeddings": 64}),
    "llama_tied": dict(cls="LlamaForCausalLM", layers=2, embd=64, heads=2, kv=1, ff=80,
                       tie=True, dtype="F16", gguf=True, theta=10000.0,
                       rope_scaling={"type": "linear", "factor": 2.0}),
    "mistral": dict(cls="MistralForCausalLM", layers=2, embd=64, heads=4, kv=1, ff=96,
                    tie=False, dtype="BF16", gguf=True, theta=1e6, sliding_window=6),
    "qwen2": dict(cls="Qwen2ForCausalLM", layers=2, embd=64, heads=4, kv=2, ff=96, tie=True,
                  dtype="F32", gguf=True, theta=1e6),
    "qwen2_swa": dict(cls="Qwen2ForCausalLM", layers=3, embd=64, heads=4, kv=2, ff=96,
                      tie=False, dtype="F32", gguf=False, theta=1e6, use_sliding_window=True,
                      sliding_window=5, max_window_layers=1),
    "qwen3": dict(cls="Qwen3ForCausalLM", layers=2, embd=64, heads=4, kv=2, head_dim=32, ff=96,
                  tie=False, dtype="F32", gguf=True, theta=1e6),
    "gemma3": dict(cls="Gemma3ForCausalLM", layers=3, embd=64, heads=4, kv=1, head_dim=16,
                   ff=96, tie=True, dtype="F32", gguf=True, theta=1e6, sliding_window=6,
                   layer_types=["sliding_attention", "sliding_attention", "full_attention"],
                   query_pre_attn_scalar=16),
    "gemma3_mm": dict(cls="Gemma3ForConditionalGeneration", layers=4, embd=64, heads=2, kv=1,
                      head_dim=32, ff=96, tie=True, dtype="BF16", gguf=False, theta=1e6,
                      sliding_window=5, sliding_window_pattern=2, query_pre_attn_scalar=24,
                      final_logit_softcapping=30.0,
                      rope_scaling={"rope_type": "linear", "factor": 4.0}, shards=2,
                      vocab_pad=61),
    # the other multimodal names: model.language_model.* (transformers >= 4.52) and an
    # untied output under language_model. (the older layout's head name), one file
    "gemma3_mm_untied": dict(cls="Gemma3ForConditionalGeneration", layers=2, embd=64, heads=2,
                             kv=1, head_dim=32, ff=96, tie=False, dtype="F32", gguf=False,
                             theta=1e6, sliding_window=5, sliding_window_pattern=2,
                             query_pre_attn_scalar=32, prefix="model.language_model.",
                             lm_head="language_model.lm_head.weight"),
}


# ---- number formats ------------------------------------------------------------------------

def to_bf16_bits(a: np.ndarray) -> np.ndarray:
    """float32 → bfloat16 bits, round to nearest even."""
    b = np.ascontiguousarray(a, np.float32).view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
    return b.astype(np.uint16)


def from_bf16_bits(b: np.ndarray) -> np.ndarray:
    return (b.astype(np.uint32) << 16).view(np.float32)


def quantize(a: np.ndarray, dtype: str):
    """(raw array to store, its float32 value)."""
    a = np.asarray(a, np.float32)
    if dtype == "F32":
        return a, a
    if dtype == "F16":
        h = a.astype(np.float16)
        return h, h.astype(np.float32)
    if dtype == "BF16":
        b = to_bf16_bits(a)
        return b, from_bf16_bits(b)
    raise ValueError(dtype)


# ---- safetensors (MODEL-FORMATS.md §4.1) ---------------------------------------------------

def safetensors_bytes(tensors: dict) -> bytes:
    """tensors: name → (dtype string, raw array). Header keys sorted, data in that order,
    header padded with spaces so the data starts 8-byte aligned."""
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(tensors):
        dt, raw = tensors[name]
        data = np.ascontiguousarray(raw).tobytes()
        header[name] = {"dtype": dt, "shape": list(raw.shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-(8 + len(h)) % 8)
    return len(h).to_bytes(8, "little") + h + b"".join(blobs)


def write_safetensors(path: str, tensors: dict):
    with open(path, "wb") as f:
        f.write(safetensors_bytes(tensors))


def write_sharded(dirpath: str, tensors: dict, n_shards: int):
    names = sorted(tensors)
    weight_map = {}
    for s in range(n_shards):
        fn = f"model-{s + 1:05d}-of-{n_shards:05d}.safetensors"
        part = {n: tensors[n] for n in names[s::n_shards]}
        write_safetensors(os.path.join(dirpath, fn), part)
        weight_map.update({n: fn for n in part})
    total = sum(np.asarray(r).nbytes for _, r in tensors.values())
    with open(os.path.join(dirpath, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=1)


# ---- the vocabulary -----------------------------------------------------------------------

def vocab_dir() -> str:
    d = os.environ.get("INFERD_TESTDATA_DIR") or "/work/shared/testdata"
    return os.path.join(d, "vocab")


_VOCAB: list = []


def load_vocab():
    """(tokens, token types, merges) of the shared GPT-2 vocabulary + the ChatML tokens;
    read once (GGUFReader takes seconds over 50k tokens)."""
    if _VOCAB:
        return _VOCAB[0]
    import gguf
    r = gguf.GGUFReader(os.path.join(vocab_dir(), VOCAB_GGUF), "r")
    tokens = list(r.fields["tokenizer.ggml.tokens"].contents())
    types = list(r.fields["tokenizer.ggml.token_type"].contents())
    merges = list(r.fields["tokenizer.ggml.merges"].contents())
    tokens += EXTRA_TOKENS
    types += [3] * len(EXTRA_TOKENS)
    _VOCAB.append((tokens, types, merges))
    return _VOCAB[0]


_TOKENIZER_JSON: dict = {}


def write_tokenizer(dirpath: str, tokens, merges):
    """tokenizer.json (byte-level BPE, built with the `tokenizers` package once) + config."""
    with open(os.path.join(dirpath, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<|endoftext|>", "eos_token": "<|im_end|>",
                   "add_bos_token": False, "chat_template": CHATML}, f, indent=1)
    if "text" not in _TOKENIZER_JSON:
        _TOKENIZER_JSON["text"] = _tokenizer_json(tokens, merges)
    with open(os.path.join(dirpath, "tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(_TOKENIZER_JSON["text"])


def _tokenizer_json(tokens, merges) -> str:
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    n_base = len(tokens) - len(EXTRA_TOKENS)
    vocab = {t: i for i, t in enumerate(tokens[:n_base])}
    pairs = [tuple(m.split(" ", 1)) for m in merges]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=pairs, fuse_unk=False, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t in ["<|endoftext|>"] + EXTRA_TOKENS])
    return tok.to_str()


# ---- weights ------------------------------------------------------------------------------

def head_dim(v):
    return v.get("head_dim") or v["embd"] // v["heads"]


def make_weights(v, n_vocab: int, seed: int) -> dict:
    """HF-named float32 weights (HF orientation [out, in]), before any dtype rounding."""
    rng = np.random.default_rng(seed)
    E, hd, F = v["embd"], head_dim(v), v["ff"]
    qd, kvd = v["heads"] * hd, v["kv"] * hd
    arch = v["cls"]
    gemma = arch.startswith("Gemma3")
    qwen2 = arch == "Qwen2ForCausalLM"
    qk_norm = gemma or arch == "Qwen3ForCausalLM"
    pre = v.get("prefix") or ("language_model.model." if arch == "Gemma3ForConditionalGeneration"
                              else "model.")

    def mat(o, i, gain=1.0):
        return rng.normal(0.0, gain / np.sqrt(i), (o, i)).astype(np.float32)

    def norm(n):  # HF gemma stores w (used as 1 + w); the others the multiplier itself
        return (rng.normal(0.0, 0.2, n) if gemma else rng.normal(1.0, 0.2, n)).astype(np.float32)

    emb = rng.normal(0.0, 1.0, (n_vocab, E)).astype(np.float32)
    if v.get("vocab_pad"):
        emb[n_vocab - v["vocab_pad"]:] *= 8.0
    w = {pre + "embed_tokens.weight": emb, pre + "norm.weight": norm(E)}
    if not v["tie"]:
        w[v.get("lm_head", "lm_head.weight")] = mat(n_vocab, E, 2.0)
    for l in range(v["layers"]):
        b = f"{pre}layers.{l}."
        w[b + "input_layernorm.weight"] = norm(E)
        w[b + "self_attn.q_proj.weight"] = mat(qd, E, 2.0)
        w[b + "self_attn.k_proj.weight"] = mat(kvd, E, 2.0)
        w[b + "self_attn.v_proj.weight"] = mat(kvd, E)
        w[b + "self_attn.o_proj.weight"] = mat(E, qd)
        w[b + "post_attention_layernorm.weight"] = norm(E)
        w[b + "mlp.gate_proj.weight"] = mat(F, E)
        w[b + "mlp.up_proj.weight"] = mat(F, E)
        w[b + "mlp.down_proj.weight"] = mat(E, F)
        if qwen2:
            for p, n in (("q", qd), ("k", kvd), ("v", kvd)):
                w[b + f"self_attn.{p}_proj.bias"] = rng.normal(0.0, 0.5, n).astype(np.float32)
        if qk_norm:
            w[b + "self_attn.q_norm.weight"] = norm(hd)
            w[b + "self_attn.k_norm.weight"] = norm(hd)
        if gemma:
            w[b + "pre_feedforward_layernorm.weight"] = norm(E)
            w[b + "post_feedforward_layernorm.weight"] = norm(E)
    if arch == "Gemma3ForConditionalGeneration":   # never read by a text-only loader
        w["vision_tower.vision_model.embeddings.patch_embedding.weight"] = mat(16, 12)
        w["multi_modal_projector.mm_input_projection_weight"] = mat(16, E)
        w["multi_modal_projector.mm_soft_emb_norm.weight"] = norm(16)
    return w


def config_json(v, n_vocab: int) -> dict:
    arch = v["cls"]
    dtype = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}[v["dtype"]]
    gemma = arch.startswith("Gemma3")
    c = {"vocab_size": n_vocab, "hidden_size": v["embd"], "intermediate_size": v["ff"],
         "num_hidden_layers": v["layers"], "num_attention_heads": v["heads"],
         "num_key_value_heads": v["kv"], "max_position_embeddings": 256,
         "rms_norm_eps": 1e-5 if not gemma else 1e-6, "rope_theta": v["theta"],
         "tie_word_embeddings": v["tie"], "torch_dtype": dtype,
         "bos_token_id": 50256, "eos_token_id": 50258}
    if v.get("head_dim"):
        c["head_dim"] = v["head_dim"]
    c["rope_scaling"] = v.get("rope_scaling")
    if gemma:
        c["hidden_activation"] = "gelu_pytorch_tanh"
        c["sliding_window"] = v["sliding_window"]
        c["rope_local_base_freq"] = 10000.0
        c["query_pre_attn_scalar"] = v["query_pre_attn_scalar"]
        c["final_logit_softcapping"] = v.get("final_logit_softcapping")
        c["attn_logit_softcapping"] = None
        if "layer_types" in v:
            c["layer_types"] = v["layer_types"]
        if "sliding_window_pattern" in v:
            c["sliding_window_pattern"] = v["sliding_window_pattern"]
        c["model_type"] = "gemma3_text"
    else:
        c["hidden_act"] = "silu"
        c["model_type"] = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral",
                           "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3"}[arch]
    if arch == "MistralForCausalLM":
        c["sliding_window"] = v["sliding_window"]
    if arch == "Qwen2ForCausalLM":
        c["use_sliding_window"] = v.get("use_sliding_window", False)
        if c["use_sliding_window"]:
            c["sliding_window"] = v["sliding_window"]
            c["max_window_layers"] = v["max_window_layers"]
    if arch == "Gemma3ForConditionalGeneration":
        return {"architectures": [arch], "model_type": "gemma3", "torch_dtype": dtype,
                "text_config": c, "vision_config": {"hidden_size": 16},
                "mm_tokens_per_image": 256}
    c["architectures"] = [arch]
    return c


def write_hf(dirpath: str, v, weights: dict, tokens, merges, shards: int = 0):
    """The HF directory; returns {name: float32 value} as stored (after dtype rounding)."""
    os.makedirs(dirpath, exist_ok=True)
    stored, values = {}, {}
    for n, a in weights.items():
        # norms stay in the checkpoint dtype too, as transformers saves them
        dt = v["dtype"]
        raw, val = quantize(a, dt)
        stored[n] = (dt, raw)
        values[n] = val
    shards = shards or v.get("shards", 0)
    if shards > 1:
        write_sharded(dirpath, stored, shards)
    else:
        write_safetensors(os.path.join(dirpath, "model.safetensors"), stored)
    n_vocab = len(tokens) + v.get("vocab_pad", 0)
    with open(os.path.join(dirpath, "config.json"), "w") as f:
        json.dump(config_json(v, n_vocab), f, indent=1)
    with open(os.path.join(dirpath, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 50256, "eos_token_id": [50258, 50257], "do_sample": True,
                   "temperature": 0.7, "top_p": 0.9, "top_k": 20, "max_new_tokens": 7}, f,
                  indent=1)
    write_tokenizer(dirpath, tokens, merges)
    return values


# ---- GGUF (llama.cpp converter conventions, §2) --------------------------------------------

GGUF_ARCH = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "llama",
             "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3",
             "Gemma3ForCausalLM": "gemma3"}
LAYER_NAMES = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q",
               "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
               "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
               "self_attn.k_norm": "attn_k_norm", "mlp.gate_proj": "ffn_gate",
               "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
               "post_attention_layernorm": "ffn_norm",
               "pre_feedforward_layernorm": "ffn_norm",
               "post_feedforward_layernorm": "post_ffw_norm"}


def permute_rows(w: np.ndarray, n_heads: int) -> np.ndarray:
    """HF rotate-half row order → interleaved (GGUF llama): per head of d rows,
    out[2i + h] = in[h·d/2 + i] (MODEL-FORMATS.md §2.4). Works for biases too."""
    d = w.shape[0] // n_heads
    idx = np.empty(w.shape[0], dtype=np.int64)
    for head in range(n_heads):
        for i in range(d // 2):
            for h in range(2):
                idx[head * d + 2 * i + h] = head * d + h * (d // 2) + i
    return w[idx]


def llama3_factors(base, d, rs) -> np.ndarray:
    """rope_freqs.weight as llama.cpp's converter computes it (§2.4)."""
    factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
    orig = rs["original_max_position_embeddings"]
    out = []
    for i in range(d // 2):
        freq = base ** (-2.0 * i / d)
        wl = 2 * np.pi / freq
        if wl < orig / hi:
            out.append(1.0)
        elif wl > orig / lo:
            out.append(factor)
        else:
            s = (orig / wl - lo) / (hi - lo)
            out.append(1.0 / ((1 - s) / factor + s))
    return np.asarray(out, np.float32)


def write_gguf(path: str, v, weights: dict, tokens, types, merges, permute: bool = True):
    """The GGUF twin of the HF directory written from the same (pre-rounding) weights."""
    import gguf
    arch = GGUF_ARCH[v["cls"]]
    gemma = arch == "gemma3"
    hd = head_dim(v)
    wr = gguf.GGUFWriter(path, arch)
    wr.add_name("tiny-" + arch)
    wr.add_block_count(v["layers"])
    wr.add_context_length(256)
    wr.add_embedding_length(v["embd"])
    wr.add_feed_forward_length(v["ff"])
    wr.add_head_count(v["heads"])
    wr.add_head_count_kv(v["kv"])
    wr.add_key_length(hd)
    wr.add_value_length(hd)
    wr.add_rope_dimension_count(hd)
    wr.add_rope_freq_base(v["theta"])
    wr.add_layer_norm_rms_eps(1e-6 if gemma else 1e-5)
    rs = v.get("rope_scaling") or {}
    if rs.get("type", rs.get("rope_type")) == "linear":
        wr.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        wr.add_rope_scaling_factor(rs["factor"])
    if gemma:
        wr.add_sliding_window(v["sliding_window"])
        wr.add_array(f"{arch}.attention.sliding_window_pattern",
                     [t == "sliding_attention" for t in v["layer_types"]])
    elif v.get("sliding_window"):
        wr.add_sliding_window(v["sliding_window"])
    wr.add_tokenizer_model("gpt2")
    wr.add_tokenizer_pre("gpt-2")
    wr.add_token_list(tokens)
    wr.add_token_types(types)
    wr.add_token_merges(merges)
    wr.add_bos_token_id(50256)
    wr.add_eos_token_id(50258)
    wr.add_chat_template(CHATML)

    dt = v["dtype"]
    pre = "model."
    for n in sorted(weights):
        a = weights[n]
        if n == pre + "embed_tokens.weight":
            g = "token_embd.weight"
        elif n == pre + "norm.weight":
            g = "output_norm.weight"
        elif n == "lm_head.weight":
            g = "output.weight"
        else:
            rest = n[len(pre + "layers."):]
            layer, rest = rest.split(".", 1)
            base, kind = rest.rsplit(".", 1)
            name = LAYER_NAMES[base]
            if gemma and base == "post_attention_layernorm":
                name = "post_attention_norm"
            g = f"blk.{layer}.{name}.{kind}"
        is_norm = n.endswith("norm.weight")
        if is_norm:
            # norms: F32 in GGUF (as llama.cpp keeps them), from the checkpoint's value
            val = quantize(a, dt)[1]
            if gemma:
                val = val + np.float32(1.0)
            wr.add_tensor(g, val.astype(np.float32))
            continue
        if permute and arch == "llama" and (".attn_q." in g or ".attn_k." in g):
            a = permute_rows(a, v["heads"] if ".attn_q." in g else v["kv"])
        raw, val = quantize(a, dt)
        if dt == "BF16":
            wr.add_tensor(g, raw, raw_dtype=gguf.GGMLQuantizationType.BF16)
        else:
            wr.add_tensor(g, raw)
    if rs.get("rope_type") == "llama3":
        wr.add_tensor("rope_freqs.weight", llama3_factors(v["theta"], hd, rs))
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()


def build(out: str, names=None, seed: int = 1234):
    """Writes OUT/NAME/ (and OUT/NAME.gguf) for each variant; returns the names."""
    tokens, types, merges = load_vocab()
    done = []
    for k, (name, v) in enumerate(VARIANTS.items()):
        if names and name not in names:
            continue
        w = make_weights(v, len(tokens) + v.get("vocab_pad", 0), seed + k)
        write_hf(os.path.join(out, name), v, w, tokens, merges)
        if v["gguf"]:
            write_gguf(os.path.join(out, name + ".gguf"), v, w, tokens, types, merges)
        done.append(name)
    return done


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--only", nargs="*")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    for n in build(a.out, a.only):
        print(os.path.join(a.out, n))
    return 0


if __name__ == "__main__":
    sys.exit(main())
