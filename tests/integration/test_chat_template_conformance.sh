#!/usr/bin/env bash
# test_chat_template_conformance.sh [--models] JINJA_RENDER — the CTest entry of
# test_chat_template_conformance.py (with --models: test_chat_template_models.py). Runs it with the test venv's Python
# ($INFERD_PYTHON, else the venv of deploy/install-deps.sh); skips (exit 77)
# without one or without jinja2 in it.
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
if ! "$py" -c 'import jinja2' 2>/dev/null; then
    echo "SKIPPED: jinja2 is not installed in $py (run deploy/install-deps.sh)" >&2
    exit 77
fi
script=test_chat_template_conformance.py
if [ "${1:-}" = --models ]; then
    script=test_chat_template_models.py
    shift
fi
exec "$py" "$here/$script" "$@"
