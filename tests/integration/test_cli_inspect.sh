#!/usr/bin/env bash
# test_cli_inspect.sh WORKER INFER INFERD — the binaries' --help/--version,
# and `--inspect` (inferd-worker, inferd) / `infer inspect` on the default model, text and
# JSON, and on well-formed files inferd cannot serve (described, "servable: no — why").
# Skips (exit 77) loudly when the default model is absent.
set -euo pipefail
worker=$1 infer=$2 inferd=$3
fail() { echo "FAIL: $*" >&2; exit 1; }

for b in "$worker" "$infer" "$inferd"; do
    # the output first, then grep: `grep -q` quits at its first match, and a writer
    # still printing gets SIGPIPE (a failure under pipefail; seen with the ASan build)
    help=$("$b" --help) || fail "$b --help: exit $?"
    grep -q "Usage" <<<"$help" || fail "$b --help"
    version=$("$b" --version) || fail "$b --version: exit $?"
    grep -Eq '^[a-z-]+ [0-9]+\.[0-9]+\.[0-9]+$' <<<"$version" || fail "$b --version"
done
if "$worker" --no-such-flag >/dev/null 2>&1; then fail "worker accepted a bad flag"; fi
if "$infer" no-such-command >/dev/null 2>&1; then fail "infer accepted a bad command"; fi

out=$("$worker" --inspect /nonexistent.gguf 2>&1) && fail "inspect of a missing file succeeded"
echo "$out" | grep -q "/nonexistent.gguf" || fail "missing-file error does not name the file: $out"

# Files inferd cannot serve but can describe (built here with the gguf package): a GGUF of
# another architecture, a vocabulary-only GGUF, a Hugging Face directory of an unknown
# model type; each gets its report and a separate "servable: no — why" line, the same
# from the three binaries. Malformed files still fail with the reader's error.
py=${INFERD_PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if "$py" -c "import gguf, numpy" 2>/dev/null; then
    "$py" - "$tmp" <<'PY'
import json, os, sys
import gguf, numpy as np
d = sys.argv[1]
w = gguf.GGUFWriter(os.path.join(d, "bert.gguf"), "bert")   # an architecture inferd lacks
w.add_name("tiny-bert")
w.add_block_count(2)
w.add_context_length(64)
w.add_embedding_length(8)
w.add_tensor("token_embd.weight", np.arange(32, dtype=np.float32).reshape(4, 8))
w.add_tensor("blk.0.attn_q.weight", np.zeros((8, 8), dtype=np.float16))
for f in (w.write_header_to_file, w.write_kv_data_to_file, w.write_tensors_to_file, w.close):
    f()
toks = ["<unk>", "<s>", "</s>"] + ["\u2581" + c for c in "abcdefgh"] + list("abcdefgh")
w = gguf.GGUFWriter(os.path.join(d, "vocab.gguf"), "llama")  # a vocabulary, no weights
w.add_tokenizer_model("llama")
w.add_token_list(toks)
w.add_token_scores([0.0] * 3 + [-float(i) for i in range(len(toks) - 3)])
w.add_token_types([2, 3, 3] + [1] * (len(toks) - 3))
w.add_bos_token_id(1)
w.add_eos_token_id(2)
w.add_unk_token_id(0)
for f in (w.write_header_to_file, w.write_kv_data_to_file, w.write_tensors_to_file, w.close):
    f()
os.makedirs(os.path.join(d, "hf"))
json.dump({"architectures": ["BertModel"], "model_type": "bert", "hidden_size": 8,
           "num_hidden_layers": 2, "torch_dtype": "float32"},
          open(os.path.join(d, "hf", "config.json"), "w"))
os.makedirs(os.path.join(d, "badhf"))
open(os.path.join(d, "badhf", "config.json"), "w").write("{not json")
PY
    head -c 40 "$tmp/bert.gguf" > "$tmp/truncated.gguf"
    for f in bert.gguf vocab.gguf hf; do
        text=$("$worker" --inspect "$tmp/$f") || fail "inspect of the well-formed $f failed"
        grep -q "^servable:       no — ." <<<"$text" || fail "$f: no 'servable: no — why' line: $text"
        [ "$("$infer" inspect "$tmp/$f")" == "$text" ] || fail "$f: infer inspect differs"
        [ "$("$inferd" --inspect "$tmp/$f")" == "$text" ] || fail "$f: inferd --inspect differs"
    done
    text=$("$worker" --inspect "$tmp/bert.gguf")
    for want in "architecture:   bert" "name:           tiny-bert" "bert.block_count       2" \
                "token_embd.weight" "blk.0.attn_q.weight" "tokenizer: none" "not supported"; do
        grep -qF "$want" <<<"$text" || fail "bert.gguf report lacks '$want': $text"
    done
    grep -qF "architecture:   bert" <<<"$("$infer" inspect "$tmp/hf")" || fail "hf: no architecture"
    "$worker" --inspect "$tmp/bert.gguf" --json > "$tmp/bert.json"
    "$worker" --inspect "$tmp/vocab.gguf" --json > "$tmp/vocab.json"
    "$worker" --inspect "$tmp/hf" --json > "$tmp/hf.json"
    "$py" - "$tmp" <<'PY'
import json, os, sys
d = sys.argv[1]
b, v, h = (json.load(open(os.path.join(d, n + ".json"))) for n in ("bert", "vocab", "hf"))
for r in (b, v, h):
    assert r["servable"] is False and r["not_servable_reason"], r
assert b["architecture"] == "bert" and b["format"] == "gguf" and b["tokenizer"] is None, b
assert b["metadata"]["bert.block_count"] == 2 and b["metadata"]["general.name"] == "tiny-bert"
assert b["tensor_count"] == 2 and b["tensors"][0]["shape"] == [8, 4], b["tensors"]
assert b["tensors"][1]["type"] == "F16" and b["tensor_bytes"] == 32 * 4 + 64 * 2, b
assert "bert" in b["not_servable_reason"], b["not_servable_reason"]
assert v["tensor_count"] == 0 and v["tokenizer"]["vocab_size"] == 19, v
assert v["not_servable_reason"].startswith("no weights: a vocabulary-only file"), v
assert v["tokenizer"]["bos"]["id"] == 1 and v["metadata"]["tokenizer.ggml.tokens"] == \
    "[19 x str]", v["metadata"]
assert h["format"] == "hf" and h["hf_architecture"] == "BertModel" and h["tensor_count"] == 0
assert h["config"]["num_hidden_layers"] == 2 and h["dtype"] == "float32", h
print("unservable files described:", b["not_servable_reason"], "|", v["not_servable_reason"],
      "|", h["not_servable_reason"])
PY
    for f in truncated.gguf badhf; do
        out=$("$worker" --inspect "$tmp/$f" 2>&1) && fail "inspect of the malformed $f succeeded"
        grep -q "^error: .*$f" <<<"$out" || fail "$f: the error does not name the file: $out"
    done
else
    echo "SKIPPED (these cases): the gguf/numpy packages are missing from $py" >&2
fi

# A Gemma3ForConditionalGeneration directory (the committed tiny one): the vision tower's
# section in text and JSON, the same from the three binaries.
tiny="$(dirname "$0")/../data/tiny-gemma3-vision"
text=$("$worker" --inspect "$tiny") || fail "inspect of $tiny failed"
for want in "hf_architecture: Gemma3ForConditionalGeneration" "vision tower:" \
            "usable                 true" "image_size             112" \
            "layers                 2" "tokens_per_image       16" "image_token_id         511"; do
    grep -qF "$want" <<<"$text" || fail "tiny vision report lacks '$want': $text"
done
[ "$("$infer" inspect "$tiny")" == "$text" ] || fail "tiny vision: infer inspect differs"
[ "$("$inferd" --inspect "$tiny")" == "$text" ] || fail "tiny vision: inferd --inspect differs"
json=$("$worker" --inspect "$tiny" --json) || fail "tiny vision: --json failed"
grep -q '"tokens_per_image": 16' <<<"$json" || fail "tiny vision: JSON lacks tokens_per_image: $json"

model=${INFERD_TEST_MODEL:-$(bash "$(dirname "$0")/../../deploy/fetch-model.sh" --path)}
if [ ! -f "$model" ]; then
    echo "SKIPPED: default model not found at $model (run deploy/fetch-model.sh)" >&2
    exit 77
fi

text=$("$worker" --inspect "$model")
for want in "architecture:   llama" "block_count            30" "embedding_length       576" \
            "head_count             9" "head_count_kv          3" "vocab_size             49152" \
            "pre                    smollm" "chat_template          true" "token_embd.weight" \
            "servable:       yes"; do
    grep -qF "$want" <<<"$text" || fail "inspect text lacks '$want'"
done
[ "$("$infer" inspect "$model")" == "$text" ] || fail "infer inspect differs from inferd-worker --inspect"
[ "$("$inferd" --inspect "$model")" == "$text" ] || fail "inferd --inspect differs from inferd-worker --inspect"
[ "$("$inferd" --inspect "$model" --json)" == "$("$worker" --inspect "$model" --json)" ] ||
    fail "inferd --inspect --json differs from inferd-worker --inspect --json"

"$worker" --inspect "$model" --json | "$py" -c '
import json, sys
r = json.load(sys.stdin)
h, t = r["hparams"], r["tokenizer"]
assert r["architecture"] == "llama", r["architecture"]
assert r["servable"] is True and r["not_servable_reason"] is None, r["not_servable_reason"]
assert h["block_count"] == 30 and h["embedding_length"] == 576, h
assert h["head_count"] == 9 and h["head_count_kv"] == 3, h
assert t["vocab_size"] == 49152 and t["model"] == "gpt2" and t["pre"] == "smollm", t
assert t["bos"]["text"] == "<|im_start|>" and t["eos"]["id"] == 2, t
assert t["chat_template"] is True
assert r["tensor_count"] == len(r["tensors"]) == 272
names = {x["name"]: x for x in r["tensors"]}
assert names["token_embd.weight"]["shape"] == [576, 49152]
assert names["blk.0.attn_k.weight"]["shape"] == [576, 192]
assert sum(x["bytes"] for x in r["tensors"]) == r["tensor_bytes"]
print("inspect json ok:", len(r["tensors"]), "tensors")
'
echo "1 passed, 0 failed"
