#!/usr/bin/env python3
"""test_image_embd.py — Gemma 3's images in prefill (docs/vision.md) against the NumPy oracle.

An image reaches the language model as rows of input embeddings at the positions of its
soft tokens, which attend to each other both ways (transformers 5's
create_masks_for_vision_model: OR(causal, same image) on global layers, AND(sliding window,
OR(causal, same image)) on local ones). inferd-worker takes such rows with
--image-embd POS:F.npy (worker/image_embd.h); llama_oracle.py's forward takes the same.
On tiny_models.py's random Gemma 3 models (window 6 / 5, local and global layers):

  * random rows at three images of a 40-token prompt (8 rows: longer than the window, so
    the window clips inside the image; 3 rows; 1 row), greedy tokens after it: the
    worker's logits at every position match the oracle's within --tol relative L2 per
    row, for the GGUF and the HF directory, the multimodal checkpoint (bf16, soft-cap)
    with its local layers' own pool included;
  * prefill chunks of 10 (each image whole: cut before it, never through it) give the
    same logits bit for bit as one chunk;
  * the mask matters: the oracle with the same rows but causal attention inside each
    image disagrees with the worker by more than 100x the tolerance;
  * rows equal to the scaled token embeddings (E[t] * sqrt(n_embd) in float32) as
    one-token images give the plain prompt's logits bit for bit;
  * a bad --image-embd (past the prompt, overlapping, wrong width, an image longer than
    the prefill chunk) fails with a message.

Exit 0 on success, 1 on a failure, 77 ("SKIPPED: why") without numpy/gguf or the worker.

    test_image_embd.py WORKER [--keep DIR] [--tol 1e-4]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def skip(why):
    print(f"SKIPPED: {why}", flush=True)
    sys.exit(77)


try:
    import numpy as np
    import gguf  # noqa: F401
except ImportError as e:
    skip(f"the test venv lacks {e.name} (deploy/install-deps.sh installs it)")

import llama_oracle  # noqa: E402
import tiny_models  # noqa: E402

PROMPT = [(464 + 97 * i) % 50000 for i in range(40)]
IMAGES = [(5, 8), (20, 3), (30, 1)]   # (start, rows)
N_GEN = 3
failures = []


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what, flush=True)
    if not ok:
        failures.append(what)


def run_worker(worker, model, images, tmp, extra=()):
    """Greedy tokens and the dumped logits; images: (start, rows)."""
    dump = os.path.join(tmp, "logits.npy")
    cmd = [worker, "--model", model, "--prompt-ids", " ".join(map(str, PROMPT)), "-n",
           str(N_GEN), "--ignore-eos", "--dump-logits", dump, *extra]
    for k, (start, rows) in enumerate(images):
        path = os.path.join(tmp, f"image{k}.npy")
        np.save(path, np.ascontiguousarray(rows, dtype=np.float32))
        cmd += ["--image-embd", f"{start}:{path}"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise RuntimeError(f"{model}: exit {p.returncode}: {p.stderr.strip()}")
    return np.load(dump)


def worker_fails(worker, model, specs, needle, what):
    cmd = [worker, "--model", model, "--prompt-ids", " ".join(map(str, PROMPT)), "-n", "1"]
    for s in specs:
        cmd += s
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    check(p.returncode != 0 and needle in p.stderr,
          f"{what}: exit {p.returncode}, {p.stderr.strip()[:120]!r}")


def rel_l2(a, b):
    a, b = a.astype(np.float64), b.astype(np.float64)
    return float(np.max(np.linalg.norm(a - b, axis=1) / np.linalg.norm(b, axis=1)))


def oracle_rows(o, images, tokens):
    """The oracle's rows for PROMPT + tokens[:-1] (the dump's), the images in the prompt."""
    return o.forward(PROMPT + tokens[:-1], o.new_cache(len(PROMPT) + len(tokens)), images)


def model_checks(worker, name, path, o, tmp, tol, n_tokens, extra=()):
    rng = np.random.default_rng(7)
    E = o.hp.n_embd
    images = [(s, rng.standard_normal((n, E)).astype(np.float32) * 4) for s, n in IMAGES]
    lg = run_worker(worker, path, images, tmp, extra)
    tokens = [int(np.argmax(r[:n_tokens])) for r in lg[len(PROMPT) - 1:]]
    ref = oracle_rows(o, images, tokens)
    e = rel_l2(lg[:, :n_tokens], ref[:, :n_tokens])
    check(e <= tol, f"{name}: three images (8 rows past the window, 3, 1) vs oracle, "
                    f"max rel-L2 {e:.2e}")
    lg10 = run_worker(worker, path, images, tmp, ["--prefill-chunk", "10", *extra])
    check(bool(np.array_equal(lg, lg10)),
          f"{name}: prefill chunks of 10 (cut before each image) give the same logits")
    causal = [(s + j, rows[j:j + 1]) for s, rows in images for j in range(len(rows))]
    e_c = rel_l2(lg[:, :n_tokens], oracle_rows(o, causal, tokens)[:, :n_tokens])
    check(e_c > 100 * tol, f"{name}: the oracle with causal images disagrees, {e_c:.2e}")
    return lg


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("worker")
    ap.add_argument("--keep")
    ap.add_argument("--tol", type=float, default=1e-4)
    a = ap.parse_args()
    if not os.access(a.worker, os.X_OK):
        skip(f"{a.worker} is not built")
    try:
        tiny_models.load_vocab()
    except (OSError, FileNotFoundError) as e:
        skip(f"the shared vocabulary: {e}")
    root = a.keep or tempfile.mkdtemp(prefix="ifd-image-embd-")
    tmp = os.path.join(root, "io")
    os.makedirs(tmp, exist_ok=True)
    try:
        tiny_models.build(root, ["gemma3", "gemma3_mm"])
        n_tok = 50259
        g = os.path.join(root, "gemma3.gguf")
        o = llama_oracle.LlamaOracle(os.path.join(root, "gemma3"))
        model_checks(a.worker, "gemma3 (GGUF)", g, o, tmp, a.tol, n_tok)
        model_checks(a.worker, "gemma3 (HF)", os.path.join(root, "gemma3"), o, tmp, a.tol,
                     n_tok)
        mm = os.path.join(root, "gemma3_mm")
        omm = llama_oracle.LlamaOracle(mm)
        model_checks(a.worker, "gemma3_mm (bf16, soft-cap)", mm, omm, tmp, a.tol, n_tok)
        model_checks(a.worker, "gemma3_mm, local layers' own pool", mm, omm, tmp, a.tol,
                     n_tok, ["--kv-local-pool", "--block-size", "2"])

        # rows = the scaled token embeddings, one-token images: the plain prompt's logits
        og = llama_oracle.LlamaOracle(g, np.float32)
        scale = np.float32(og.hp.emb_scale)
        same = [(p, (og.tok_embd[PROMPT[p]].astype(np.float32) * scale)[None, :])
                for p in (0, 7, 21, 39)]
        plain = run_worker(a.worker, g, [], tmp)
        check(bool(np.array_equal(run_worker(a.worker, g, same, tmp), plain)),
              "gemma3 (GGUF): the scaled token embeddings injected give the plain logits "
              "bit for bit")

        E = o.hp.n_embd
        rows = os.path.join(tmp, "r8.npy")
        np.save(rows, np.zeros((8, E), np.float32))
        wide = os.path.join(tmp, "wide.npy")
        np.save(wide, np.zeros((2, E + 1), np.float32))
        worker_fails(a.worker, g, [["--image-embd", f"35:{rows}"]], "pass the prompt",
                     "an image past the prompt")
        worker_fails(a.worker, g, [["--image-embd", f"3:{rows}"], ["--image-embd", f"9:{rows}"]],
                     "overlap", "overlapping images")
        worker_fails(a.worker, g, [["--image-embd", f"3:{wide}"]], "not a float32 .npy",
                     "rows of the wrong width")
        worker_fails(a.worker, g, [["--image-embd", f"3:{rows}"], ["--prefill-chunk", "4"]],
                     "generation failed", "an image longer than the prefill chunk")
    finally:
        if not a.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(f"{len(failures)} failure(s)" if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
