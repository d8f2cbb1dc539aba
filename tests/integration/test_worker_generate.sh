#!/usr/bin/env bash
# test_worker_generate.sh WORKER — offline generation through the CLI
# (label model): --no-kv-cache gives exactly the cached path's tokens;
# --dump-logits writes a [n_prompt + n - 1, vocab] float32 .npy; seeded
# sampling is reproducible; --json text is valid UTF-8 even when a token
# ends inside a character; bad arguments are usage errors (exit 2); --spec ngram and
# --spec draft give the plain path's tokens.
set -euo pipefail
worker=$1
fail() { echo "FAIL: $*" >&2; exit 1; }
model=${INFERD_TEST_MODEL:-$(bash "$(dirname "$0")/../../deploy/fetch-model.sh" --path)}
[ -f "$model" ] || { echo "SKIPPED: default model not found at $model" >&2; exit 77; }
py=${INFERD_PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

tokens() { "$py" -c 'import json,sys; print(json.load(sys.stdin)["tokens"])'; }

# --no-kv-cache recomputes the whole sequence for every token (n^2 work): the sanitized build
# ($INFERD_TEST_SANITIZED, set by tests/CMakeLists.txt) compares one prompt over 8 tokens.
prompts=("Explain paged attention in one paragraph." "Write a haiku about caches.")
n=40
if [ -n "${INFERD_TEST_SANITIZED:-}" ]; then
    prompts=("${prompts[0]}")
    n=8
fi
for prompt in "${prompts[@]}"; do
    a=$("$worker" --model "$model" --prompt "$prompt" -n $n --ignore-eos --json | tokens)
    b=$("$worker" --model "$model" --prompt "$prompt" -n $n --ignore-eos --json --no-kv-cache |
        tokens)
    [ "$a" == "$b" ] || fail "no-cache tokens differ for '$prompt': $a vs $b"
done

"$worker" --model "$model" --prompt-ids "1 9690 198 2683 359" -n 6 --ignore-eos \
    --dump-logits "$tmp/l.npy" --json > "$tmp/out.json"
"$py" - "$tmp/l.npy" "$tmp/out.json" <<'PY' || fail "dump-logits"
import json, sys
try:
    import numpy as np
except ImportError:
    sys.exit(0)
a = np.load(sys.argv[1])
out = json.load(open(sys.argv[2]))
assert a.dtype == np.float32 and a.shape == (5 + 6 - 1, 49152), a.shape
# row i predicts token i + 1: greedy tokens are the argmax of the rows after the prompt
assert list(a[4:].argmax(axis=1)) == out["tokens"], (list(a[4:].argmax(axis=1)), out["tokens"])
PY

s1=$("$worker" --model "$model" --prompt "Tell me a story." -n 24 --temperature 0.9 --top-p 0.9 --seed 11 --json | tokens)
s2=$("$worker" --model "$model" --prompt "Tell me a story." -n 24 --temperature 0.9 --top-p 0.9 --seed 11 --json | tokens)
s3=$("$worker" --model "$model" --prompt "Tell me a story." -n 24 --temperature 0.9 --top-p 0.9 --seed 12 --json | tokens)
[ "$s1" == "$s2" ] || fail "the same seed gave different tokens"
[ "$s1" != "$s3" ] || fail "different seeds gave the same 24 tokens"

# --spec ngram and --spec draft (the model as its own draft): the engine verifies the
# proposals, so the tokens are the plain path's, greedy and seeded, with proposals accepted
# (docs/speculative.md); --spec with what it cannot do, or a draft without --draft-model, is a
# usage error.
copy="Repeat this list twice: red, green, blue, yellow, red, green, blue, yellow."
spec() { "$py" -c 'import json,sys; d=json.load(sys.stdin); s=d["speculative"]
print(d["tokens"], s["accepted_tokens"] > 0 and s["steps"] < len(d["tokens"]))'; }
runs=("|--spec ngram --spec-tokens 6" "|--spec draft --draft-model $model"
      "--temperature 0.8 --seed 5|--spec ngram --spec-tokens 6")
[ -z "${INFERD_TEST_SANITIZED:-}" ] || runs=("${runs[1]}")
declare -A plain
for run in "${runs[@]}"; do
    samp=${run%%|*} sp=${run#*|}
    # shellcheck disable=SC2086
    [ -n "${plain[x$samp]:-}" ] ||
        plain[x$samp]=$("$worker" --model "$model" --prompt "$copy" -n 24 --ignore-eos $samp \
                        --json | tokens)
    # shellcheck disable=SC2086
    got=$("$worker" --model "$model" --prompt "$copy" -n 24 --ignore-eos $samp $sp --json | spec)
    [ "$got" == "${plain[x$samp]} True" ] || fail "$sp $samp: '$got', plain '${plain[x$samp]}'"
done
for bad in "--spec draft" "--draft-model $model" "--spec lookahead" "--spec ngram --no-kv-cache" \
           "--spec ngram --spec-tokens 17" "--spec ngram --spec-ngram-min 5"; do
    set +e
    # shellcheck disable=SC2086
    "$worker" --model "$model" --prompt "x" -n 2 $bad >/dev/null 2>"$tmp/err"
    rc=$?
    set -e
    [ $rc -eq 2 ] && grep -q -- "--spec" "$tmp/err" || fail "'$bad': rc $rc, $(cat "$tmp/err")"
done

# The first token of this answer is half a UTF-8 character: --json still
# prints a valid document, the half character as U+FFFD (it printed nothing).
t=$("$worker" --model "$model" --prompt "翻译成中文：我爱北京" -n 1 --json |
    "$py" -c 'import json,sys; d=json.load(sys.stdin); print(len(d["tokens"]), d["text"])') ||
    fail "--json with a partial UTF-8 character"
[ "$t" == "1 �" ] || fail "partial character: '$t'"

for bad in "-n 0" "--temperature x" "--prompt-ids 1,abc" "--prompt-ids 99999999" "--top-p 2"; do
    # shellcheck disable=SC2086
    set +e
    "$worker" --model "$model" --prompt "x" $bad >/dev/null 2>&1
    rc=$?
    set -e
    [ $rc -ne 0 ] || fail "'$bad' was accepted"
done
set +e
"$worker" --model /nonexistent.gguf --prompt x >/dev/null 2>"$tmp/err"
rc=$?
set -e
[ $rc -eq 1 ] && grep -q "/nonexistent.gguf" "$tmp/err" || fail "missing model: rc $rc, $(cat "$tmp/err")"
echo "1 passed, 0 failed"
