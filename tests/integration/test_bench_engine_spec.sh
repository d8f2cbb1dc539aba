#!/usr/bin/env bash
# test_bench_engine_spec.sh BENCH_ENGINE — bench_engine --spec (label model;
# docs/speculative.md, "Benchmark"): speculative decoding in the offline
# benchmark. A simulated model (no weights: logits all zero, so every output
# token is 0 and n-gram proposals hold) with --spec off,ngram, then the
# default model with off, ngram and draft (the model as its own draft:
# forced acceptance) on prompts of a repeated 8-token piece, 1 and 2
# requests at once. Every run of one invocation prints the same tokens_hash
# (greedy speculative decoding gives plain decoding's tokens), the
# speculating runs accept proposals (the draft all of them) and `off` runs
# propose none. Not a timing test: it keeps the benchmark's spec path
# runnable and exact. About 6 s on a loaded 2-core machine.
set -euo pipefail
bench_engine=$1
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
fail() { echo "FAIL: $*" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
check() { # check JSON METHODS...: the runs' hashes equal, proposals where on
    python3 - "$@" <<'PY' || fail "report $1"
import json, sys
r = json.load(open(sys.argv[1]))
methods = sys.argv[2:]
runs = r["runs"]
assert sorted({x["spec"] for x in runs}) == sorted(methods), runs
hashes = {x["tokens_hash"] for x in runs}
assert len(hashes) == 1, [(x["spec"], x["concurrency"], x["tokens_hash"]) for x in runs]
for x in runs:
    assert x["output_tokens"] == x["requests"] * r["output_tokens"], x
    if x["spec"] == "off":
        assert x["spec_drafts"] == 0 and x["spec_draft_tokens"] == 0, x
    else:
        assert x["spec_accepted_tokens"] > 0, x
        assert x["steps"] < x["output_tokens"] + x["requests"] * 2, x
    if x["spec"] == "draft":  # the model drafting for itself: every proposal stands
        assert x["spec_accepted_tokens"] == x["spec_draft_tokens"], x
        assert x["draft_forwards"] > 0, x
    print("  %-5s c%d: %d steps, %d of %d proposed accepted, hash %s" % (
        x["spec"], x["concurrency"], x["steps"], x["spec_accepted_tokens"],
        x["spec_draft_tokens"], x["tokens_hash"]))
PY
}
"$bench_engine" --simulate 1,0.05 --spec off,ngram --requests 4 --prompt 32 --output 32 \
    --concurrency 1,4 > "$tmp/sim.json" 2> "$tmp/err" || { cat "$tmp/err" >&2; fail simulate; }
check "$tmp/sim.json" off ngram
# bad settings are refused (exit 2), naming the option
for bad in "--spec lookahead" "--spec draft" "--spec-tokens 17" "--spec-ngram-min 3 --spec-ngram-max 2"; do
    # shellcheck disable=SC2086
    if "$bench_engine" --simulate 1,1 $bad > /dev/null 2> "$tmp/err"; then fail "accepted $bad"; fi
    grep -q -- "--spec" "$tmp/err" || { cat "$tmp/err" >&2; fail "message of $bad"; }
done
model=$(bash "$root/deploy/fetch-model.sh" --path)
[ -f "$model" ] || { echo "SKIPPED: default model not found at $model" >&2; exit 77; }
"$bench_engine" --model "$model" --spec off,ngram,draft --draft-model "$model" --requests 2 \
    --prompt 48 --output 16 --concurrency 1,2 --repeat-period 8 --threads 1 \
    > "$tmp/model.json" 2> "$tmp/err" || { cat "$tmp/err" >&2; fail "the default model"; }
check "$tmp/model.json" off ngram draft
echo "ok"
