#!/usr/bin/env python3
"""llamacpp_driver.py -- llama.cpp's side of bench/cpu_vs_llamacpp.sh.

Runs the workload bench_engine runs for inferd, through llama-cpp-python's
low-level API (llama_decode on hand-built batches, no high-level Llama
class): B sequences with random prompts of P tokens, prefilled in batches of
at most --budget tokens, then O - 1 decode steps of B tokens each (the first
output token comes from the prefill), greedy (argmax of the logits, as
inferd's sampler does at temperature 0). Reports, per B, the prompt tokens/s
of the prefill and the tokens/s of the decode steps, and the process's peak
RSS. One JSON object on stdout, with the field names of bench_engine's runs.

  llamacpp_driver.py --model GGUF [--threads T] [--concurrency 1,4]
                     [--prompt P] [--output O] [--budget B] [--n-ctx N]

The KV cache is llama.cpp's default (f16), as inferd's default kv_dtype;
--n-ctx sets its capacity in tokens (default: what the largest B needs), so
the caller can give both engines the same KV capacity.
"""
import argparse
import json
import random
import resource
import sys
import time

import numpy as np


def rss_peak_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--concurrency", default="1")
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--output", type=int, default=128)
    ap.add_argument("--budget", type=int, default=512)
    ap.add_argument("--n-ctx", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()
    concs = [int(c) for c in a.concurrency.split(",") if int(c) >= 1]
    baseline = rss_peak_mib()

    import llama_cpp as L

    L.llama_backend_init()
    mp = L.llama_model_default_params()
    model = L.llama_model_load_from_file(a.model.encode(), mp)
    if not model:
        sys.exit("llamacpp_driver: cannot load %s" % a.model)
    vocab = L.llama_model_get_vocab(model)
    n_vocab = L.llama_vocab_n_tokens(vocab)
    max_b = max(concs)
    n_ctx = a.n_ctx or max_b * (a.prompt + a.output) + 256
    cp = L.llama_context_default_params()
    cp.n_ctx = n_ctx
    cp.n_batch = max(a.budget, max_b)
    cp.n_ubatch = max(a.budget, max_b)
    cp.n_seq_max = max_b
    cp.n_threads = a.threads
    cp.n_threads_batch = a.threads
    cp.no_perf = True
    ctx = L.llama_init_from_model(model, cp)
    if not ctx:
        sys.exit("llamacpp_driver: cannot create a context of %d tokens" % n_ctx)
    mem = L.llama_get_memory(ctx)
    cap = max(a.budget, max_b)
    batch = L.llama_batch_init(cap, 0, 1)

    def decode(items):
        """items: [(token, pos, seq, want_logits)] -> {seq: argmax} for wanted rows."""
        for i, (tok, pos, seq, want) in enumerate(items):
            batch.token[i] = tok
            batch.pos[i] = pos
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = seq
            batch.logits[i] = 1 if want else 0
        batch.n_tokens = len(items)
        rc = L.llama_decode(ctx, batch)
        if rc != 0:
            sys.exit("llamacpp_driver: llama_decode of %d tokens: %d" % (len(items), rc))
        out = {}
        for i, (_, _, seq, want) in enumerate(items):
            if want:
                row = np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, i), shape=(n_vocab,))
                out[seq] = int(row.argmax())
        return out

    rng = random.Random(a.seed)
    # warm-up: the first decode of a context sets up its compute graphs
    decode([(100 + i, i, 0, i == 7) for i in range(8)])
    L.llama_memory_clear(mem, True)

    runs = []
    for b in concs:
        L.llama_memory_clear(mem, True)
        prompts = [[rng.randrange(100, n_vocab - 100) for _ in range(a.prompt)] for _ in range(b)]
        flat = [(prompts[s][p], p, s, p == a.prompt - 1) for s in range(b) for p in range(a.prompt)]
        t0 = time.perf_counter()
        last = {}
        for k in range(0, len(flat), a.budget):
            last.update(decode(flat[k:k + a.budget]))
        t1 = time.perf_counter()
        for step in range(a.output - 1):
            last = decode([(last[s], a.prompt + step, s, True) for s in range(b)])
        t2 = time.perf_counter()
        dec_tok = b * (a.output - 1)
        runs.append({
            "concurrency": b,
            "requests": b,
            "prompt_tokens": a.prompt,
            "output_tokens_per_request": a.output,
            "seconds": round(t2 - t0, 3),
            "prefill_only_tok_s": round(b * a.prompt / (t1 - t0), 1),
            "decode_only_tok_s": round(dec_tok / (t2 - t1), 2) if dec_tok else 0.0,
            "output_tok_s": round(b * a.output / (t2 - t0), 2),
        })
        print("llamacpp_driver: B=%d prefill %.1f tok/s decode %.1f tok/s" %
              (b, runs[-1]["prefill_only_tok_s"], runs[-1]["decode_only_tok_s"]), file=sys.stderr)
    L.llama_batch_free(batch)
    L.llama_free(ctx)
    L.llama_model_free(model)
    print(json.dumps({
        "engine": "llama.cpp",
        "llama_cpp_python": getattr(L, "__version__", "?"),
        "threads": a.threads,
        "n_ctx": n_ctx,
        "runs": runs,
        "rss_peak_mib": round(rss_peak_mib(), 1),
        "rss_python_baseline_mib": round(baseline, 1),
    }))


if __name__ == "__main__":
    main()
