#!/usr/bin/env python3
"""compare.py — inferd-worker against the NumPy oracle on the prompts of prompts.json
(SmolLM2, architecture llama) or prompts_gemma3.json (Gemma 3 270M).

For each prompt (token ids, used as-is) it runs
    inferd-worker --model M --prompt-ids "ids" -n N --json --dump-logits F.npy
and the oracle (llama_oracle.py, float64), then prints per prompt
  - the max over rows of the relative L2 error of the worker's logits, ||w - o|| / ||o||,
  - the top-1 agreement (share of rows whose argmax is the same),
  - the first index where the greedy tokens differ.
Rows follow the shared --dump-logits convention (llama_oracle.py's module doc): the
n_prompt prompt positions, then each generated token except the last — row i predicts
token i+1. A worker that dumps n_prompt + N rows instead is accepted; only the rows both
sides have are compared, and the difference is reported.

The oracle scores prompt + the worker's tokens (minus the last) in one float64 pass and
takes its greedy token at each step as the argmax of that step's row. Up to the first
difference this is exactly the oracle's own greedy generation, and it keeps the oracle's
share of the test to seconds; --oracle-generate runs the oracle's KV-cached generation
instead, and on a difference the oracle's own continuation is printed either way.
The worker gets --ignore-eos when its --help lists it, so all N tokens are compared; a
worker that still stops early is accepted only if its last token is an end token (EOS/EOT)
and every token so far matches the oracle.

Exit status: 0 all prompts within tolerance and greedy tokens identical; 1 a row's rel-L2
exceeds --tol (default 1e-3), the tokens differ, or the worker failed; 77 ("SKIPPED: why")
when the model, numpy/gguf, the worker binary or its --prompt-ids option is missing.
With $INFERD_TEST_SANITIZED set (the ASan+UBSan build's tests) only the first prompt runs,
with at most 16 tokens.

Quantized compute (the worker's default on the CPU: 8-bit activations against the file's
quantized weights) is not exact, so for it the test states its expected error instead:
--tol bounds the max rel-L2, --tol-median its median over the rows, --min-top1 the
top-1 agreement (share of rows), and
--greedy-min N asks for equal greedy tokens only over the first N (after a difference the
oracle still scores the worker's own tokens, so every row stays comparable). The exact f32
path is checked with --worker-arg=--weights-dtype --worker-arg=f32 and the defaults.

    compare.py WORKER [--model PATH | --model-name NAME] [-n 64] [--prompts prompts.json]
               [--tol 1e-3] [--tol-median T] [--min-top1 F] [--greedy-min N]
               [--only NAME] [--worker-arg ARG ...] [--keep DIR] [--oracle-generate]
               [--sanitized-prompt NAME]

In the sanitized build ($INFERD_TEST_SANITIZED) only one prompt runs, over 16 tokens:
the first, or --sanitized-prompt NAME. A test bounding top-1 agreement names a long one:
the bound is a statistic, and over the 53 rows of the short prompt one row is 1.9 points.
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
sys.dont_write_bytecode = True   # keep the source tree clean (it may be read-only)
import model_paths  # noqa: E402  (tests/model_paths.py)

HERE = os.path.dirname(os.path.abspath(__file__))
SKIP = 77


def skip(why: str):
    print(f"SKIPPED: {why}", flush=True)
    sys.exit(SKIP)


def run_worker(worker, model, ids, n, extra, dump):
    cmd = [worker, "--model", model, "--prompt-ids", " ".join(map(str, ids)), "-n", str(n),
           "--json", "--dump-logits", dump] + extra
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    secs = time.perf_counter() - t
    if p.returncode != 0:
        raise RuntimeError(f"inferd-worker exited {p.returncode}\n  cmd: {' '.join(cmd[:3])} "
                           f"--prompt-ids ... {' '.join(cmd[5:])}\n  stderr: "
                           f"{p.stderr.strip()[-2000:]}")
    lines = [ln for ln in p.stdout.splitlines() if ln.lstrip().startswith("{")]
    if not lines:
        raise RuntimeError(f"inferd-worker printed no JSON object; stdout: {p.stdout[-500:]!r}")
    return json.loads(lines[-1]), secs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("worker", help="path of the inferd-worker binary")
    ap.add_argument("--model", default=None,
                    help="GGUF file (default $INFERD_TEST_MODEL, else the default model)")
    ap.add_argument("--model-name", metavar="NAME",
                    help="a deploy/fetch-model.sh model name (smollm2, gemma3), instead of --model")
    ap.add_argument("-n", type=int, default=64, help="greedy tokens per prompt (default 64)")
    ap.add_argument("--prompts", default=os.path.join(HERE, "prompts.json"))
    ap.add_argument("--tol", type=float, default=1e-3, help="max rel-L2 per row (1e-3)")
    ap.add_argument("--tol-median", type=float, default=None,
                    help="max median (over rows) rel-L2 (default: not checked)")
    ap.add_argument("--min-top1", type=float, default=0.0,
                    help="min share of rows whose argmax equals the oracle's (default 0)")
    ap.add_argument("--greedy-min", type=int, default=None, metavar="N",
                    help="greedy tokens must be equal over the first N only (default: all -n)")
    ap.add_argument("--only", action="append", help="run only this prompt (repeatable)")
    ap.add_argument("--sanitized-prompt", metavar="NAME",
                    help="the prompt the sanitized build runs (default: the first)")
    ap.add_argument("--worker-arg", action="append", default=[],
                    help="extra argument for inferd-worker (repeatable)")
    ap.add_argument("--keep", metavar="DIR", help="keep both logit dumps in DIR")
    ap.add_argument("--oracle-generate", action="store_true",
                    help="let the oracle generate on its own (KV-cached, one step per token) "
                         "instead of scoring the worker's tokens in one pass (slower)")
    a = ap.parse_args()
    if not a.model:
        a.model = model_paths.model_path(a.model_name or "smollm2")
    if a.n < 1:
        ap.error("-n must be >= 1")

    try:
        import numpy as np
        import gguf  # noqa: F401  (llama_oracle needs it)
    except ImportError as e:
        skip(f"Python package missing ({e.name}); run deploy/install-deps.sh")
    sys.path.insert(0, HERE)
    from llama_oracle import LlamaOracle

    if not os.path.isfile(a.model):
        skip(f"model not found at {a.model} (run deploy/fetch-model.sh"
             f"{' gemma3' if 'gemma' in os.path.basename(a.model) else ''})")
    if not (os.path.isfile(a.worker) and os.access(a.worker, os.X_OK)):
        skip(f"inferd-worker binary not found at {a.worker}")
    h = subprocess.run([a.worker, "--help"], capture_output=True, text=True, timeout=60)
    if "--prompt-ids" not in h.stdout + h.stderr:
        skip(f"{os.path.basename(a.worker)} --help lists no --prompt-ids option yet")
    # All N tokens are compared even where the model ends its answer sooner.
    if "--ignore-eos" in h.stdout + h.stderr and "--ignore-eos" not in a.worker_arg:
        a.worker_arg.append("--ignore-eos")

    with open(a.prompts, encoding="utf-8") as f:
        prompts = json.load(f)["prompts"]
    if a.only:
        prompts = [p for p in prompts if p["name"] in a.only]
        if not prompts:
            ap.error(f"no prompt named {a.only}")
    if os.environ.get("INFERD_TEST_SANITIZED"):
        # The sanitized build (tests/CMakeLists.txt sets this) looks for memory errors and
        # undefined behaviour in the same forward pass: one prompt and 16 tokens take every
        # path of it (prefill, decode, the dump) in a fraction of the time; the normal build
        # compares every prompt.
        pick = [p for p in prompts if p["name"] == a.sanitized_prompt]
        if a.sanitized_prompt and not pick:
            ap.error(f"no prompt named {a.sanitized_prompt}")
        prompts, a.n = (pick or prompts)[:1], min(a.n, 16)
        print(f"sanitized build (INFERD_TEST_SANITIZED): only prompt {prompts[0]['name']}, "
              f"-n {a.n}", flush=True)

    tmp = tempfile.TemporaryDirectory(prefix="inferd-oracle-")
    outdir = a.keep or tmp.name
    os.makedirs(outdir, exist_ok=True)
    # The worker runs (one after the other, from a thread) overlap the oracle's load, which
    # takes about as long (Gemma 3: tens of seconds of NumPy dequantisation to float64): on
    # two cores the test takes about the longer of the two instead of their sum.
    runner = concurrent.futures.ThreadPoolExecutor(1)
    runs = [runner.submit(run_worker, a.worker, a.model, p["ids"], a.n, a.worker_arg,
                          os.path.join(outdir, f"{p['name']}.worker.npy")) for p in prompts]
    t = time.perf_counter()
    oracle = LlamaOracle(a.model)
    print(f"oracle: loaded {a.model} in {time.perf_counter() - t:.1f}s "
          f"(float64, rope base {oracle.hp.rope_base:g}, "
          f"rope_freqs {'yes' if oracle.has_rope_freqs else 'no'}, "
          f"tied output {'yes' if oracle.tied else 'no'})", flush=True)
    stops = oracle.stop_tokens()
    failures = []

    for p, run in zip(prompts, runs):
        name, ids = p["name"], p["ids"]
        n_prompt = len(ids)
        dump = os.path.join(outdir, f"{name}.worker.npy")
        try:
            wj, wsecs = run.result()
            wl = np.load(dump)
        except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired) as e:
            print(f"[{name}] FAIL: {e}", flush=True)
            failures.append(name)
            continue
        t = time.perf_counter()
        wt = [int(x) for x in wj.get("tokens", [])]
        k = len(wt)
        if a.oracle_generate:
            res = oracle.generate(ids, a.n)
            ot, ologits = res.tokens, res.logits
        else:
            # The oracle scores the worker's sequence in one pass; its greedy token at step
            # j is the argmax of row n_prompt - 1 + j, identical to its own generation up
            # to the first difference (which is all the test needs).
            ologits = oracle.score(ids + wt[:-1] if k else ids)
            ot = [int(x) for x in np.argmax(ologits[n_prompt - 1:], axis=1)]
        osecs = time.perf_counter() - t
        if a.keep:
            np.save(os.path.join(outdir, f"{name}.oracle.npy"), ologits.astype(np.float32))

        problems = []
        if [int(x) for x in wj.get("prompt_tokens", ids)] != ids:
            problems.append("the worker's prompt_tokens differ from the ids it was given "
                            f"(first 8: {wj.get('prompt_tokens', [])[:8]})")
        diff = next((i for i, (u, v) in enumerate(zip(wt, ot)) if u != v), None)
        if diff is None and k < a.n and not (k > 0 and wt[-1] in stops):
            diff = k
            problems.append(f"the worker stopped after {k} tokens without an end token")
        if diff is None and k > a.n:
            problems.append(f"the worker generated {k} > {a.n} tokens")
        need = a.n if a.greedy_min is None else min(a.greedy_min, a.n)
        if diff is not None and diff < min(k, len(ot), need):
            if not a.oracle_generate:   # show the oracle's own continuation too
                ot = oracle.generate(ids, a.n).tokens
            problems.append(f"greedy tokens differ at index {diff}: worker "
                            f"{wt[max(0, diff - 2):diff + 3]} oracle "
                            f"{ot[max(0, diff - 2):diff + 3]}")

        note = ""
        want_rows = n_prompt + max(k, 1) - 1
        if wl.ndim != 2 or wl.shape[1] != oracle.hp.n_vocab:
            problems.append(f"worker logits have shape {wl.shape}, want [rows, "
                            f"{oracle.hp.n_vocab}]")
            rel_max, rel_med, top1, rows = float("nan"), float("nan"), float("nan"), 0
        else:
            if wl.shape[0] == want_rows + 1:
                note = f" (worker dumped {wl.shape[0]} rows = n_prompt + N; compared {want_rows})"
            elif wl.shape[0] != want_rows:
                problems.append(f"worker dumped {wl.shape[0]} rows, want n_prompt + N - 1 = "
                                f"{want_rows}")
            rows = min(wl.shape[0], want_rows, ologits.shape[0])
            w = wl[:rows].astype(np.float64)
            o = ologits[:rows]
            if not np.all(np.isfinite(w)):
                problems.append("worker logits contain NaN/Inf")
            rel = np.linalg.norm(w - o, axis=1) / np.linalg.norm(o, axis=1)
            rel_max = float(np.max(rel)) if rows else float("nan")
            rel_med = float(np.median(rel)) if rows else float("nan")
            top1 = float(np.mean(np.argmax(w, axis=1) == np.argmax(o, axis=1))) if rows else 0.0
            if a.tol_median is not None and not rel_med <= a.tol_median:
                problems.append(f"median rel-L2 {rel_med:.3e} exceeds {a.tol_median:g}")
            if rows and not top1 >= a.min_top1:
                problems.append(f"top-1 agreement {top1 * 100:.2f}% is below "
                                f"{a.min_top1 * 100:.2f}%")
            if not rel_max <= a.tol:
                problems.append(f"max rel-L2 {rel_max:.3e} at row {int(np.nanargmax(rel))} "
                                f"exceeds {a.tol:g}")
        first = "none" if diff is None else str(diff)
        print(f"[{name}] prompt {n_prompt} tok, generated {k}/{a.n}: max rel-L2 {rel_max:.3e} "
              f"(median {rel_med:.3e}) "
              f"over {rows} rows, top-1 agreement {top1 * 100:.2f}%, first token "
              f"difference: {first}; worker {wsecs:.1f}s, oracle {osecs:.1f}s{note}",
              flush=True)
        for pr in problems:
            print(f"[{name}] FAIL: {pr}", flush=True)
        if problems:
            failures.append(name)

    if failures:
        print(f"FAILED: {', '.join(failures)}")
        return 1
    need = a.n if a.greedy_min is None else min(a.greedy_min, a.n)
    print(f"OK: {len(prompts)} prompts, logits within rel-L2 {a.tol:g}, "
          f"top-1 >= {a.min_top1 * 100:.1f}%, the first {need} greedy tokens identical")
    return 0


if __name__ == "__main__":
    sys.exit(main())
