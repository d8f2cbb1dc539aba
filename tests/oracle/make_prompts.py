#!/usr/bin/env python3
"""make_prompts.py — (re)generates tests/oracle/prompts.json: the oracle test's three prompts
as token ids, so the comparison does not depend on inferd's own tokenizer.

Each prompt is a user message wrapped in SmolLM2's ChatML template (MODEL-FORMATS.md §7.1,
with the template's default system prompt, add_generation_prompt, no BOS) and tokenized by a
byte-level BPE built with the `tokenizers` package from the GGUF's own vocabulary and merges
(pre-tokenizer "smollm": each digit its own piece, then the GPT-2 regex, §6.3; control tokens
such as <|im_start|> matched as special tokens). When `transformers` is importable, the ids
are cross-checked against AutoTokenizer.from_pretrained(dir, gguf_file=...) with the
template rendered by its apply_chat_template; a mismatch is an error.

    make_prompts.py --model SmolLM2-135M-Instruct.Q4_1.gguf [--out prompts.json]
"""

import argparse
import json
import os
import sys

import gguf
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

LONG_TEXT = (
    "The lighthouse at the end of the northern breakwater was built in 1874, when the harbour "
    "was still the busiest fishing port on that stretch of coast. Its first keeper, a former "
    "ship's carpenter named Elias Brand, kept a logbook in which he recorded the weather three "
    "times a day, the number of boats that left and returned, and every repair he made to the "
    "lamp. The lamp itself burned paraffin and had to be trimmed every four hours; on stormy "
    "nights Brand rarely slept. In 1911 the light was converted to acetylene gas, which allowed "
    "it to flash automatically, and the keeper's duties shrank to refilling the gas cylinders "
    "and cleaning the lens. Electricity arrived in 1952 together with a foghorn that the "
    "townspeople complained about for years. The last keeper retired in 1987, when the station "
    "was fully automated and monitored by radio from a control room sixty kilometres away. "
    "Today the tower is a small museum. Visitors can climb the ninety-two steps to the lantern "
    "room, read facsimile pages of Brand's logbook, and see the original brass lamp, which was "
    "found in a scrapyard in 1995 and restored by volunteers. The breakwater is also a popular "
    "place to watch seabirds, especially in autumn, when large flocks of gannets pass the "
    "harbour on their way south.\n\n"
    "Summarize the history of this lighthouse in a few sentences, then list three things a "
    "visitor can do there."
)

CODE_TEXT = (
    "What does this Python function do, and is there a bug in it?\n\n"
    "```python\n"
    "def moving_average(values, window=3):\n"
    "    if window <= 0:\n"
    "        raise ValueError(\"window must be positive\")\n"
    "    result = []\n"
    "    total = 0.0\n"
    "    for i, v in enumerate(values):\n"
    "        total += v\n"
    "        if i >= window:\n"
    "            total -= values[i - window]\n"
    "        result.append(total / window)\n"
    "    return result\n"
    "\n"
    "print(moving_average([1, 2, 3, 4, 10], 2))\n"
    "```"
)

PROMPTS = [
    ("short", "Explain paged attention in one paragraph."),
    ("long", LONG_TEXT),
    ("code", CODE_TEXT),
]


def chatml(user: str) -> str:
    return (f"<|im_start|>system\n{SYSTEM}<|im_end|>\n"
            f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n")


def build_tokenizer(path: str) -> Tokenizer:
    r = gguf.GGUFReader(path, "r")
    tokens = r.fields["tokenizer.ggml.tokens"].contents()
    types = r.fields["tokenizer.ggml.token_type"].contents()
    merges = r.fields["tokenizer.ggml.merges"].contents()
    pre = r.fields["tokenizer.ggml.pre"].contents()
    if pre != "smollm":
        raise SystemExit(f"pre-tokenizer {pre!r}: this script knows 'smollm' only")
    vocab = {t: i for i, t in enumerate(tokens)}
    pairs = [tuple(m.split(" ", 1)) for m in merges]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=pairs, fuse_unk=False, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, ty in zip(tokens, types) if ty == 3])
    return tok


def hf_ids(path: str, user: str):
    """The ids transformers produces, or None when it is not installed."""
    try:
        from transformers import AutoTokenizer
    except ImportError:
        return None
    tk = AutoTokenizer.from_pretrained(os.path.dirname(os.path.abspath(path)),
                                       gguf_file=os.path.basename(path))
    text = tk.apply_chat_template([{"role": "user", "content": user}], tokenize=False,
                                  add_generation_prompt=True)
    if text != chatml(user):
        raise SystemExit(f"transformers renders the template differently:\n{text!r}")
    return tk(text, add_special_tokens=False)["input_ids"]


def write_prompts(path: str, model: str, how: str, prompts: list):
    """The prompts file both make_prompts*.py write: {"model", "how", "prompts": [...]}."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"model": os.path.basename(model), "how": how, "prompts": prompts}, f,
                  indent=1, ensure_ascii=False)
        f.write("\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "prompts.json"))
    a = ap.parse_args()
    tok = build_tokenizer(a.model)
    out, checked = [], True
    for name, user in PROMPTS:
        text = chatml(user)
        ids = tok.encode(text, add_special_tokens=False).ids
        if tok.decode(ids, skip_special_tokens=False) != text:
            raise SystemExit(f"{name}: ids do not decode back to the text")
        ref = hf_ids(a.model, user)
        if ref is None:
            checked = False
        elif ref != ids:
            raise SystemExit(f"{name}: transformers' ids differ:\n{ref}\n{ids}")
        out.append({"name": name, "user": user, "templated": text, "n_tokens": len(ids),
                    "ids": ids})
        print(f"{name}: {len(ids)} tokens", file=sys.stderr)
    how = ("ChatML-templated (SmolLM2 default system prompt, generation prompt, no BOS); "
           "tokenized by make_prompts.py with a `tokenizers` byte-level BPE built from the "
           "GGUF vocab/merges (smollm pre-tokenizer)")
    how += ("; cross-checked identical to transformers AutoTokenizer(gguf_file=...) + "
            "apply_chat_template" if checked else "; transformers was not available to "
            "cross-check")
    write_prompts(a.out, a.model, how, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
