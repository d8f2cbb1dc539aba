#!/usr/bin/env bash
# test_bench_kv_disk_ttft.sh BUILD_DIR — bench/kv_disk_ttft.py --smoke (label model): one
# short repetition on the default model — cold, pool hit, disk hit after a restart; the
# report has the three TTFTs, the cached tokens of the hits and equal texts. Then, only when
# llama.cpp's llama-server is already built in its cache (never built here: SKIPPED part
# otherwise, said loudly), the same with --llama-server: its cold, pool hit and slot restore
# after a restart, the restore reusing the saved tokens. Not a timing test: it only keeps
# the benchmark runnable.
set -euo pipefail
build=$1
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
fail() { echo "FAIL: $*" >&2; exit 1; }
model=$(bash "$root/deploy/fetch-model.sh" --path)
[ -f "$model" ] || { echo "SKIPPED: default model not found at $model" >&2; exit 77; }
py=${INFERD_PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

check() {  # REPORT WITH_LLAMA
    "$py" - "$1" "$2" <<'PY' || fail "report $1"
import json, sys
r = json.load(open(sys.argv[1]))
llama = sys.argv[2] == "1"
assert r["bench"] == "kv_disk_ttft" and r["smoke"] and r["texts_equal"], r
(rep,) = r["reps"]
for k in ("cold_s", "pool_s", "disk_s"):
    assert rep[k] > 0 and r["median_ttft_s"][k] == rep[k], (k, rep)
assert rep["prompt_tokens"] > 100 and rep["pool_cached_tokens"] > 100, rep
assert rep["disk_cached_tokens"] == rep["pool_cached_tokens"], rep
if llama:
    assert rep["llama_restored_tokens"] > rep["pool_cached_tokens"], rep
    assert rep["llama_restore_computed_tokens"] < 32, rep  # the saved slot was reused
    assert r["disk_over_llama_restore"] > 0, r
print("ok:", r["median_ttft_s"])
PY
}

"$py" "$root/bench/kv_disk_ttft.py" --inferd "$build/daemon/inferd" --smoke \
    --out "$tmp/r.json" >"$tmp/out" 2>"$tmp/err" || { cat "$tmp/err" >&2; fail "kv_disk_ttft.py --smoke"; }
check "$tmp/r.json" 0

server="${XDG_CACHE_HOME:-$HOME/.cache}/inferd/llamacpp-tools/bin/llama-server"
if [ ! -x "$server" ]; then
    echo "SKIPPED (part): llama-server is not built at $server" \
         "(bench/cpu_vs_llamacpp.sh --peers llama-bench builds it); inferd's side passed" >&2
    echo PASS
    exit 0
fi
# 1 thread: llama.cpp's threads spin at barriers and crawl when the cores are shared
"$py" "$root/bench/kv_disk_ttft.py" --inferd "$build/daemon/inferd" --smoke --threads 1 \
    --llama-server "$server" --out "$tmp/r2.json" >"$tmp/out" 2>"$tmp/err" ||
    { cat "$tmp/err" >&2; fail "kv_disk_ttft.py --smoke --llama-server"; }
check "$tmp/r2.json" 1
echo PASS
