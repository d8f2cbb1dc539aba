#!/usr/bin/env bash
# test_bench_served_vs_llamaserver.sh BUILD_DIR — bench/served_vs_llamaserver.sh
# (label model). First, always: a llama-server that dies at start (/bin/false)
# makes the benchmark fail with status 1 and say so. Then, only when
# llama-server is already built in its cache (the test never builds it: that
# takes tens of minutes; SKIPPED otherwise), `--smoke`: tiny workloads on the
# default model against both servers; the JSON report has, for each workload
# and server, a positive output rate and latencies, a ratio, and every run
# its load average. Not a timing test: it only keeps the benchmark runnable.
set -euo pipefail
build=$1
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
fail() { echo "FAIL: $*" >&2; exit 1; }
model=$(bash "$root/deploy/fetch-model.sh" --path)
[ -f "$model" ] || { echo "SKIPPED: default model not found at $model" >&2; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bench="$root/bench/served_vs_llamaserver.sh"

# a server that never comes up: a clear error, status 1
rc=0
"$bench" --smoke --build "$build" --models default --llama-server /bin/false \
    >"$tmp/out" 2>"$tmp/err" || rc=$?
[ "$rc" = 1 ] || { cat "$tmp/err" >&2; fail "with a dead llama-server: status $rc, not 1"; }
grep -q "llama-server exited with 1 before it was ready" "$tmp/err" ||
    { cat "$tmp/err" >&2; fail "no clear error for a dead llama-server"; }

cache="${XDG_CACHE_HOME:-$HOME/.cache}/inferd/llamacpp-server/bin"
if [ ! -x "$cache/llama-server" ] ||
   [ "$(cat "$cache/VERSION" 2>/dev/null)" != "${LLAMACPP_PY_VERSION:-0.3.36}" ]; then
    echo "SKIPPED: llama-server is not built in $cache" \
         "(bench/served_vs_llamaserver.sh --build-llama-server builds it, ~30 min)" >&2
    exit 77
fi
# 1 thread: llama.cpp's 2 threads spin at barriers and crawl when the cores are shared
"$bench" --smoke --build "$build" --models default --threads 1 --json "$tmp/r.json" \
    >"$tmp/out" 2>"$tmp/err" || { cat "$tmp/err" >&2; fail "served_vs_llamaserver.sh --smoke"; }
python3 - "$tmp/r.json" <<'PY' || fail "report"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["bench"] == "served_vs_llamaserver" and r["smoke"] and r["commit"] and r["cpu"], r
(m,) = r["models"]
names = [w["name"] for w in r["workloads"]]
assert len(names) == 2, names
for w in names:
    s = m["summary"][w]
    for k in ("output_tok_s", "ttft_mean_ms", "ttft_p99_ms", "tpot_mean_ms", "itl_mean_ms",
              "itl_p99_ms", "itl_p99_over_mean"):
        for srv in ("llama-server", "inferd"):
            assert s[k][srv] > 0, (w, k, srv, s[k])
        assert s[k]["ratio"] > 0, (w, k, s[k])
    # fresh prompts: no prefix-cache hits on either side
    assert s["cached_tokens"]["inferd"] == 0, s["cached_tokens"]
# every run names its server and workload, with the load average before it
assert {(x["server"], x["workload"]) for x in m["runs"]} == \
    {(srv, w) for srv in ("llama-server", "inferd") for w in names}
assert all(len(x["load_avg"]) == 3 for x in m["runs"])
print("ok:", {w: m["summary"][w]["output_tok_s"] for w in names})
PY
echo PASS
