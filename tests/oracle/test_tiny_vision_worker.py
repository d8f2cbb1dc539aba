#!/usr/bin/env python3
"""test_tiny_vision_worker.py — the tiny Gemma 3 vision model's directory
(tests/data/tiny-gemma3-vision) through inferd-worker against what transformers
gave for its chats (tools/make_tiny_gemma3_vision.py: refs2.safetensors,
chat_refs.json):

  * the text chat as `--prompt TEXT` (the directory's tokenizer.json and
    chat_template.jinja, the f32 text model): the prompt's ids are
    apply_chat_template's (add_generation_prompt), the greedy tokens
    model.generate's (do_sample False) with the finish reason their count
    implies, and the logits of every prompt position and generated step
    (--dump-logits) transformers';
  * each chat with images as `--prompt-ids` (the processor's input_ids) with
    transformers' own image features (refs.safetensors' features_i) as
    `--image-embd` rows at the soft tokens (the runs of token_type_ids 1): the
    greedy tokens and each step's logits are transformers' — the language
    model's image path on this model, before the tower runs in the worker.

Logits within --tol of each row's largest |logit| (float summation order only:
observed 2e-7). The random model repeats its last prompt token, so the tokens
are a weak check; the logits are the strong one.

Exit 0 on success, 1 on a failure, 77 ("SKIPPED: why") without numpy.

    test_tiny_vision_worker.py WORKER [--tol 1e-5]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TINY = os.path.join(HERE, "..", "data", "tiny-gemma3-vision")

try:
    import numpy as np
except ImportError:
    print("SKIPPED: the test venv lacks numpy (deploy/install-deps.sh installs it)", flush=True)
    sys.exit(77)

failures = []


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what, flush=True)
    if not ok:
        failures.append(what)


def load_safetensors(path):
    """{name: array} of a safetensors file (the format: u64 header length, JSON header,
    data), with numpy alone."""
    dtypes = {"F32": np.float32, "I32": np.int32}
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        head = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in head.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype=dtypes[t["dtype"]]).reshape(t["shape"])
    return out


def run_worker(worker, args, n_gen, tmp):
    """inferd-worker's --json result and dumped logits, or None (a failure recorded)."""
    dump = os.path.join(tmp, "logits.npy")
    p = subprocess.run([worker, "--model", TINY, "-n", str(n_gen), "--json", "--dump-logits",
                        dump, "--threads", "1", *args], capture_output=True, text=True,
                       timeout=120)
    if p.returncode != 0:
        print(p.stderr, file=sys.stderr)
        check(False, f"inferd-worker {' '.join(args[:2])}: exit {p.returncode}")
        return None, None
    return json.loads(p.stdout.strip().splitlines()[-1]), np.load(dump)


def check_generation(name, res, got, want_rows, want_gen, n_gen, tol):
    """Tokens, finish reason and logit rows of one run against the refs."""
    check(res["tokens"] == want_gen, f"{name}: greedy tokens {res['tokens']} = {want_gen}")
    want_finish = "length" if len(want_gen) == n_gen else "stop"
    check(res["finish_reason"] == want_finish, f"{name}: finish_reason {res['finish_reason']}")
    check(got.shape == want_rows.shape, f"{name}: logit rows {got.shape} = {want_rows.shape}")
    if got.shape == want_rows.shape:
        err = np.abs(got - want_rows).max(axis=1) / np.abs(want_rows).max(axis=1)
        check(err.max() <= tol, f"{name}: logits within {tol:g} of each row's largest: worst "
              f"{err.max():.3g} at row {int(np.argmax(err))} of {len(err)}")


def text_chat(worker, refs, chat, n_gen, tol, tmp):
    (msg,) = chat["messages"]
    assert msg["role"] == "user" and isinstance(msg["content"], str)
    res, got = run_worker(worker, ["--prompt", msg["content"]], n_gen, tmp)
    if res is None:
        return
    want = refs["text_input_ids"].tolist()
    check(res["prompt_tokens"] == want,
          f"text: prompt ids ({len(res['prompt_tokens'])}) = transformers' ({len(want)})")
    # rows: every prompt position, then each generated token but the last
    rows = np.concatenate([refs["text_prompt_logits"], refs["text_gen_logits"][1:]])
    check_generation("text", res, got, rows, refs["text_gen_ids"].tolist(), n_gen, tol)


def image_chat(worker, refs, features, name, chat, n_gen, tol, tmp):
    ids, tt = refs[name + "_input_ids"], refs[name + "_token_type_ids"]
    starts = [i for i in range(len(tt)) if tt[i] == 1 and (i == 0 or tt[i - 1] == 0)]
    check(len(starts) == len(chat["images"]), f"{name}: {len(starts)} image spans")
    args = ["--prompt-ids", " ".join(map(str, ids.tolist()))]
    for k, (pos, image) in enumerate(zip(starts, chat["images"])):
        rows = features["features_%d" % int(image[len("image"):-len(".png")])]
        path = os.path.join(tmp, f"image{k}.npy")
        np.save(path, rows)
        args += ["--image-embd", f"{pos}:{path}"]
    res, got = run_worker(worker, args, n_gen, tmp)
    if res is None:
        return
    # rows from the last prompt position on
    n = len(ids)
    check_generation(name, res, got[n - 1:],
                     refs[name + "_gen_logits"], refs[name + "_gen_ids"].tolist(), n_gen, tol)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("worker")
    ap.add_argument("--tol", type=float, default=1e-5)
    a = ap.parse_args()
    refs = load_safetensors(os.path.join(TINY, "refs2.safetensors"))
    features = load_safetensors(os.path.join(TINY, "refs.safetensors"))
    with open(os.path.join(TINY, "chat_refs.json"), encoding="utf-8") as f:
        doc = json.load(f)
    n_gen = doc["max_tokens"]
    with tempfile.TemporaryDirectory(prefix="img-oracle-worker-") as tmp:
        text_chat(a.worker, refs, doc["chats"]["text"], n_gen, a.tol, tmp)
        names = [n for n, c in doc["chats"].items() if c["images"]]
        check(len(names) >= 3, f"{len(names)} chats with images")
        for name in names:
            image_chat(a.worker, refs, features, name, doc["chats"][name], n_gen, a.tol, tmp)
    if failures:
        print(f"{len(failures)} failures", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
