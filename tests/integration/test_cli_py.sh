#!/usr/bin/env bash
# test_cli_py.sh SCRIPT.py ARGS... — the CTest entry of the Python CLI tests
# (test_cli_fake.py, test_cli_daemon.py, test_cli_chat.py, test_cli_bench.py).
# They need only Python's standard library: the test venv's Python ($INFERD_PYTHON,
# which test.sh sets, else the default venv) or else python3; skips (77) without any.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
script=$1
shift
py=${INFERD_PYTHON:-}
if [ -z "$py" ]; then
    venv=${INFERD_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/inferd/venv}
    if [ -x "$venv/bin/python" ]; then py=$venv/bin/python; else py=python3; fi
fi
if ! command -v "$py" >/dev/null 2>&1; then
    echo "SKIPPED: no Python for $script (set INFERD_PYTHON or install python3)" >&2
    exit 77
fi
exec "$py" "$here/$script" "$@"
