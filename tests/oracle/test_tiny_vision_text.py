#!/usr/bin/env python3
"""test_tiny_vision_text.py — the tiny Gemma 3 vision model's directory
(tests/data/tiny-gemma3-vision) served as a chat model: its text path through
`inferd-worker --model DIR --prompt TEXT` (the directory's tokenizer.json and
chat_template.jinja, the f32 text model) against what transformers gave for
the same chat (tools/make_tiny_gemma3_vision.py: refs2.safetensors' "text"
chat, chat_refs.json's message):

  * the prompt's ids equal apply_chat_template's (add_generation_prompt);
  * the greedy tokens equal model.generate's (do_sample False), with the
    finish reason that count implies (the random model repeats its last
    prompt token, so this check is weak: the logits below are the strong one);
  * the logits of every prompt position and of every generated step
    (--dump-logits) are transformers' within --tol of each row's largest
    |logit| (float summation order only: observed 2e-7).

Exit 0 on success, 1 on a failure, 77 ("SKIPPED: why") without numpy.

    test_tiny_vision_text.py WORKER [--tol 1e-5]
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("worker")
    ap.add_argument("--tol", type=float, default=1e-5)
    a = ap.parse_args()
    refs = load_safetensors(os.path.join(TINY, "refs2.safetensors"))
    with open(os.path.join(TINY, "chat_refs.json"), encoding="utf-8") as f:
        doc = json.load(f)
    chat, n_gen = doc["chats"]["text"], doc["max_tokens"]
    (msg,) = chat["messages"]
    assert msg["role"] == "user" and isinstance(msg["content"], str)
    want_prompt, want_gen = refs["text_input_ids"].tolist(), refs["text_gen_ids"].tolist()
    with tempfile.TemporaryDirectory(prefix="img-oracle-text-") as tmp:
        dump = os.path.join(tmp, "logits.npy")
        p = subprocess.run([a.worker, "--model", TINY, "--prompt", msg["content"], "-n",
                            str(n_gen), "--json", "--dump-logits", dump, "--threads", "1"],
                           capture_output=True, text=True, timeout=120)
        if p.returncode != 0:
            print(p.stderr, file=sys.stderr)
            check(False, f"inferd-worker exited {p.returncode}")
            return 1
        res = json.loads(p.stdout.strip().splitlines()[-1])
        got_logits = np.load(dump)
    check(res["prompt_tokens"] == want_prompt,
          f"prompt ids ({len(res['prompt_tokens'])}) = transformers' ({len(want_prompt)})")
    check(res["tokens"] == want_gen, f"greedy tokens {res['tokens']} = transformers' {want_gen}")
    want_finish = "length" if len(want_gen) == n_gen else "stop"
    check(res["finish_reason"] == want_finish, f"finish_reason {res['finish_reason']}")
    # rows: every prompt position, then each generated token but the last
    n = len(want_prompt)
    want_rows = np.concatenate([refs["text_prompt_logits"], refs["text_gen_logits"][1:]])
    check(got_logits.shape == want_rows.shape,
          f"logit rows {got_logits.shape} = {want_rows.shape}")
    if got_logits.shape == want_rows.shape:
        err = np.abs(got_logits - want_rows).max(axis=1) / np.abs(want_rows).max(axis=1)
        worst = int(np.argmax(err))
        check(err.max() <= a.tol, f"logits within {a.tol:g} of each row's largest: worst "
              f"{err.max():.3g} at row {worst} ({'prompt' if worst < n else 'generated'})")
    if failures:
        print(f"{len(failures)} failures", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
