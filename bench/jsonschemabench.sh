#!/usr/bin/env bash
# jsonschemabench.sh — JSON Schema coverage on JSONSchemaBench, inferd beside
# llguidance and xgrammar (bench/jsonschemabench.py does the work and prints one
# JSON object; docs/structured-outputs.md, "JSON Schema", has the figures).
#
#   bench/jsonschemabench.sh [--build DIR] [--data DIR] [jsonschemabench.py options…]
#
# The data set: --data DIR (one folder per data set) or --maskbench DIR (the repository's
# maskbench/data: 11,306 wrapped schemas, 21 data sets), else $INFERD_JSONSCHEMABENCH, else
# ~/.cache/inferd/jsonschemabench/maskbench/data when it is there (--maskbench), else
# ~/.cache/inferd/jsonschemabench/data (git clone github.com/guidance-ai/jsonschemabench;
# nothing is downloaded here). The peers live in their own venv, $INFERD_JSB_VENV, else
# ${XDG_CACHE_HOME:-~/.cache}/inferd/jsonschemabench-venv (created on the first run from
# PyPI: jsonschema with its format checkers, regex (patterns with a time limit), llguidance,
# xgrammar; xgrammar imports torch:
# PyTorch's CPU wheel when its index is reachable, else PyPI's torch that xgrammar pulls
# in (about 5.6 GB with its CUDA libraries); where neither installs, xgrammar is reported
# under "unavailable"). inferd is measured with DIR/bench/bench_schema (default DIR:
# build/ of this checkout; built if missing). Timings are only meaningful on a quiet
# machine. Exit status: that of jsonschemabench.py (1 when an output is invalid).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build="$root/build"
pass=()
while [ $# -gt 0 ]; do
    case "$1" in
        --build) build=$2; shift 2 ;;
        *) pass+=("$1"); shift ;;
    esac
done
venv="${INFERD_JSB_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/inferd/jsonschemabench-venv}"
mb="${XDG_CACHE_HOME:-$HOME/.cache}/inferd/jsonschemabench/maskbench/data"
case " ${pass[*]:-} " in
    *" --data "* | *" --maskbench "*) ;;
    *) if [ -z "${INFERD_JSONSCHEMABENCH:-}" ] && [ -d "$mb" ]; then pass+=(--maskbench "$mb"); fi ;;
esac
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q jsonschema rfc3987 fqdn isoduration rfc3339-validator regex \
        llguidance
    "$venv/bin/pip" install -q torch --index-url https://download.pytorch.org/whl/cpu ||
        echo "jsonschemabench: no CPU torch index (xgrammar brings PyPI's torch)" >&2
    "$venv/bin/pip" install -q xgrammar ||
        echo "jsonschemabench: xgrammar not installed (reported as unavailable)" >&2
fi
[ -x "$build/bench/bench_schema" ] || cmake --build "$build" --target bench_schema
exec "$venv/bin/python" "$here/jsonschemabench.py" --bench-schema "$build/bench/bench_schema" \
    --peer-python "$venv/bin/python" "${pass[@]+"${pass[@]}"}"
