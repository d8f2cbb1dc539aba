#!/usr/bin/env bash
# test_chat_template_conformance.sh [--models] JINJA_RENDER — the CTest entry of
# test_chat_template_conformance.py (with --models: test_chat_template_models.py). Runs it with the test venv's Python
# ($INFERD_PYTHON, else the venv of deploy/install-deps.sh); skips (exit 77)
# without one or without jinja2 in it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
IFD_PY_MODULES=jinja2 . "$here/../tools/test_python.sh"
script=test_chat_template_conformance.py
if [ "${1:-}" = --models ]; then
    script=test_chat_template_models.py
    shift
fi
exec "$py" "$here/$script" "$@"
