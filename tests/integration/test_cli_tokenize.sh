#!/usr/bin/env bash
# test_cli_tokenize.sh INFER — `infer tokenize` / `infer detokenize`:
# --test on llama.cpp's vocab test files reproduces the .out files byte for
# byte; text → ids → text round-trips; special tokens only with
# --parse-special; --chat with an unknown template names the known ones.
# Skips (exit 77) loudly when the shared vocab test data is absent.
set -euo pipefail
infer=$1
fail() { echo "FAIL: $*" >&2; exit 1; }
data=${INFERD_TESTDATA_DIR:-}/vocab
if [ ! -f "$data/ggml-vocab-gpt-2.gguf" ]; then
    echo "SKIPPED: no vocab test data under '$data' (INFERD_TESTDATA_DIR)" >&2
    exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for v in gpt-2 llama-spm; do
    "$infer" tokenize --vocab "$data/ggml-vocab-$v.gguf" --test "$data/ggml-vocab-$v.gguf.inp" \
        >"$tmp/$v.out" || fail "tokenize --test $v"
    cmp -s "$tmp/$v.out" "$data/ggml-vocab-$v.gguf.out" || {
        diff "$tmp/$v.out" "$data/ggml-vocab-$v.gguf.out" | head -20 >&2
        fail "$v: output differs from the reference .out"
    }
done

gpt2=$data/ggml-vocab-gpt-2.gguf
ids=$(printf 'Hello world' | "$infer" tokenize --vocab "$gpt2")
[ "$ids" = "15496 995" ] || fail "Hello world -> '$ids'"
text=$'  tabs\there\n🦙 and 12345 …'
back=$(printf '%s' "$text" | "$infer" tokenize --vocab "$gpt2" | "$infer" detokenize --vocab "$gpt2")
[ "$back" = "$text" ] || fail "round trip gave '$back'"
spm=$data/ggml-vocab-llama-spm.gguf
ids=$(printf 'Hello world' | "$infer" tokenize --vocab "$spm")
[ "$ids" = "1 15043 3186" ] || fail "SPM with BOS: '$ids'"
ids=$(printf 'Hello world' | "$infer" tokenize --vocab "$spm" --no-special)
[ "$ids" = "15043 3186" ] || fail "SPM without BOS: '$ids'"

ids=$(printf '<|endoftext|>' | "$infer" tokenize --vocab "$gpt2")
[ "$ids" != "50256" ] || fail "control token parsed without --parse-special"
ids=$(printf '<|endoftext|>' | "$infer" tokenize --vocab "$gpt2" --parse-special)
[ "$ids" = "50256" ] || fail "--parse-special: '$ids'"

if out=$(printf 'hi' | "$infer" tokenize --vocab "$gpt2" --chat --chat-template nope 2>&1); then
    fail "unknown chat template accepted"
fi
grep -q "chatml" <<<"$out" || fail "unknown-template error does not list the names: $out"
ids=$(printf 'hi' | "$infer" tokenize --vocab "$spm" --chat --chat-template llama2)
[ "${ids%% *}" = "1" ] || fail "llama2 chat prompt does not start with one BOS: '$ids'"
case "$ids" in "1 1 "*) fail "double BOS: '$ids'" ;; esac

if "$infer" tokenize --vocab /nonexistent.gguf </dev/null 2>/dev/null; then
    fail "missing vocab accepted"
fi
echo "ok"
