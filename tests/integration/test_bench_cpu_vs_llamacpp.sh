#!/usr/bin/env bash
# test_bench_cpu_vs_llamacpp.sh BENCH_ENGINE — bench/cpu_vs_llamacpp.sh --smoke
# (label model): tiny workloads on the default model, inferd only unless
# llama-cpp-python is already installed in its cache venv (the test never
# builds it); the JSON report has every metric with a positive value for each
# engine, a ratio when both ran, and the peak RSS. Not a timing test: it only
# keeps the benchmark runnable.
set -euo pipefail
bench_engine=$1
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
fail() { echo "FAIL: $*" >&2; exit 1; }
model=$(bash "$root/deploy/fetch-model.sh" --path)
[ -f "$model" ] || { echo "SKIPPED: default model not found at $model" >&2; exit 77; }
venv="${XDG_CACHE_HOME:-$HOME/.cache}/inferd/llamacpp-venv"
mode=--inferd-only
engines=inferd
if [ "${LLAMACPP_PY_VERSION:-0.3.36}" = 0.3.36 ] &&
   "$venv/bin/python" -c "import llama_cpp, sys; sys.exit(llama_cpp.__version__ != '0.3.36')" 2>/dev/null; then
    mode=""
    engines=inferd,llama.cpp
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck disable=SC2086
"$root/bench/cpu_vs_llamacpp.sh" --smoke $mode --bench-engine "$bench_engine" \
    --models default --json "$tmp/r.json" > "$tmp/out" 2> "$tmp/err" ||
    { cat "$tmp/err" >&2; fail "cpu_vs_llamacpp.sh --smoke $mode"; }
python3 - "$tmp/r.json" "$engines" <<'PY' || fail "report"
import json, sys
r = json.load(open(sys.argv[1]))
engines = sys.argv[2].split(",")
assert r["bench"] == "cpu_vs_llamacpp" and r["smoke"] and r["commit"] and r["cpu"], r
(m,) = r["models"]
s = m["summary"]
for k in ("pp32_tok_s", "tg8_tok_s", "batched2_decode_tok_s", "rss_peak_mib"):
    assert k in s, (k, sorted(s))
    for e in engines:
        assert s[k][e] > 0, (k, e, s[k])
    if len(engines) == 2:
        assert s[k]["ratio"] > 0, (k, s[k])
# the read bandwidth around the runs, and batch-1 decode's share of it
assert r["read_gb_s"]["before"] > 0 and r["read_gb_s"]["after"] > 0, r.get("read_gb_s")
assert m["weight_bytes"] > 0, m["weight_bytes"]
for e in engines:
    assert s["decode_gb_s"][e] > 0 and s["decode_bw_fraction"][e] > 0, (e, s["decode_gb_s"])
# every run names its engine, workload and the load average before it
assert {x["engine"] for x in m["runs"]} == set(engines)
assert all(len(x["load_avg"]) == 3 for x in m["runs"])
print("ok:", {k: s[k] for k in s if not k.endswith("_reps")})
PY
echo "PASS ($engines)"
