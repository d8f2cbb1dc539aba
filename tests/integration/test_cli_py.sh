#!/usr/bin/env bash
# test_cli_py.sh SCRIPT.py ARGS... — the CTest entry of the Python CLI tests
# (test_cli_fake.py, test_cli_daemon.py, test_cli_chat.py, test_cli_bench.py).
# They need only Python's standard library: the test venv's Python ($INFERD_PYTHON,
# which test.sh sets, else the default venv) or else python3; skips (77) without any.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
script=$1
shift
IFD_PY_FALLBACK=python3 . "$here/../tools/test_python.sh"
exec "$py" "$here/$script" "$@"
