#!/usr/bin/env python3
"""Produce smollm_golden.json: token ids for varied strings, from an independent
reference tokenizer, for the default model's vocabulary (SmolLM2, pre type
"smollm").

How the reference is built: the Hugging Face `tokenizers` library (Rust), fed
with the vocabulary and merges read from the model's GGUF file by the `gguf`
Python package, and configured like SmolLM2's tokenizer.json:
  model         BPE(vocab, merges)  (no unk, no byte fallback)
  pre_tokenizer Sequence[Digits(individual_digits=True),
                         ByteLevel(add_prefix_space=False, use_regex=True)]
  decoder       ByteLevel
Special tokens are deliberately NOT registered, so "<|im_start|>" written in the
text is tokenized as plain text: that is what inferd does with special-token
parsing off (the mode the golden test uses). Nothing of inferd is involved.

Usage (not run by CI; the JSON it writes is committed):
  ~/.cache/inferd/venv/bin/python tests/data/tokenizer/gen_smollm_golden.py \
      ~/.cache/inferd/models/SmolLM2-135M-Instruct.Q4_1.gguf \
      tests/data/tokenizer/smollm_golden.json
"""
import json
import random
import sys

from gguf import GGUFReader
from tokenizers import Tokenizer, decoders, models, pre_tokenizers


def field_strings(reader, key):
    f = reader.fields[key]
    return [bytes(f.parts[i]).decode("utf-8") for i in f.data]


def build_reference(gguf_path):
    r = GGUFReader(gguf_path)
    assert bytes(r.fields["tokenizer.ggml.pre"].parts[-1]).decode() == "smollm"
    tokens = field_strings(r, "tokenizer.ggml.tokens")
    merges = field_strings(r, "tokenizer.ggml.merges")
    vocab = {t: i for i, t in enumerate(tokens)}
    pairs = []
    for m in merges:
        k = m.index(" ", 1)
        pairs.append((m[:k], m[k + 1:]))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=pairs))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    return tok


FIXED = [
    "Hello world", " Hello world", "Hello, world!", "  leading spaces", "trailing spaces   ",
    "tabs\tand\ttabs", "\t\tdouble tab", "line1\nline2\r\nline3\rline4", "\n\n\n", " \n \n ",
    "     ", "a  b   c    d", "x \t\n y", "\u00a0non-breaking\u00a0space", "em\u2003space",
    "ideographic\u3000space", "nel\u0085char", "zero\u200bwidth", "\ufeffbom",
    "12345", "3.14159", "1,000,000", "-42", "+7e-10", "0x1F2E", "version 2.0.1-rc3",
    "Phone: +1 (555) 123-4567", "1/2 ½ ¾ ⅞", "Roman Ⅻ numerals", "٣٤٥ Arabic-Indic digits",
    "१२३ Devanagari digits", "①②③ circled", "𝟘𝟙𝟚 math digits", "2024-06-01T12:34:56Z",
    "def fib(n):\n    return n if n < 2 else fib(n-1) + fib(n-2)\n",
    "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 42); return 0; }",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}",
    "const f = async (x) => { await g(x?.y ?? 0); };",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
    "<div class=\"a\"><p>Hi &amp; bye</p></div>",
    "{\"key\": [1, 2, 3], \"nested\": {\"ok\": true, \"n\": null}}",
    "$ ls -la | grep '^d' && echo \"done\" > /dev/null 2>&1",
    "fn main() -> Result<(), Box<dyn Error>> { Ok(()) }",
    "x = [i**2 for i in range(10) if i % 2 == 0]",
    "    indented code\n        more indented\n",
    "I've been 'told he's there, 'RE you sure? 'M not sure I'll make it",
    "don't won't can't shouldn't y'all it's we're they've I'd you'll",
    "DON'T WON'T IT'S WE'RE THEY'VE I'D YOU'LL",
    "Hello 👋 world 🌍!", "🚀🚀🚀", "😶‍🌫️ zwj sequence", "👨‍👩‍👧‍👦 family", "🇫🇷🇯🇵 flags",
    "🏳️‍🌈 flag", "✅❌⚠️", "👍🏽 skin tone", "🦙 llama", "∑∫∂√∞ ≠ ≤ ≥",
    "你好，世界！", "我想在apple工作1314151天～", "日本語のテキストです。", "한국어 텍스트입니다.",
    "中文English混合text", "繁體中文測試", "カタカナ ひらがな 漢字",
    "مرحبا بالعالم", "שלום עולם", "English then עברית then English", "العربية 123 مع أرقام",
    "Привет, мир!", "нещо на Български", "Ελληνικά κείμενο", "Ünïcödé àccénts café naïve",
    "Führer", "Cửa Việt", "ᏣᎳᎩ Cherokee", "ქართული Georgian", "Հայերեն Armenian",
    "हिन्दी पाठ", "বাংলা লেখা", "தமிழ் உரை", "ไทย ภาษา", "ລາວ", "កាន់តែពិសេសអាចខលចេញ",
    "e\u0301 combining acute", "ﬁ ligature", "Ａｂｃ fullwidth", "ｶﾀｶﾅ halfwidth",
    "<|im_start|>user\nforged<|im_end|>", "<|endoftext|>", "<repo_name>x<file_sep>",
    "!!!!!!", "??!!..", "......", "''''''```````\"\"\"\"", "------=======", "___init___",
    "a.b.c.d", "end.", "(parenthetical)", "[brackets] {braces}", "@user #hashtag",
    "https://example.com/path?q=1&r=two#frag", "user@example.com", "C:\\Windows\\System32",
    "~/.config/app/settings.toml", "snake_case camelCase PascalCase kebab-case",
    "ALL CAPS SENTENCE", "MiXeD cAsE", "a", " ", "  ", "\t", "\n", "", "3", "33", "333",
    "3333", "33333", "333333333", "3 33 333 3333", "3.3 3..3 3...3",
]

POOLS = {
    "en": ["the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "and", "then",
           "Hello", "World", "tokenizer", "inference", "server", "model", "weights", "GPU"],
    "code": ["if", "else", "return", "(", ")", "{", "}", ";", "==", "!=", "->", "=>", "::",
             "x", "y_1", "foo.bar", "[0]", "#", "//", "/*", "*/", "\"s\"", "'c'"],
    "num": ["0", "7", "42", "123", "2024", "3.5", "1e9", "99.99%", "½", "٣", "१", "Ⅻ"],
    "emoji": ["😀", "🚀", "👋🏾", "🇩🇪", "❤️", "🧑‍💻", "✨", "🔥"],
    "cjk": ["我", "们", "日本", "語", "한국", "어", "中文", "漢字", "。", "，"],
    "rtl": ["שלום", "عالم", "مرحبا", "עברית", "سلام"],
    "misc": ["Ω", "ß", "é", "ñ", "ø", "Ж", "λ", "→", "•", "…", "€", "£", "¥"],
    "ws": [" ", "  ", "   ", "\t", "\n", "\r\n", " \n", "\n\n", "\u00a0", "\u3000"],
}


def generated(n, seed):
    rng = random.Random(seed)
    keys = list(POOLS)
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 14)):
            k = rng.choice(keys)
            parts.append(rng.choice(POOLS[k]))
            if rng.random() < 0.6:
                parts.append(rng.choice(["", " ", " ", "\n", "  "]))
        out.append("".join(parts))
    return out


def main():
    gguf_path, out_path = sys.argv[1], sys.argv[2]
    tok = build_reference(gguf_path)
    texts = []
    seen = set()
    for t in FIXED + generated(300, seed=20250601):
        if t not in seen:
            seen.add(t)
            texts.append(t)
    cases = []
    for t in texts:
        ids = tok.encode(t, add_special_tokens=False).ids
        assert tok.decode(ids) == t, repr(t)
        cases.append({"text": t, "ids": ids})
    doc = {
        "about": "SmolLM2-135M-Instruct vocabulary (GGUF pre 'smollm'); ids from HF tokenizers "
                 "BPE + Sequence[Digits(individual), ByteLevel(no prefix space)], special tokens "
                 "not parsed; produced by gen_smollm_golden.py",
        "tokenizers_version": __import__("tokenizers").__version__,
        "cases": cases,
    }
    with open(out_path, "w", encoding="utf-8") as f:  # one case per line
        head = json.dumps({k: v for k, v in doc.items() if k != "cases"}, ensure_ascii=False)
        f.write(head[:-1] + ', "cases": [\n')
        f.write(",\n".join(json.dumps(c, ensure_ascii=False) for c in cases))
        f.write("\n]}\n")
    print(f"{len(cases)} cases -> {out_path}")


if __name__ == "__main__":
    main()
