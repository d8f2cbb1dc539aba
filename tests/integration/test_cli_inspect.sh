#!/usr/bin/env bash
# test_cli_inspect.sh WORKER INFER INFERD — the binaries' --help/--version,
# and `--inspect` (inferd-worker, inferd) / `infer inspect` on the default model, text and
# JSON.
# Skips (exit 77) loudly when the default model is absent.
set -euo pipefail
worker=$1 infer=$2 inferd=$3
fail() { echo "FAIL: $*" >&2; exit 1; }

for b in "$worker" "$infer" "$inferd"; do
    "$b" --help | grep -q "Usage" || fail "$b --help"
    "$b" --version | grep -Eq '^[a-z-]+ [0-9]+\.[0-9]+\.[0-9]+$' || fail "$b --version"
done
if "$worker" --no-such-flag >/dev/null 2>&1; then fail "worker accepted a bad flag"; fi
if "$infer" no-such-command >/dev/null 2>&1; then fail "infer accepted a bad command"; fi

out=$("$worker" --inspect /nonexistent.gguf 2>&1) && fail "inspect of a missing file succeeded"
echo "$out" | grep -q "/nonexistent.gguf" || fail "missing-file error does not name the file: $out"

model=${INFERD_TEST_MODEL:-$(bash "$(dirname "$0")/../../deploy/fetch-model.sh" --path)}
if [ ! -f "$model" ]; then
    echo "SKIPPED: default model not found at $model (run deploy/fetch-model.sh)" >&2
    exit 77
fi

text=$("$worker" --inspect "$model")
for want in "architecture:   llama" "block_count            30" "embedding_length       576" \
            "head_count             9" "head_count_kv          3" "vocab_size             49152" \
            "pre                    smollm" "chat_template          true" "token_embd.weight"; do
    grep -qF "$want" <<<"$text" || fail "inspect text lacks '$want'"
done
[ "$("$infer" inspect "$model")" == "$text" ] || fail "infer inspect differs from inferd-worker --inspect"
[ "$("$inferd" --inspect "$model")" == "$text" ] || fail "inferd --inspect differs from inferd-worker --inspect"
[ "$("$inferd" --inspect "$model" --json)" == "$("$worker" --inspect "$model" --json)" ] ||
    fail "inferd --inspect --json differs from inferd-worker --inspect --json"

py=${INFERD_PYTHON:-python3}
"$worker" --inspect "$model" --json | "$py" -c '
import json, sys
r = json.load(sys.stdin)
h, t = r["hparams"], r["tokenizer"]
assert r["architecture"] == "llama", r["architecture"]
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
