#!/usr/bin/env bash
# test_image_vs_transformers.sh IMAGE_PREP — the CTest entry of test_image_vs_transformers.py.
# Runs it with the test venv's Python; skips (exit 77) without one, or without Pillow and
# transformers in it (deploy/install-deps.sh installs both; no torch is needed).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
IFD_PY_MODULES="numpy PIL transformers"
. "$here/../tools/test_python.sh"
exec "$py" "$here/test_image_vs_transformers.py" "$@"
