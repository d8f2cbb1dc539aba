#!/usr/bin/env bash
# test_bench_kv_decode.sh BUILD_DIR — bench/kv_decode_vs_llamacpp.py --smoke (label model):
# 2 sequences of a 128-token context on the default model, decoded with f16, q8_0 and q4_0
# KV by bench_engine; the report has a positive rate per type and the ratios to f16. Then,
# only when llama.cpp's llama-batched-bench is already built in its cache (never built here:
# that part SKIPPED otherwise, said loudly), the same beside llama.cpp with the ratios
# between the engines. Both again with --shared-prompt, f16 and q8_0 only (one prompt
# prefilled once, shared by the 2 sequences: bench_engine --shared-prompt's prefix-cache
# hits, checked by the script, and llama-batched-bench -pps -kvu). Not a timing test: it only keeps the benchmark
# runnable.
set -euo pipefail
build=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
fail() { echo "FAIL: $*" >&2; exit 1; }
[ -f "$(bash "$root/deploy/fetch-model.sh" --path)" ] ||
    { echo "SKIPPED: default model not found" >&2; exit 77; }
py=${INFERD_PYTHON:-python3}
"$py" -c 'import gguf' 2>/dev/null || { echo "SKIPPED: $py lacks the gguf package" >&2; exit 77; }
cmake --build "$build" --target bench_engine >/dev/null || fail "cannot build bench_engine"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

run() {  # [--batched-bench PATH] [--shared-prompt]
    "$py" "$root/bench/kv_decode_vs_llamacpp.py" --bench-engine "$build/bench/bench_engine" \
        --smoke --threads 1 --json "$tmp/r.json" "$@" >"$tmp/out" 2>"$tmp/err" ||
        { cat "$tmp/err" >&2; fail "kv_decode_vs_llamacpp.py $*"; }
    "$py" - "$tmp/r.json" "$*" <<'PY' || fail "report"
import json, sys
r = json.load(open(sys.argv[1]))
llama = "--batched-bench" in sys.argv[2]
assert r["bench"] == "kv_decode_vs_llamacpp" and r["smoke"], r
assert r["shared_prompt"] == ("--shared-prompt" in sys.argv[2]), r["shared_prompt"]
(row,) = r["results"]
assert row["context"] == 128 and row["seqs"] == 2, row
engines = ["inferd"] + (["llama.cpp"] if llama else [])
assert r["engines"] == engines, r["engines"]
types = ("f16", "q8_0") if r["shared_prompt"] else ("f16", "q8_0", "q4_0")
for e in engines:
    for kv in types:
        assert row["%s_%s_tok_s" % (e, kv)] > 0, (e, kv, row)
        assert kv == "f16" or row["%s_%s_over_f16" % (e, kv)] > 0, row
if llama:
    assert all(row["inferd_over_llama_" + kv] > 0 for kv in types), row
print("ok:", row)
PY
}

run
run --shared-prompt --types f16,q8_0
bb="${XDG_CACHE_HOME:-$HOME/.cache}/inferd/llamacpp-tools/bin/llama-batched-bench"
if [ ! -x "$bb" ]; then
    echo "SKIPPED (part): llama-batched-bench is not built at $bb" \
         "(cmake --build ~/.cache/inferd/llamacpp-tools --target llama-batched-bench);" \
         "inferd's side passed" >&2
else
    run --batched-bench "$bb"
    run --batched-bench "$bb" --shared-prompt --types f16,q8_0
fi
echo PASS
