#!/usr/bin/env bash
# test_bench_stream.sh BENCH_MEMBW BENCH_QSTREAM — the two read-bandwidth benchmarks of issue 30
# (label unit) on small sizes: each exits 0 and prints one JSON report with its fields, every
# path and type it was asked for, positive rates; bad options are refused with status 2. Not a
# timing test: it only keeps the benchmarks runnable (their numbers: docs/benchmarks.md,
# "Latest run, realistic sizes and three engines").
set -euo pipefail
membw=$1
qstream=$2
fail() { echo "FAIL: $*" >&2; exit 1; }
py=${INFERD_PYTHON:-python3}
command -v "$py" >/dev/null 2>&1 || { echo "SKIPPED: no Python ($py) to read the reports"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$membw" --threads 2 --mib 8 --rounds 3 > "$tmp/membw" || fail "bench_membw exited with $?"
"$qstream" --gib 0.02 --rounds 2 --types Q4_K,Q6_K --prefetch 2048,0 --split 2 > "$tmp/qstream" ||
    fail "bench_qstream exited with $?"
"$py" - "$tmp/membw" "$tmp/qstream" <<'PY' || fail "reports"
import json, sys
m = json.load(open(sys.argv[1]))
assert m["bench"] == "membw" and m["threads"] == 2 and m["mib"] == 8, m
assert len(m["rounds_gb_s"]) == 3 and all(x > 0 for x in m["rounds_gb_s"]), m
assert 0 < m["read_gb_s"] <= m["best_gb_s"] and m["pool_read_gb_s"] > 0, m
q = json.load(open(sys.argv[2]))
assert q["bench"] == "qstream" and q["m"] == 1, q
paths = {"avx2", "avx512"} if q["isa"] == "avx512vnni" else {"avx2"}
got = {(r["type"], r["path"], r["prefetch"]) for r in q["results"]}
want = {(t, p, d) for t in ("Q4_K", "Q6_K") for p in paths for d in (2048, 0)}
assert got == want, (got, want)
for r in q["results"]:
    assert r["bytes"] > 0.02 * 2**30 and r["gb_s"] > 0 and len(r["rounds_ms"]) == 2, r
PY
for bad in "--threads 0" "--isa nope" "--mib"; do
    rc=0; "$membw" $bad >/dev/null 2>&1 || rc=$?
    [ "$rc" = 2 ] || fail "bench_membw $bad: status $rc, not 2"
done
for bad in "--m 0" "--gib 0" "--rounds"; do
    rc=0; "$qstream" $bad >/dev/null 2>&1 || rc=$?
    [ "$rc" = 2 ] || fail "bench_qstream $bad: status $rc, not 2"
done
echo "ok: bench_membw and bench_qstream reports"
