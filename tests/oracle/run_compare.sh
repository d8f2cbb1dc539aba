#!/usr/bin/env bash
# run_compare.sh WORKER [compare.py options] — the CTest entry of the oracle test.
# Picks the test venv's Python ($INFERD_PYTHON, which test.sh sets; else the default venv
# of deploy/install-deps.sh) and runs compare.py with it; skips (exit 77) without one.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../tools/test_python.sh"
exec "$py" "$here/compare.py" "$@"
