#!/usr/bin/env bash
# test_dequant_vs_gguf.sh DEQUANT_DUMP — the CTest entry of test_dequant_vs_gguf.py.
# Runs it with the test venv's Python ($INFERD_PYTHON, which test.sh sets; else the
# default venv of deploy/install-deps.sh); skips (exit 77) without one.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
py=${INFERD_PYTHON:-}
if [ -z "$py" ]; then
    venv=${INFERD_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/inferd/venv}
    [ -x "$venv/bin/python" ] && py=$venv/bin/python
fi
if [ -z "$py" ] || [ ! -x "$(command -v "$py" 2>/dev/null || true)" ]; then
    echo "SKIPPED: no test Python (set INFERD_PYTHON or run deploy/install-deps.sh)" >&2
    exit 77
fi
exec "$py" "$here/test_dequant_vs_gguf.py" "$@"
