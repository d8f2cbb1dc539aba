#!/usr/bin/env bash
# prefill_cap_sweep.sh — the prefill cap's latency/throughput trade-off curve
# under bench_engine's cost model (--simulate A,B: a step of n tokens costs
# A + B·n ms; the engine's real scheduler, no weights, exact and free of the
# machine's load). One JSON object per (shape, cap, step ratio) on stdout:
# concurrency, prompt, output, prefill_cap, step_ratio (auto only),
# output_tok_s, steps, itl_mean_ms, itl_p99_ms, p99_over_mean, ttft_*.
#
#   bench/prefill_cap_sweep.sh [A B] [--bench-engine PATH]
#
# Default A = 9, B = 0.9 (SmolLM2 with quantized weights, 2 threads, quiet
# AVX2 machine, estimated from decode and pp512 rates); docs/benchmarks.md
# has the results. Shapes: 16 streams 128/64 (the serving sweep's), 4 and 64
# streams 128/64, 16 streams 512/32 and 32/128.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bench="$root/build/bench/bench_engine"
a=9 b=0.9
if [ $# -ge 2 ] && [[ $1 != --* ]]; then a=$1 b=$2; shift 2; fi
if [ "${1:-}" = --bench-engine ]; then bench=$2; shift 2; fi
[ -x "$bench" ] || { echo "prefill_cap_sweep.sh: no $bench (build bench_engine)" >&2; exit 1; }
for shape in "16 64 128 64" "4 32 128 64" "64 128 128 64" "16 64 512 32" "16 64 32 128"; do
    set -- $shape
    for r in 1.5 1.3 1.2; do
        "$bench" --simulate "$a,$b" --concurrency "$1" --requests "$2" --prompt "$3" \
            --output "$4" --prefill-cap off,auto,32,64 --step-ratio "$r" 2>/dev/null
    done
done | python3 -c '
import json, sys
seen = set()
for line in sys.stdin:
    d = json.loads(line)
    for r in d["runs"]:
        auto = r["prefill_cap"] == "auto"
        key = (r["concurrency"], d["prompt_tokens"], d["output_tokens"], r["prefill_cap"],
               d["step_ratio"] if auto else None)
        if key in seen:  # fixed caps and off do not depend on the ratio
            continue
        seen.add(key)
        print(json.dumps({"concurrency": key[0], "prompt": key[1], "output": key[2],
                          "prefill_cap": key[3], "step_ratio": key[4],
                          "output_tok_s": r["output_tok_s"], "steps": r["steps"],
                          "itl_mean_ms": r["itl_ms"]["mean"], "itl_p99_ms": r["itl_ms"]["p99"],
                          "p99_over_mean": r["itl_p99_over_mean"],
                          "ttft_mean_ms": r["ttft_ms"]["mean"], "ttft_p99_ms": r["ttft_ms"]["p99"]}))
'
