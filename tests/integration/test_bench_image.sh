#!/usr/bin/env bash
# test_bench_image.sh BENCH_IMAGE CORPUS_DIR — bench/bench_image --reps 2 (label unit) on the
# image fuzz seeds (every format), with and without pan-and-scan: it exits 0 and prints one
# JSON report with every file and its fields. Not a timing test: it only keeps the benchmark
# runnable (its numbers: docs/benchmarks.md, "Image preprocessing").
set -euo pipefail
bench=$1
corpus=$2
fail() { echo "FAIL: $*" >&2; exit 1; }
py=${INFERD_PYTHON:-python3}
command -v "$py" >/dev/null 2>&1 || { echo "SKIPPED: no Python ($py) to read the report"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
files=("$corpus"/*.png "$corpus"/*.jpg "$corpus"/*.webp "$corpus"/*.gif)
for mode in plain pas; do
    args=(--reps 2)
    [ "$mode" = pas ] && args+=(--pan-and-scan)
    rc=0
    "$bench" "${args[@]}" "${files[@]}" > "$tmp/$mode" 2> "$tmp/err" || rc=$?
    [ "$rc" = 0 ] || { cat "$tmp/err" >&2; fail "bench_image $mode exited with $rc"; }
    "$py" - "$tmp/$mode" "${#files[@]}" <<'PY' || { cat "$tmp/$mode" >&2; fail "report"; }
import json, sys
r = json.load(open(sys.argv[1]))
assert r["bench"] == "image" and r["reps"] == 2 and r["size"] == [896, 896], r
assert len(r["files"]) == int(sys.argv[2]), len(r["files"])
for f in r["files"]:
    assert f["format"] in ("png", "jpeg", "webp", "gif") and f["width"] > 0, f
    assert f["pictures"] == 1 or (r["pan_and_scan"] and f["pictures"] > 1), f
    for k in ("decode_ms", "resize_ms", "normalize_ms"):
        assert 0 <= f[k]["min"] <= f[k]["median"], (f["file"], k, f[k])
print("ok: %d files" % len(r["files"]))
PY
done
