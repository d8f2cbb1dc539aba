#!/usr/bin/env python3
"""kv_guard.py — the accuracy guard of the quantized KV types (docs/kvpool.md, "Accuracy guard").

For each KV type (f16, q8_0, q4_0, fp8; f16 is the reference the others are held to) it
checks three things with inferd-worker on the default model (SmolLM2-135M):

  oracle  the oracle prompts (prompts.json) on the exact weights path (--weights-dtype f32,
          so the KV type is the only approximation): the worker's logits against the NumPy
          float64 oracle over every row (every prompt position and generated step): max and
          median relative L2, top-1 agreement, and the first greedy difference (the
          oracle's rows of each prompt computed once, then each type's generated rows);
  held    four of the held prompts (kv_prompts.json, HELD; chat template, the default
          quantized weights): the greedy tokens against those of f16 KV, 48 tokens each; the
          number of prompts whose tokens are all equal and the mean agreement length;
  long    the long-context case (kv_long_context.txt + a question, raw, over 4k tokens):
          the greedy tokens against those of f16 KV (q8_0; not q4_0 and fp8: LONG_SKIP).

The bounds are the table LIMITS below (the measured values of 2026-12-06 with margin, as
docs/kvpool.md lists them); a regression past one fails the test (exit 1). Exit 77
("SKIPPED: why") without the model, numpy/gguf or the worker.

    kv_guard.py WORKER [--model PATH] [--part oracle|held|long ...]
                [--types f16,q8_0,q4_0,fp8] [--held 2,3,5,6|all] [-n 32] [--keep DIR]

In the sanitized build ($INFERD_TEST_SANITIZED) only the oracle part runs, on the first
prompt, q8_0 only, with the full run's 32 tokens: the bounds are medians over a prompt's
rows, and its prompt rows err more than its generated ones (with the quantized query the
first prompt's median is 1.18e-2 over 8 tokens, 0.79e-2 over 32), so a shorter run would
need bounds of its own.
"""

import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.dont_write_bytecode = True
import model_paths  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SKIP = 77
TYPES = ("f16", "q8_0", "q4_0", "fp8")
# Held part: these prompts of kv_prompts.json (0-based). The other three are left out for
# CI's time: on them even exact f32 K/V departs from f16 K/V's tokens within 7, 8 and 14
# tokens (near-ties of the quantized compute), so they cannot separate a good KV type from
# a broken one; on these four f32 K/V agrees with f16 over 48, 35, 48 and 27 tokens.
HELD = (2, 3, 5, 6)
# Types left out of the long part, and why (printed).
LONG_SKIP = {"fp8": "the CPU's fp8 path dequantizes every chunk for every query: its "
                    "4.5k-token prefill takes too long for CI (docs/kvpool.md)",
             "q4_0": "CI time: its bound (1 of 32 tokens) says little; q8_0 covers the block "
                     "types' reads at 4.5k positions, the oracle part q4_0's accuracy"}

# Bounds per KV type, from the measurements of 2026-12-07 (q8_0, q4_0: with K rotated,
# kernels/cpu/kv_rot.h) and 2026-12-06 (f16, fp8) (docs/kvpool.md, "Accuracy guard") with
# a margin. oracle: max / median rel-L2 of the logits over every row, top-1 agreement
# (share of rows), greedy tokens equal to the oracle's over the first N. The q8_0/q4_0
# oracle bounds also fail K quantized without its rotation (q8_0 max 0.131, median
# 1.1-1.4e-2; q4_0 median 0.21-0.25, top-1 68-81%). held (the HELD prompts): prompts whose
# 48 tokens equal f16 KV's, and the mean agreement length (the default quantized compute of
# this small model turns any change into a different token at the next near-tie, so these
# bounds only catch a broken path). long: greedy tokens equal to f16 KV's over the first N
# of 32; fp8 is not in the long part (LONG_SKIP). Re-measured for q8_0 and q4_0 on
# 2026-12-07 after the CPU attention began quantizing the query (int8 per 32 values, as
# llama.cpp): q8_0 max 0.077, median 0.73-0.79e-2, long 32/32; the bounds did not change.
LIMITS = {
    "f16": {"rel_max": 6.5e-3, "rel_med": 5e-4, "top1": 0.995, "greedy": 32},
    "q8_0": {"rel_max": 0.085, "rel_med": 0.009, "top1": 0.98, "greedy": 24,
             "held_equal": 0, "held_mean": 20, "long_min": 16},
    "q4_0": {"rel_max": 1.8, "rel_med": 0.16, "top1": 0.78, "greedy": 2,
             "held_equal": 0, "held_mean": 5, "long_min": 1},
    "fp8": {"rel_max": 0.38, "rel_med": 0.06, "top1": 0.90, "greedy": 6,
            "held_equal": 0, "held_mean": 20},
}

def skip(why):
    print(f"SKIPPED: {why}", flush=True)
    sys.exit(SKIP)


def worker_run(worker, model, args, n, dump=None):
    """inferd-worker's JSON result for one generation (greedy, --ignore-eos)."""
    cmd = [worker, "--model", model, "-n", str(n), "--json", "--ignore-eos"] + args
    if dump:
        cmd += ["--dump-logits", dump]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        raise RuntimeError(f"inferd-worker exited {p.returncode}: {p.stderr.strip()[-1500:]}")
    lines = [ln for ln in p.stdout.splitlines() if ln.lstrip().startswith("{")]
    if not lines:
        raise RuntimeError(f"inferd-worker printed no JSON; stdout {p.stdout[-300:]!r}")
    return json.loads(lines[-1])


def agree(a, b):
    """Length of the common prefix of two token lists."""
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def oracle_prompts(a):
    """prompts.json's prompts (the first only in the sanitized build)."""
    with open(os.path.join(HERE, "prompts.json"), encoding="utf-8") as f:
        prompts = json.load(f)["prompts"]
    return prompts[:1] if a.sanitized else prompts


def load_oracle(model):
    """The NumPy float64 oracle of model (tens of seconds of dequantisation)."""
    sys.path.insert(0, HERE)
    from llama_oracle import LlamaOracle
    t = time.perf_counter()
    oracle = LlamaOracle(model)
    print(f"oracle: loaded in {time.perf_counter() - t:.1f}s", flush=True)
    return oracle


def oracle_worker_runs(a, types, outdir):
    """The oracle part's worker runs (exact weights, each KV type, each prompt): a list of
    (kv, prompt, worker JSON, logits dump path). They need no oracle, so they run while it
    loads."""
    runs = []
    for kv in types:
        for p in oracle_prompts(a):
            dump = os.path.join(outdir, f"oracle-{p['name']}-{kv}.npy")
            wj = worker_run(a.worker, a.model, ["--prompt-ids", " ".join(map(str, p["ids"])),
                                                "--weights-dtype", "f32", "--kv-dtype", kv],
                            a.n, dump)
            runs.append((kv, p, wj, dump))
    return runs


def part_oracle(a, runs, oracle, fails):
    """Scores oracle_worker_runs' runs against the oracle: each worker row's logits against
    the oracle's on the same tokens."""
    import numpy as np
    from llama_oracle import Cache
    # The oracle's logits per token sequence: the prompt's rows once per prompt (its cache
    # kept), then per distinct generated sequence only its rows, fed on a copy of that
    # cache (every type shares the prompt; types that agree share everything). The same
    # rows as scoring each sequence whole, at a fraction of the float64 work.
    prompt_done = {}  # prompt name -> (its rows, its cache)
    scored = {}
    for kv, p, wj, dump in runs:
        lim = LIMITS[kv]
        ids, n_prompt = p["ids"], len(p["ids"])
        wt = [int(x) for x in wj["tokens"]]
        seq = tuple(ids + wt[:-1])
        if seq not in scored:
            if p["name"] not in prompt_done:
                c = oracle.new_cache(n_prompt + a.n)
                prompt_done[p["name"]] = (oracle.forward(list(ids), c), c)
            rows_p, c0 = prompt_done[p["name"]]
            c = Cache(k=[x.copy() for x in c0.k], v=[x.copy() for x in c0.v], n=c0.n)
            gen = wt[:-1]
            scored[seq] = np.concatenate([rows_p, oracle.forward(gen, c)]) if gen else rows_p
        o = scored[seq]
        w = np.load(dump).astype(np.float64)
        rows = min(w.shape[0], o.shape[0])
        w, o = w[:rows], o[:rows]
        rel = np.linalg.norm(w - o, axis=1) / np.linalg.norm(o, axis=1)
        top1 = float(np.mean(np.argmax(w, axis=1) == np.argmax(o, axis=1)))
        ot = [int(x) for x in np.argmax(o[n_prompt - 1:], axis=1)]
        first = agree(wt, ot)
        need = min(lim["greedy"], a.n)
        line = (f"[oracle {kv} {p['name']}] {rows} rows: max rel-L2 {rel.max():.3e} "
                f"(median {np.median(rel):.3e}), top-1 {top1 * 100:.2f}%, greedy equal "
                f"over {first}/{len(wt)}")
        bad = []
        if not rel.max() <= lim["rel_max"]:
            bad.append(f"max rel-L2 > {lim['rel_max']:g}")
        if not np.median(rel) <= lim["rel_med"]:
            bad.append(f"median rel-L2 > {lim['rel_med']:g}")
        if not top1 >= lim["top1"]:
            bad.append(f"top-1 < {lim['top1'] * 100:g}%")
        if first < min(need, len(wt)):
            bad.append(f"greedy differs before token {need}")
        print(line + ("" if not bad else "  FAIL: " + "; ".join(bad)), flush=True)
        if bad:
            fails.append(f"oracle {kv} {p['name']}")


def part_held(a, types, fails):
    with open(os.path.join(HERE, "kv_prompts.json"), encoding="utf-8") as f:
        held = json.load(f)["held"]
    held = [held[i] for i in a.held]
    toks = {kv: [worker_run(a.worker, a.model, ["--prompt", h["user"], "--kv-dtype", kv],
                            48)["tokens"] for h in held] for kv in ("f16",) + tuple(types)}
    for kv in types:
        lens = [agree(x, y) for x, y in zip(toks[kv], toks["f16"])]
        equal = sum(1 for n in lens if n >= 48)
        mean = sum(lens) / len(lens)
        lim = LIMITS[kv]
        bad = []
        if equal < lim["held_equal"]:
            bad.append(f"fewer than {lim['held_equal']} prompts equal")
        if mean < lim["held_mean"]:
            bad.append(f"mean agreement below {lim['held_mean']}")
        print(f"[held {kv}] greedy tokens equal to f16 KV's: {equal}/{len(held)} prompts over "
              f"48; agreement per prompt {lens} (mean {mean:.1f})" + ("" if not bad else "  FAIL: " +
                                                     "; ".join(bad)), flush=True)
        if bad:
            fails.append(f"held {kv}")


def part_long(a, types, fails):
    with open(os.path.join(HERE, "kv_prompts.json"), encoding="utf-8") as f:
        spec = json.load(f)["long"]
    with open(os.path.join(HERE, spec["file"]), encoding="utf-8") as f:
        text = f.read() + spec["question"]
    n = 32
    res = {kv: worker_run(a.worker, a.model, ["--prompt", text, "--raw", "--kv-dtype", kv], n)
           for kv in ("f16",) + tuple(types) if kv not in LONG_SKIP}
    n_prompt = len(res["f16"]["prompt_tokens"])
    if n_prompt < 4096:
        fails.append("long prompt")
        print(f"[long] FAIL: the prompt has {n_prompt} tokens, want >= 4096", flush=True)
    for kv in types:
        if kv not in res:
            print(f"[long {kv}] not run: {LONG_SKIP[kv]}", flush=True)
            continue
        k = agree(res[kv]["tokens"], res["f16"]["tokens"])
        ok = k >= min(LIMITS[kv]["long_min"], n)
        print(f"[long {kv}] prompt {n_prompt} tokens: greedy equal to f16 KV's over {k}/{n}"
              + ("" if ok else f"  FAIL: below {LIMITS[kv]['long_min']}"), flush=True)
        if not ok:
            fails.append(f"long {kv}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("worker")
    ap.add_argument("--model", default=None)
    ap.add_argument("--part", action="append", choices=("oracle", "held", "long"))
    ap.add_argument("--types", default=",".join(TYPES))
    ap.add_argument("-n", type=int, default=32, help="oracle part: greedy tokens (32)")
    ap.add_argument("--keep", metavar="DIR", help="keep the logit dumps in DIR")
    ap.add_argument("--held", default=",".join(map(str, HELD)),
                    help="held part: these prompts of kv_prompts.json, 0-based, or 'all' "
                         f"(default {','.join(map(str, HELD))})")
    a = ap.parse_args()
    a.model = a.model or model_paths.model_path("smollm2")
    types = [t for t in a.types.split(",") if t]
    a.held = list(range(7)) if a.held == "all" else [int(x) for x in a.held.split(",") if x]
    if any(t not in LIMITS for t in types):
        ap.error(f"--types: one of {', '.join(LIMITS)}")
    parts = a.part or ["oracle", "held", "long"]
    a.sanitized = bool(os.environ.get("INFERD_TEST_SANITIZED"))
    if a.sanitized:
        parts, types = ["oracle"], ["q8_0"]
    try:
        import numpy  # noqa: F401
        import gguf  # noqa: F401
    except ImportError as e:
        skip(f"Python package missing ({e.name}); run deploy/install-deps.sh")
    if not os.path.isfile(a.model):
        skip(f"model not found at {a.model} (run deploy/fetch-model.sh)")
    if not (os.path.isfile(a.worker) and os.access(a.worker, os.X_OK)):
        skip(f"inferd-worker binary not found at {a.worker}")
    tmp = tempfile.TemporaryDirectory(prefix="inferd-kvguard-")
    outdir = a.keep or tmp.name
    os.makedirs(outdir, exist_ok=True)
    fails = []
    t = time.perf_counter()
    # The oracle loads on a thread while every worker run (the oracle part's, then held's
    # and long's) goes on: NumPy's dequantisation on one core, the worker on the other,
    # instead of one after the other (CI's 2 cores); the scoring comes last.
    loader = concurrent.futures.ThreadPoolExecutor(1)
    oracle = loader.submit(load_oracle, a.model) if "oracle" in parts else None
    try:
        t0 = time.perf_counter()
        runs = oracle_worker_runs(a, types, outdir) if oracle else []
        t1 = time.perf_counter()
        ref_types = [t for t in types if t != "f16"]
        if "held" in parts:
            part_held(a, ref_types, fails)
        t2 = time.perf_counter()
        if "long" in parts:
            part_long(a, ref_types, fails)
        t3 = time.perf_counter()
        if oracle:
            part_oracle(a, runs, oracle.result(), fails)
        t4 = time.perf_counter()
        print(f"time: oracle worker runs {t1 - t0:.0f}s, held {t2 - t1:.0f}s, long "
              f"{t3 - t2:.0f}s, oracle load wait + scoring {t4 - t3:.0f}s", flush=True)
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        print(f"FAIL: {e}", flush=True)
        return 1
    finally:
        loader.shutdown(wait=True)
    if fails:
        print(f"FAILED: {', '.join(fails)}")
        return 1
    print(f"OK: KV types {', '.join(types)} within docs/kvpool.md's bounds "
          f"({time.perf_counter() - t:.0f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
