#!/usr/bin/env bash
# test_jsonschemabench.sh BENCH_SCHEMA — JSON Schema coverage on a fixed sample of
# JSONSchemaBench (label slow): bench/jsonschemabench.py --limit 20 --seed 1 (20 schemas
# from each of its 10 data sets, the same ones every run), inferd only. Asserts that the
# fraction accepted does not fall below FLOOR (what this tree accepts, less a margin; raise
# it when coverage grows) and that every text generated from an accepted schema (a random
# walk over its grammar, 2 per schema) that inferd's check at the end passes validates with
# the jsonschema package, and that the check refuses no valid one.
#
# The data set's repository carries no license, so no sample is committed here: the test
# reads $INFERD_JSONSCHEMABENCH, else $INFERD_TESTDATA_DIR/jsonschemabench/data, else
# ~/.cache/inferd/jsonschemabench/data (a clone of github.com/guidance-ai/jsonschemabench's
# data/), and says SKIPPED when none is there.
set -euo pipefail
bench=$1
FLOOR=0.995
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
fail() { echo "FAIL: $*" >&2; exit 1; }
data=${INFERD_JSONSCHEMABENCH:-}
for d in "$data" "${INFERD_TESTDATA_DIR:-/nonexistent}/jsonschemabench/data" \
         "$HOME/.cache/inferd/jsonschemabench/data"; do
    if [ -n "$d" ] && [ -d "$d" ]; then data=$d; break; fi
    data=""
done
if [ -z "$data" ]; then
    echo "SKIPPED: no JSONSchemaBench data (set INFERD_JSONSCHEMABENCH to a clone's data/;" \
         "github.com/guidance-ai/jsonschemabench)"
    exit 77
fi
py=${INFERD_PYTHON:-python3}
"$py" -c 'import jsonschema' 2>/dev/null ||
    { echo "SKIPPED: $py has no jsonschema package (deploy/install-deps.sh)"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rc=0
"$py" "$root/bench/jsonschemabench.py" --data "$data" --bench-schema "$bench" --limit 20 \
    --seed 1 --validate 20 --samples 2 --peers none --json "$tmp/report" > /dev/null \
    2> "$tmp/err" || rc=$?
[ -s "$tmp/report" ] || { cat "$tmp/err" >&2; fail "no report (exit $rc)"; }
"$py" - "$tmp/report" "$FLOOR" <<'PY' || fail "report"
import json, sys
r = json.load(open(sys.argv[1]))
floor = float(sys.argv[2])
v = r["validation"]
for f in v["failures"]:
    print("invalid output:", json.dumps(f))
got = r["all"]["inferd"]["fraction"]
print("accepted %d of %d (%.3f, floor %.2f; %d over-approximated); %d outputs of %d schemas "
      "validated: %d invalid answered, %d refused by the check (%d of them valid)"
      % (r["all"]["inferd"]["compiled"], r["all"]["total"], got, floor,
         r["all"]["inferd"]["approx"], v["samples"], v["schemas"], v["invalid"],
         v["rejected"] + v["false_rejections"], v["false_rejections"]))
assert r["all"]["total"] == 200, r["all"]
assert got >= floor, "coverage fell below the floor"
assert v["invalid"] == 0, "outputs inferd would answer with do not validate"
assert v["false_rejections"] == 0, "inferd's check refused valid outputs"
assert v["samples"] >= v["schemas"], "too few outputs generated"
PY
