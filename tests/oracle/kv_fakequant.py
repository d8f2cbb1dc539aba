#!/usr/bin/env python3
"""kv_fakequant.py — where a quantized KV type's error comes from, measured on the oracle.

Runs the float64 NumPy oracle (llama_oracle.py) on the oracle prompts (prompts.json) with
its KV cache fake-quantized as it is written — K only, V only or both, GGML's q8_0 or q4_0
rounding (the same as inferd's ifd_cpu_kv_write), in blocks of 32 (or --block) values along
head_dim, scales rounded to f16 — and prints each variant's logits against the unquantized
oracle: max and median relative L2 and top-1 agreement per prompt (docs/kvpool.md,
"Accuracy guard"). A measuring tool, not a test: no bounds, minutes of NumPy.

    kv_fakequant.py [--model PATH] [--block 32] [--rot 64]
                    [--variant kv:q8_0 --variant k:q8_0 --variant k:q8_0:rot ...]
"""

import argparse
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))
sys.dont_write_bytecode = True
import model_paths  # noqa: E402
from llama_oracle import LlamaOracle  # noqa: E402


def fake_quant(x, qk, kind):
    """x with each run of qk values along the last axis quantized and dequantized."""
    b = np.asarray(x).reshape(-1, qk).astype(np.float32)
    if kind == "q8_0":
        d = np.abs(b).max(axis=1, keepdims=True) / 127
        q = np.round(b * np.where(d != 0, 1 / np.where(d != 0, d, 1), 0))
    else:  # q4_0: d = max / -8, q = min(15, trunc(x / d + 8.5)) - 8
        d = b[np.arange(len(b)), np.abs(b).argmax(axis=1)][:, None] / -8
        q = np.minimum(15, np.trunc(b * np.where(d != 0, 1 / np.where(d != 0, d, 1), 0) + 8.5)) - 8
    return (q * d.astype(np.float16).astype(np.float32)).reshape(np.shape(x)).astype(np.float64)


def hadamard(n):
    """The orthonormal n × n Walsh-Hadamard matrix (n a power of two; symmetric, H·H = I)."""
    h = np.ones((1, 1))
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return h / np.sqrt(n)


def fake_quant_rot(x, qk, kind, n):
    """fake_quant in a rotated basis: each run of n values along the last axis multiplied by
    the Walsh-Hadamard matrix, quantized, rotated back (H·H = I). The same as rotating Q and K
    alike before the dot product (llama.cpp's attn_rot_k for quantized K)."""
    H = hadamard(n)
    shp = np.shape(x)
    r = np.asarray(x, dtype=np.float64).reshape(-1, n) @ H
    return (fake_quant(r, qk, kind).reshape(-1, n) @ H).reshape(shp)


class QuantCache(np.ndarray):
    """One layer's K or V cache array: what is written into it is fake-quantized first."""
    mode = None  # {"roles": "kv", "qk": 32, "kind": "q8_0"} while a variant runs

    def __setitem__(self, key, val):
        m = QuantCache.mode
        role = getattr(self, "role", None)
        if m and role and role in m["roles"] and np.ndim(val) == 3:
            if m["rot"]:
                val = fake_quant_rot(val, m["qk"], m["kind"], m["rot"])
            else:
                val = fake_quant(val, m["qk"], m["kind"])
        np.ndarray.__setitem__(self, key, val)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--block", type=int, default=32, help="values per scale (32)")
    ap.add_argument("--variant", action="append", metavar="ROLES:TYPE[:rot]",
                    help="kv|k|v : q8_0|q4_0 [: rot = Walsh-Hadamard rotation over --rot values "
                         "before quantizing] (default: kv, k and v with q8_0)")
    ap.add_argument("--rot", type=int, default=64, help="values per rotation (64)")
    a = ap.parse_args()
    model = a.model or model_paths.model_path("smollm2")
    variants = a.variant or ["kv:q8_0", "k:q8_0", "v:q8_0"]
    oracle = LlamaOracle(model)
    base_new_cache = oracle.new_cache

    def new_cache(n):
        c = base_new_cache(n)
        for role, arrays in (("k", c.k), ("v", c.v)):
            for i, arr in enumerate(arrays):
                arrays[i] = arr.view(QuantCache)
                arrays[i].role = role
        return c
    oracle.new_cache = new_cache
    with open(os.path.join(HERE, "prompts.json"), encoding="utf-8") as f:
        prompts = json.load(f)["prompts"]
    ref = {p["name"]: oracle.score(p["ids"]) for p in prompts}
    for v in variants:
        roles, kind, *rot = v.split(":")
        QuantCache.mode = {"roles": roles, "qk": a.block, "kind": kind,
                           "rot": a.rot if rot == ["rot"] else 0}
        cols = []
        for p in prompts:
            w, r = oracle.score(p["ids"]), ref[p["name"]]
            rel = np.linalg.norm(w - r, axis=1) / np.linalg.norm(r, axis=1)
            top1 = np.mean(w.argmax(axis=1) == r.argmax(axis=1))
            cols.append(f"{p['name']}: max {rel.max():.3e} median {np.median(rel):.3e} "
                        f"top-1 {top1 * 100:.1f}%")
        QuantCache.mode = None
        print(f"{v} /{a.block} | " + "; ".join(cols), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
