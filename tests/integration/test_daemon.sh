#!/usr/bin/env bash
# test_daemon.sh KIND ARGS... — runs tests/integration/test_daemon_KIND.py
# (http, openai, tokens, crash, robust, fair, faults, load, hostile, structured,
# responses, owners, langchain, systemd, gpu_emu, ops, images, spec, …) with the test
# Python ($INFERD_PYTHON, else python3). Each Python file starts its own inferd
# processes on temporary sockets and skips (exit 77) loudly when the default
# model is absent; the kinds in needs_openai below and `structured`, `langchain`
# also need the venv's packages (openai, httpx, pydantic, jsonschema,
# langchain-openai).
# INFERD_BIN_DIR=DIR (a build directory, e.g. build-asan) makes the tests drive
# DIR's inferd and inferd-worker instead of the ones given (CTest passes its own
# build's: in build-asan they are the sanitized ones already).
set -euo pipefail
kind=$1
shift
if [ -n "${INFERD_BIN_DIR:-}" ]; then
    args=()
    for a in "$@"; do
        case "$(basename "$a")" in
            inferd) args+=("$INFERD_BIN_DIR/daemon/inferd") ;;
            inferd-worker) args+=("$INFERD_BIN_DIR/worker/inferd-worker") ;;
            *) args+=("$a") ;;
        esac
    done
    set -- "${args[@]}"
fi
here=$(cd "$(dirname "$0")" && pwd)
py=${INFERD_PYTHON:-python3}
if ! command -v "$py" >/dev/null 2>&1; then
    echo "SKIPPED: no Python ($py) to drive the daemon tests"
    exit 77
fi
if [ "$kind" = structured ] && ! "$py" -c 'import openai, httpx, jsonschema' 2>/dev/null; then
    echo "SKIPPED: $py lacks the openai/httpx/jsonschema packages (deploy/install-deps.sh" \
         "installs them into the venv that test.sh exports as INFERD_PYTHON)"
    exit 77
fi
needs_openai=" openai tokens responses owners gpu_emu ops images spec vision "
if [ "${needs_openai#* $kind }" != "$needs_openai" ] &&
   ! "$py" -c 'import openai, httpx, pydantic' 2>/dev/null; then
    echo "SKIPPED: $py lacks the openai/httpx packages (deploy/install-deps.sh installs them" \
         "into the venv that test.sh exports as INFERD_PYTHON)"
    exit 77
fi
if [ "$kind" = langchain ] && ! "$py" -c 'import langchain_openai, httpx' 2>/dev/null; then
    echo "SKIPPED: $py lacks langchain-openai (deploy/install-deps.sh installs it into the" \
         "venv that test.sh exports as INFERD_PYTHON)"
    exit 77
fi
if { [ "$kind" = http ] || [ "$kind" = ops ]; } && ! command -v curl >/dev/null 2>&1; then
    echo "SKIPPED: curl is not installed"
    exit 77
fi
export PYTHONUNBUFFERED=1
exec "$py" "$here/test_daemon_$kind.py" "$@"
