#!/usr/bin/env python3
"""test_tiny_gemma3_gguf.py — the tiny Gemma 3 vision model converted by llama.cpp's own
convert_hf_to_gguf.py (tests/data/tiny-gemma3-vision/gguf: a text GGUF and an --mmproj GGUF,
tools/make_tiny_gemma3_gguf.py) through inferd-worker against transformers
(refs_gguf.safetensors):

  * the text chat as `--prompt TEXT` on the text GGUF: its tokenizer (the converter's
    SentencePiece vocabulary) and chat template give apply_chat_template's ids, and the logits
    of every prompt position are transformers' on the model the GGUF describes (llama.cpp's
    period-6 rule: both tiny layers local);
  * each chat with images as `--prompt-ids` with the images' features as `--image-embd` rows:
    the features are transformers' with the mmproj's f16 input projection (the same rows the
    mmproj gives inferd's tower: test_vision's test_mmproj_llamacpp), the logits of every
    prompt position transformers'.

Logits within --tol of each row's largest |logit|. Exit 0 on success, 1 on a failure, 77
("SKIPPED: why") without numpy.

    test_tiny_gemma3_gguf.py WORKER [--tol 1e-5]
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
GGUF = os.path.join(TINY, "gguf")

try:
    import numpy as np
except ImportError:
    print("SKIPPED: the test venv lacks numpy (deploy/install-deps.sh installs it)", flush=True)
    sys.exit(77)

sys.path.insert(0, HERE)
from test_tiny_vision_worker import load_safetensors  # noqa: E402

failures = []


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what, flush=True)
    if not ok:
        failures.append(what)


def run(worker, args, tmp):
    """inferd-worker's --json result and the dumped logits, or (None, None)."""
    dump = os.path.join(tmp, "logits.npy")
    p = subprocess.run([worker, "--model", os.path.join(GGUF, "tiny-gemma3-text-f32.gguf"),
                        "-n", "1", "--json", "--dump-logits", dump, "--threads", "1", *args],
                       capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        print(p.stderr, file=sys.stderr)
        check(False, f"inferd-worker {' '.join(args[:1])}: exit {p.returncode}")
        return None, None
    return json.loads(p.stdout.strip().splitlines()[-1]), np.load(dump)


def check_logits(name, got, want, tol):
    n = len(want)
    check(got.shape[0] >= n and got.shape[1] == want.shape[1],
          f"{name}: {got.shape} logit rows hold the {n} prompt positions")
    if got.shape[0] < n:
        return
    err = np.abs(got[:n] - want).max(axis=1) / np.abs(want).max(axis=1)
    check(err.max() <= tol, f"{name}: logits of {n} positions within {tol:g} of each row's "
          f"largest: worst {err.max():.3g} at position {int(np.argmax(err))}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("worker")
    ap.add_argument("--tol", type=float, default=1e-5)
    a = ap.parse_args()
    refs = load_safetensors(os.path.join(GGUF, "refs_gguf.safetensors"))
    refs2 = load_safetensors(os.path.join(TINY, "refs2.safetensors"))
    with open(os.path.join(TINY, "chat_refs.json"), encoding="utf-8") as f:
        chats = json.load(f)["chats"]
    with tempfile.TemporaryDirectory(prefix="tiny-gemma3-gguf-") as tmp:
        (msg,) = chats["text"]["messages"]
        res, got = run(a.worker, ["--prompt", msg["content"]], tmp)
        if res is not None:
            want = refs["text_input_ids"].tolist()
            check(res["prompt_tokens"] == want,
                  f"text: the GGUF's tokenizer and template give transformers' {len(want)} ids")
            check_logits("text", got, refs["text_logits"], a.tol)
        for name, c in chats.items():
            if not c["images"]:
                continue
            ids, tt = refs2[name + "_input_ids"], refs2[name + "_token_type_ids"]
            check(ids.tolist() == refs[name + "_input_ids"].tolist(), f"{name}: the same ids")
            starts = [i for i in range(len(tt)) if tt[i] == 1 and (i == 0 or tt[i - 1] == 0)]
            check(len(starts) == len(c["images"]), f"{name}: {len(starts)} image spans")
            args = ["--prompt-ids", " ".join(map(str, ids.tolist()))]
            for k, (pos, image) in enumerate(zip(starts, c["images"])):
                rows = refs["mmproj_features_%d" % int(image[len("image"):-len(".png")])]
                path = os.path.join(tmp, f"image{k}.npy")
                np.save(path, rows)
                args += ["--image-embd", f"{pos}:{path}"]
            res, got = run(a.worker, args, tmp)
            if res is not None:
                check_logits(name, got, refs[name + "_logits"], a.tol)
    if failures:
        print(f"{len(failures)} failures", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
