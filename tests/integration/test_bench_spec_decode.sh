#!/usr/bin/env bash
# test_bench_spec_decode.sh BUILD_DIR — bench/spec_decode.py --smoke (label model): one
# short repetition per prompt on the default model, plain against `--spec ngram`; the report
# has both rates, a ratio and equal texts for every prompt, and proposals were verified.
# Then, only when llama.cpp's llama-server is already built in its cache (never built here:
# that part SKIPPED otherwise, said loudly), the same with --llama-server: its two rates,
# equal texts, and inferd's speculative rate over its. Not a timing test: it only keeps the
# benchmark runnable.
set -euo pipefail
build=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
fail() { echo "FAIL: $*" >&2; exit 1; }
[ -f "$(bash "$root/deploy/fetch-model.sh" --path)" ] ||
    { echo "SKIPPED: default model not found" >&2; exit 77; }
py=${INFERD_PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

run() {  # REPORT [--llama-server PATH]
    local out=$1
    shift
    "$py" "$root/bench/spec_decode.py" --inferd "$build/daemon/inferd" --smoke --threads 1 \
        --out "$out" "$@" >"$tmp/out" 2>"$tmp/err" || { cat "$tmp/err" >&2; fail "spec_decode.py $*"; }
    "$py" - "$out" "$#" <<'PY' || fail "report $out"
import json, sys
r = json.load(open(sys.argv[1]))
llama = sys.argv[2] != "0"
assert r["bench"] == "spec_decode" and r["method"] == "ngram" and "error" not in r, r
assert len(r["prompts"]) >= 3, r["prompts"]
for name, p in r["prompts"].items():
    assert p["plain_tok_s"] > 0 and p["spec_tok_s"] > 0 and p["ratio"] > 0, (name, p)
    assert p["same_text"] and p["verifications"] > 0, (name, p)
    if llama:
        assert p["llama_plain_tok_s"] > 0 and p["llama_spec_tok_s"] > 0, (name, p)
        assert p["llama_same_text"] and p["spec_vs_llama"] > 0, (name, p)
print("ok:", {n: p["ratio"] for n, p in r["prompts"].items()})
PY
}

run "$tmp/r.json"
server="${XDG_CACHE_HOME:-$HOME/.cache}/inferd/llamacpp-tools/bin/llama-server"
if [ ! -x "$server" ]; then
    echo "SKIPPED (part): llama-server is not built at $server" \
         "(bench/cpu_vs_llamacpp.sh --peers llama-bench builds it); inferd's side passed" >&2
else
    run "$tmp/r2.json" --llama-server "$server"
fi
echo PASS
