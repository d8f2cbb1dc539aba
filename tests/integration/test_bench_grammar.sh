#!/usr/bin/env bash
# test_bench_grammar.sh BENCH_GRAMMAR VOCAB_GGUF — bench/bench_grammar --reps 1
# (label unit) on a test-data vocabulary (GPT-2's, 50257 tokens, instead of the
# default model's): it exits 0 and prints one JSON report with every case,
# both modes and their fields. Not a timing test: it only keeps the benchmark
# runnable (its numbers: docs/benchmarks.md, "Grammar masks").
set -euo pipefail
bench=$1
vocab=$2
fail() { echo "FAIL: $*" >&2; exit 1; }
if [ ! -f "$vocab" ]; then
    echo "SKIPPED: no test vocabulary at $vocab (\$INFERD_TESTDATA_DIR)"
    exit 77
fi
py=${INFERD_PYTHON:-python3}
command -v "$py" >/dev/null 2>&1 || { echo "SKIPPED: no Python ($py) to read the report"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rc=0
"$bench" --vocab "$vocab" --reps 1 > "$tmp/out" 2> "$tmp/err" || rc=$?
[ "$rc" = 0 ] || { cat "$tmp/err" >&2; fail "bench_grammar exited with $rc"; }
"$py" - "$tmp/out" <<'PY' || { cat "$tmp/out" >&2; fail "report"; }
import json, sys
r = json.load(open(sys.argv[1]))
assert r["bench"] == "grammar_mask" and r["reps"] == 1, r
assert r["n_vocab"] > 1000 and r["trie_nodes"] > 0, r
# the string frames precomputed at the vocabulary's load (grammar_mask.h)
assert r["vocab_frames"] > 0 and r["vocab_frame_bytes"] > 0, r
names = [c["name"] for c in r["cases"]]
assert names == ["json_schema_person", "json_object", "regex_phone"], names
for c in r["cases"]:
    assert c["tokens"] > 0 and c["grammar_bytes"] > 0 and c["compile_ms"] >= 0, c
    for mode in ("cold", "warm"):
        m = c[mode]
        for k in ("median_us", "p90_us", "max_us", "mean_us"):
            assert m[k] >= 0, (c["name"], mode, k, m)
        # (max_us has one decimal, the others two)
        assert m["median_us"] <= m["p90_us"] <= m["max_us"] + 0.05, (c["name"], mode, m)
        assert m["cache_hits"] + m["walks"] + m["frames"] >= c["tokens"], (c["name"], mode, m)
    # the second request with the same grammar is served from the mask cache
    assert c["warm"]["cache_hits"] >= c["tokens"], c
print("ok: %d cases, %d-token vocabulary" % (len(r["cases"]), r["n_vocab"]))
PY
