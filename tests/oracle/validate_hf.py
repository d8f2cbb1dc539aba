#!/usr/bin/env python3
"""validate_hf.py — checks the oracle itself against Hugging Face transformers.

A one-off tool, not a CTest test (it needs torch + transformers, several GB that CI does not
install). transformers loads the same GGUF into LlamaForCausalLM (its GGUF loader dequantizes
with the `gguf` package and undoes the converter's Q/K permutation, so it runs HF's
rotate_half RoPE on HF-ordered weights — an independent path to the oracle's interleaved
RoPE on GGUF-ordered weights). The oracle runs in float64; transformers (5.x) keeps GGUF
weights packed and computes its matmuls in float32 even when asked for float64, so expect
agreement near float32 precision (~1e-5), not 1e-12. On one prompt of prompts.json the script
prints the max relative L2 error of the logits over all positions and the top-1 agreement,
then compares 64 greedy tokens (with the KV cache on both sides).

    python validate_hf.py --model SmolLM2-135M-Instruct.Q4_1.gguf [--prompt long] [-n 64]
"""

import argparse
import json
import os
import sys
import time

import numpy as np
import torch
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_oracle import LlamaOracle  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt", default="long", help="name in prompts.json (default long)")
    ap.add_argument("-n", type=int, default=64)
    a = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "prompts.json"), encoding="utf-8") as f:
        p = next(x for x in json.load(f)["prompts"] if x["name"] == a.prompt)
    ids = p["ids"]

    t = time.perf_counter()
    ora = LlamaOracle(a.model).generate(ids, a.n)
    print(f"oracle: {time.perf_counter() - t:.1f}s (incl. load)")

    torch.set_num_threads(2)
    t = time.perf_counter()
    hf = AutoModelForCausalLM.from_pretrained(
        os.path.dirname(os.path.abspath(a.model)), gguf_file=os.path.basename(a.model),
        dtype=torch.float64)
    hf.eval()
    with torch.no_grad():
        gen = hf.generate(torch.tensor([ids]), max_new_tokens=a.n, min_new_tokens=a.n,
                          do_sample=False, output_logits=True, return_dict_in_generate=True,
                          pad_token_id=hf.config.eos_token_id)
        full = hf(torch.tensor([ids + ora.tokens[:-1]])).logits[0].numpy()
    print(f"transformers: {time.perf_counter() - t:.1f}s (incl. load), "
          f"config: rope_theta={getattr(hf.config, 'rope_theta', None)} "
          f"tie={hf.config.tie_word_embeddings}")
    hf_tokens = gen.sequences[0, len(ids):].tolist()

    def report(what, x, y):
        rel = np.linalg.norm(x - y, axis=1) / np.linalg.norm(y, axis=1)
        top1 = np.mean(np.argmax(x, axis=1) == np.argmax(y, axis=1))
        print(f"{what}: rows {len(x)}  max rel-L2 {rel.max():.3e} (row {rel.argmax()})  "
              f"mean {rel.mean():.3e}  top-1 agreement {top1 * 100:.2f}%")
        return rel.max()

    # One full forward pass over prompt + generated[:-1] = the oracle's rows.
    worst = report("all rows, one HF forward pass", ora.logits, full)
    # HF's cached decode logits: step j's scores chose generated token j, the oracle's row
    # n_prompt - 1 + j.
    steps = np.stack([s[0].numpy() for s in gen.logits])[: a.n]
    n0 = len(ids) - 1
    if hf_tokens == ora.tokens:
        worst = max(worst, report("generated steps, HF KV-cached", ora.logits[n0:], steps))
    diff = next((i for i, (u, v) in enumerate(zip(hf_tokens, ora.tokens)) if u != v), None)
    print(f"greedy tokens: {'identical' if diff is None else f'differ at {diff}'} "
          f"({len(ora.tokens)} tokens)")
    return 0 if diff is None and worst < 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
