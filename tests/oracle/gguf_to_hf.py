#!/usr/bin/env python3
"""gguf_to_hf.py — turns a GGUF `llama` model (e.g. the default SmolLM2 Q4_1) into a Hugging
Face directory the way the checkpoint it came from would look: weights dequantized (gguf-py)
and stored as F32 safetensors (or F16/BF16: a third argument), Q/K rows permuted back from GGUF's interleaved order to HF's
rotate-half order (the inverse of MODEL-FORMATS.md §2.4's map), HF tensor names (§2.1),
config.json from the GGUF metadata, and tokenizer.json built with the `tokenizers` package
from the GGUF vocabulary (pre-tokenizer "smollm" only) + tokenizer_config.json with the
GGUF's chat template. It lets the HF loading path run on real-model sizes and a real
vocabulary here, where no HF checkpoint can be downloaded:

    gguf_to_hf.py MODEL.gguf OUT_DIR [F32|F16|BF16]
    inferd-worker --model OUT_DIR ...   vs   inferd-worker --model MODEL.gguf --weights-dtype f32

(the logits agree to float rounding: ~1e-6 relative, the attention dot products summing in
another order). Not a CI test: it writes ~0.5 GB for SmolLM2.
"""

import json
import os
import sys

import numpy as np

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import gguf  # noqa: E402
import make_prompts  # noqa: E402  (build_tokenizer)
import tiny_models  # noqa: E402  (write_safetensors)

LAYER = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj",
         "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
         "attn_output": "self_attn.o_proj", "ffn_norm": "post_attention_layernorm",
         "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}


def unpermute(w, n_heads):
    """GGUF interleaved rows → HF rotate-half rows: HF row h·d/2 + i = GGUF row 2i + h."""
    d = w.shape[0] // n_heads
    idx = np.empty(w.shape[0], dtype=np.int64)
    for head in range(n_heads):
        for i in range(d // 2):
            for h in range(2):
                idx[head * d + h * (d // 2) + i] = head * d + 2 * i + h
    return w[idx]


def main() -> int:
    src, out = sys.argv[1], sys.argv[2]
    dtype = sys.argv[3] if len(sys.argv) > 3 else "F32"
    if dtype not in ("F32", "F16", "BF16"):
        raise SystemExit(f"dtype {dtype}: F32, F16 or BF16")
    r = gguf.GGUFReader(src, "r")
    f = {k: v.contents() for k, v in r.fields.items() if not k.startswith("tokenizer.ggml.")}
    if f["general.architecture"] != "llama":
        raise SystemExit("only GGUF llama models")
    p = "llama."
    E, nh = f[p + "embedding_length"], f[p + "attention.head_count"]
    nkv = f.get(p + "attention.head_count_kv", nh)
    tensors, tied = {}, True
    for t in r.tensors:
        a = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), np.float32)
        a = a.reshape(tuple(int(d) for d in reversed(t.shape)))
        n = t.name
        if n == "token_embd.weight":
            hn = "model.embed_tokens.weight"
        elif n == "output_norm.weight":
            hn = "model.norm.weight"
        elif n == "output.weight":
            hn, tied = "lm_head.weight", False
        elif n.startswith("blk."):
            _, layer, base, kind = n.split(".")
            if base == "attn_q":
                a = unpermute(a, nh)
            elif base == "attn_k":
                a = unpermute(a, nkv)
            hn = f"model.layers.{layer}.{LAYER[base]}.{kind}"
        else:
            raise SystemExit(f"tensor {n} has no HF name here")
        raw = tiny_models.quantize(np.ascontiguousarray(a), dtype if a.ndim == 2 else "F32")[0]
        tensors[hn] = (dtype if a.ndim == 2 else "F32", raw)
    os.makedirs(out, exist_ok=True)
    tiny_models.write_safetensors(os.path.join(out, "model.safetensors"), tensors)
    V = tensors["model.embed_tokens.weight"][1].shape[0]
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": V,
           "hidden_size": E, "intermediate_size": f[p + "feed_forward_length"],
           "num_hidden_layers": f[p + "block_count"], "num_attention_heads": nh,
           "num_key_value_heads": nkv, "max_position_embeddings": f[p + "context_length"],
           "rms_norm_eps": f[p + "attention.layer_norm_rms_epsilon"],
           "rope_theta": f.get(p + "rope.freq_base", 10000.0), "rope_scaling": None,
           "tie_word_embeddings": tied, "torch_dtype": {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}[dtype], "hidden_act": "silu"}
    json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=1)
    tok = make_prompts.build_tokenizer(src)
    tok.save(os.path.join(out, "tokenizer.json"))
    rt = gguf.GGUFReader(src, "r")
    toks = rt.fields["tokenizer.ggml.tokens"].contents()
    bos = rt.fields["tokenizer.ggml.bos_token_id"].contents()
    eos = rt.fields["tokenizer.ggml.eos_token_id"].contents()
    tc = {"bos_token": toks[bos], "eos_token": toks[eos], "add_bos_token": False,
          "chat_template": f.get("tokenizer.chat_template")}
    if "tokenizer.chat_template" in rt.fields:
        tc["chat_template"] = rt.fields["tokenizer.chat_template"].contents()
    json.dump(tc, open(os.path.join(out, "tokenizer_config.json"), "w"), indent=1)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
