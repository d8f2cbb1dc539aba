#!/usr/bin/env bash
# test_dequant_vs_gguf.sh DEQUANT_DUMP — the CTest entry of test_dequant_vs_gguf.py.
# Runs it with the test venv's Python ($INFERD_PYTHON, which test.sh sets; else the
# default venv of deploy/install-deps.sh); skips (exit 77) without one.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../tools/test_python.sh"
exec "$py" "$here/test_dequant_vs_gguf.py" "$@"
