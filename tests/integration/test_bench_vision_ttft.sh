#!/usr/bin/env bash
# test_bench_vision_ttft.sh BUILD_DIR — bench/vision_ttft.py --smoke (label unit): the tiny
# Gemma 3 vision model's GGUF pair (tests/data/tiny-gemma3-vision/gguf) served by inferd and
# by llama.cpp's llama-server with --mmproj, one round of a cold and a warm one-image question
# (64² PNG): the JSON report has, per server, positive times and the prompt tokens (the
# image's 16 counted), the same on both servers, and a ratio. First, always: a llama-server
# that dies at start (/bin/false) fails the run with status 1 and says so. A missing tool
# (llama-server not in ~/.cache/inferd/llamacpp-tools/bin or $LLAMA_SERVER) is SKIPPED
# loudly (status 77) after inferd's half is checked. Not a timing test (a few seconds): it
# only keeps the benchmark runnable (its figures: docs/benchmarks.md, "One-image TTFT").
set -euo pipefail
build=$1
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
py=${INFERD_PYTHON:-python3}
fail() { echo "FAIL: $*" >&2; exit 1; }
tmp=$(mktemp -d /tmp/inferd-vision-ttft-test-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
bench="$root/bench/vision_ttft.py"

rc=0
"$py" "$bench" --smoke --build "$build" --llama-server /bin/false >"$tmp/out" 2>"$tmp/err" || rc=$?
[ "$rc" = 1 ] || { cat "$tmp/err" >&2; fail "with a dead llama-server: status $rc, not 1"; }
grep -q "llama-server exited with 1 before it was ready" "$tmp/err" ||
    { cat "$tmp/err" >&2; fail "no clear error for a dead llama-server"; }

"$py" "$bench" --smoke --build "$build" --json "$tmp/r.json" >"$tmp/out" 2>"$tmp/err" ||
    { cat "$tmp/err" >&2; fail "vision_ttft.py --smoke"; }
cat "$tmp/err" >&2
"$py" - "$tmp/r.json" <<'PY' || fail "report"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["bench"] == "vision_ttft" and r["rounds"] == 1, r
s = r["servers"]
assert "inferd" in s, "inferd did not run: %s" % r["skipped"]
for k, v in s.items():
    for kind in ("cold_s", "warm_s"):
        assert len(v[kind]["per_round"]) == 1 and v[kind]["median"] > 0, (k, v)
    assert v["prompt_tokens"] > 16, (k, v)  # the image's 16 tokens and the question's
if "llama-server" in s:
    assert r["inferd_over_llamaserver_cold"] > 0 and r["inferd_over_llamaserver_warm"] > 0, r
PY
if grep -q '"skipped": \[\]' "$tmp/r.json"; then
    echo ok
    exit 0
fi
grep SKIPPED "$tmp/err" >&2 || true
echo "SKIPPED: part of bench/vision_ttft.py --smoke (see above)" >&2
exit 77
