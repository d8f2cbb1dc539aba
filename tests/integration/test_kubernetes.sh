#!/usr/bin/env bash
# test_kubernetes.sh SOURCE_DIR — runs test_kubernetes.py with the test Python
# ($INFERD_PYTHON, else python3); it skips (77) without PyYAML.
set -euo pipefail
py=${INFERD_PYTHON:-python3}
if ! command -v "$py" >/dev/null 2>&1; then
    echo "SKIPPED: no Python ($py) for the Kubernetes manifest check"
    exit 77
fi
exec "$py" "$(dirname "$0")/test_kubernetes.py" "$1"
