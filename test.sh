#!/usr/bin/env bash
# The one test command: configure, build and run every test.
#
#   ./test.sh              all tests (unit, model, gpu — gpu ones skip without a device)
#   ./test.sh -L unit      extra arguments go to ctest (here: only the unit label)
#
# Two builds: build-asan (address+undefined sanitizers, the parsing and
# shared-memory tests) and build (the normal build, every test). CTest's
# summary of the normal build is the last thing printed.
# Environment: BUILD_DIR (default build), JOBS (default nproc), CI (warnings
# become errors), INFERD_VENV (the Python test tools, see deploy/install-deps.sh).
set -euo pipefail
cd "$(dirname "$0")"

BUILD_DIR=${BUILD_DIR:-build}
ASAN_DIR=${ASAN_DIR:-build-asan}
JOBS=${JOBS:-$(nproc)}
GEN=()
command -v ninja >/dev/null 2>&1 && GEN=(-G Ninja)

venv="${INFERD_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/inferd/venv}"
if [ -x "$venv/bin/python" ]; then
    export INFERD_PYTHON="$venv/bin/python"
else
    echo "test.sh: no Python venv at $venv (deploy/install-deps.sh makes it); Python tests will skip" >&2
fi

# Tests that also run under the sanitizers (fast, and where memory bugs hide).
ASAN_TESTS=(test_error test_arena test_utf8 test_gguf test_gguf_corrupt test_kvpool test_tokenizer test_chat_template test_jinja
            test_safetensors test_model_config
            test_proto_wire test_proto_openai test_proto_sse test_grammar test_grammar_mask
            test_threadpool test_cpu_kernels test_cpu_attention test_qmatmul test_hmatmul test_dequant test_sampler
            test_backend_cpu test_backend_cpu_q test_shape
            test_client_http test_client_api test_client_stats
            test_daemon_config test_httpframe
            fuzz_http fuzz_openai fuzz_wire fuzz_gguf fuzz_safetensors fuzz_tokenizer fuzz_chat)

echo "== sanitizer build ($ASAN_DIR) =="
cmake -S . -B "$ASAN_DIR" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Debug \
      -DINFERD_SANITIZE=address,undefined -DINFERD_CUDA=OFF >/dev/null
cmake --build "$ASAN_DIR" -j "$JOBS" --target "${ASAN_TESTS[@]}"
regex="^($(IFS='|'; echo "${ASAN_TESTS[*]}"))\$"
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir "$ASAN_DIR" --output-on-failure -R "$regex"

echo "== build ($BUILD_DIR) =="
cmake -S . -B "$BUILD_DIR" "${GEN[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS"
ctest --test-dir "$BUILD_DIR" --output-on-failure "$@"
