#!/usr/bin/env python3
"""make_prompts_gemma3.py — (re)generates tests/oracle/prompts_gemma3.json: the Gemma 3
oracle test's prompts as token ids.

No reference tokenizer for Gemma's SentencePiece vocabulary is available offline, so the
ids come from inferd-worker itself (`--prompt TEXT [--raw] -n 1 --json`, its
"prompt_tokens"); inferd's Gemma tokenizer is checked separately against llama.cpp's
vectors (test_tokenizer_gemma). The forward-pass comparison does not depend on the ids
being the reference tokenization, only on both sides getting the same ids.

Prompts: a raw completion (BOS + text, Gemma 3 270M is a base model), a chat-templated
question, and a long raw text of more than the model's 512-token sliding window, so that
the local layers' window mask is exercised.

    make_prompts_gemma3.py WORKER --model gemma-3-270m-q4_k_m.gguf [--out prompts_gemma3.json]
"""

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True
from make_prompts import CODE_TEXT, LONG_TEXT, write_prompts  # noqa: E402

PROMPTS = [
    ("raw", "The capital of France is", True),
    ("chat", "Explain paged attention in one paragraph.", False),
    ("window", LONG_TEXT + "\n\n" + CODE_TEXT + "\n\n" + LONG_TEXT, True),
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("worker")
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", default=os.path.join(HERE, "prompts_gemma3.json"))
    a = ap.parse_args()
    out = []
    for name, text, raw in PROMPTS:
        cmd = [a.worker, "--model", a.model, "--prompt", text, "-n", "1", "--json"]
        if raw:
            cmd.append("--raw")
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=True)
        line = [ln for ln in p.stdout.splitlines() if ln.startswith("{")][-1]
        ids = json.loads(line)["prompt_tokens"]
        out.append({"name": name, "text": text, "raw": raw, "n_tokens": len(ids), "ids": ids})
        print(f"{name}: {len(ids)} tokens", file=sys.stderr)
    how = ("BOS + text (raw) or Gemma's chat template (user turn, generation prompt); ids from "
           "inferd-worker's tokenizer (make_prompts_gemma3.py)")
    write_prompts(a.out, a.model, how, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
