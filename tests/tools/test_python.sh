# test_python.sh — sourced by the shell entries of Python tests: sets $py to
# the test venv's Python ($INFERD_PYTHON, which test.sh sets; else the venv of
# deploy/install-deps.sh at $INFERD_VENV or ~/.cache/inferd/venv), or exits 77
# with "SKIPPED: …" when there is none.
#   IFD_PY_FALLBACK=python3  accept the system python3 when no venv exists
#                            (tests that need only the standard library)
#   IFD_PY_MODULES="a b"     skip unless these modules import
py=${INFERD_PYTHON:-}
if [ -z "$py" ]; then
    ifd_venv=${INFERD_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/inferd/venv}
    if [ -x "$ifd_venv/bin/python" ]; then
        py=$ifd_venv/bin/python
    else
        py=${IFD_PY_FALLBACK:-}
    fi
fi
if [ -z "$py" ] || ! command -v "$py" >/dev/null 2>&1; then
    echo "SKIPPED: no test Python (set INFERD_PYTHON or run deploy/install-deps.sh)" >&2
    exit 77
fi
for ifd_mod in ${IFD_PY_MODULES:-}; do
    if ! "$py" -c "import $ifd_mod" 2>/dev/null; then
        echo "SKIPPED: $ifd_mod is not installed in $py (run deploy/install-deps.sh)" >&2
        exit 77
    fi
done
