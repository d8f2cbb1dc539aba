#!/usr/bin/env python3
"""make_shape_gguf.py — a seeded random-weight Llama GGUF in a real model's shape.

    make_shape_gguf.py --shape deploy/shapes/llama-3.2-1b.json --out F.gguf [--seed 0]
                       [--dtype f16|f32]

The CPU benchmarks (bench/cpu_vs_llamacpp.sh --shapes) measure decode and prefill at the
sizes people run (Llama-3.2-1B, 3B) without downloading those models: speed depends on
the shapes and the weight format, not on the values. The file is what llama.cpp's
converter would write for a Llama (arch "llama", the same tensor names and metadata), in
f16 (or f32) for llama.cpp's `llama-quantize` to turn into Q4_K_M, Q4_0, Q8_0 or Q6_K,
so both engines read byte-identical quantized weights.

Weights: normal(0, 0.02) (the Llama initializer's scale), norms 1; the same seed gives
the same file. The vocabulary is the GPT-2 one from ../shared/testdata/vocab (not ours to
commit; INFERD_TESTDATA_DIR overrides), padded to the shape's n_vocab with control tokens
(`<|reserved_N|>`, as Llama 3 reserves its specials), so the token count matches the
embedding rows. Tensors are streamed to the file one at a time (a 3B shape is 6.4 GB in
f16): the memory high-water mark is one tensor.
Exit status: 0, 1 on a missing vocabulary or a write error, 2 on bad usage.
"""
import argparse
import json
import os
import sys

import numpy as np


def vocab(n_vocab):
    import gguf
    d = os.environ.get("INFERD_TESTDATA_DIR") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "testdata")
    path = os.path.join(d, "vocab", "ggml-vocab-gpt-2.gguf")
    if not os.path.exists(path):
        sys.exit("make_shape_gguf: no %s (the GPT-2 vocabulary, ../shared/testdata)" % path)
    r = gguf.GGUFReader(path, "r")
    tokens = [str(t) for t in r.fields["tokenizer.ggml.tokens"].contents()]
    types = [int(t) for t in r.fields["tokenizer.ggml.token_type"].contents()]
    merges = [str(m) for m in r.fields["tokenizer.ggml.merges"].contents()]
    if len(tokens) > n_vocab:
        sys.exit("make_shape_gguf: n_vocab %d is below the vocabulary's %d" % (n_vocab, len(tokens)))
    pad = n_vocab - len(tokens)
    tokens += ["<|reserved_%d|>" % i for i in range(pad)]
    types += [3] * pad  # CONTROL
    return tokens, types, merges


def tensors(s):
    """(name, shape in numpy order) of every tensor, in llama.cpp's order."""
    E, F, V, D = s["n_embd"], s["n_ff"], s["n_vocab"], s["head_dim"]
    H, KV = s["n_head"], s["n_head_kv"]
    out = [("token_embd.weight", (V, E))]
    for i in range(s["n_layer"]):
        p = "blk.%d." % i
        out += [(p + "attn_norm.weight", (E,)), (p + "attn_q.weight", (H * D, E)),
                (p + "attn_k.weight", (KV * D, E)), (p + "attn_v.weight", (KV * D, E)),
                (p + "attn_output.weight", (E, H * D)), (p + "ffn_norm.weight", (E,)),
                (p + "ffn_gate.weight", (F, E)), (p + "ffn_up.weight", (F, E)),
                (p + "ffn_down.weight", (E, F))]
    out.append(("output_norm.weight", (E,)))
    if not s.get("tie_embeddings", True):
        out.append(("output.weight", (V, E)))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", choices=("f16", "f32"), default="f16")
    a = ap.parse_args()
    import gguf
    with open(a.shape) as f:
        s = json.load(f)
    if s.get("arch", "llama") != "llama":
        sys.exit("make_shape_gguf: only llama shapes (got %s)" % s.get("arch"))
    tokens, types, merges = vocab(s["n_vocab"])
    w = gguf.GGUFWriter(a.out, "llama")
    w.add_name(s.get("name", "random"))
    w.add_context_length(s.get("n_ctx_train", 4096))
    w.add_embedding_length(s["n_embd"])
    w.add_block_count(s["n_layer"])
    w.add_feed_forward_length(s["n_ff"])
    w.add_head_count(s["n_head"])
    w.add_head_count_kv(s["n_head_kv"])
    w.add_key_length(s["head_dim"])
    w.add_value_length(s["head_dim"])
    w.add_rope_dimension_count(s["head_dim"])
    w.add_rope_freq_base(float(s.get("rope_base", 10000.0)))
    w.add_layer_norm_rms_eps(float(s.get("rms_eps", 1e-5)))
    w.add_vocab_size(s["n_vocab"])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if a.dtype == "f16" else gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    eos = tokens.index("<|endoftext|>")
    w.add_bos_token_id(eos)
    w.add_eos_token_id(eos)
    w.add_add_bos_token(False)
    dt = np.float16 if a.dtype == "f16" else np.float32
    plan = tensors(s)
    for name, shape in plan:
        # norms stay f32, as llama.cpp's converter writes 1-D tensors
        t = np.float32 if len(shape) == 1 else dt
        w.add_tensor_info(name, shape, np.dtype(t), int(np.prod(shape)) * np.dtype(t).itemsize)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    rng = np.random.default_rng(a.seed)
    for name, shape in plan:
        if len(shape) == 1:
            x = np.ones(shape, np.float32)
        else:
            x = np.empty(shape, dt)
            for r0 in range(0, shape[0], 4096):  # bounded f32 temporaries
                x[r0:r0 + 4096] = rng.standard_normal((min(4096, shape[0] - r0), shape[1]),
                                                      np.float32) * 0.02
        w.write_tensor_data(x)
    w.close()
    print(json.dumps({"out": a.out, "tensors": len(plan), "bytes": os.path.getsize(a.out)}))


if __name__ == "__main__":
    main()
