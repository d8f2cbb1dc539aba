#!/usr/bin/env bash
# The one test command: configure, build and run every test.
#
#   ./test.sh              all tests (unit, model, gpu — gpu ones skip without a device)
#   ./test.sh -L unit      extra arguments go to ctest (here: only the unit label)
#
# Three builds: build-asan (address+undefined sanitizers: every test but the
# slow ones and those ASAN_EXCLUDE names, the daemon and worker processes of
# the integration tests sanitized too), build-tsan (thread sanitizer: the KV
# pool, thread pool, engine and threaded-kernel tests) and build (the normal build, every
# test). CTest's summary of the normal build is the last thing printed.
# Each ctest runs -j$JOBS: tests that use both cores (model, daemon, thread
# pool: PROCESSORS 2 in tests/CMakeLists.txt) run alone, one-thread tests two
# at a time.
# Environment: BUILD_DIR, ASAN_DIR, TSAN_DIR (default build, build-asan,
# build-tsan), JOBS (build and ctest jobs, default nproc), CI (warnings
# become errors), INFERD_VENV (the Python test tools, see deploy/install-deps.sh),
# INFERD_OFFLINE=1 (do not fetch the models: the model tests then skip, loudly).
# The models the tests need (the default SmolLM2 and Gemma 3 270M) are fetched
# first (deploy/fetch-model.sh: nothing to do when they are present and verified).
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

if [ "${INFERD_OFFLINE:-0}" != 1 ]; then
    for m in smollm2 gemma3; do
        bash deploy/fetch-model.sh "$m" || {
            echo "test.sh: fetching the model '$m' failed (set INFERD_OFFLINE=1 to run without it:" \
                 "its tests skip)" >&2
            exit 1
        }
    done
fi

# ---- ASan+UBSan: every unit and integration test, but those listed here -------------------
# (ctest -E). Tests see INFERD_TEST_SANITIZED=1 (tests/CMakeLists.txt): the oracle comparisons
# run one prompt of 16 tokens, test_engine_model 4 short requests, test_worker_generate one
# --no-kv-cache prompt of 8 tokens, test_daemon_structured one choice per request,
# test_daemon_spec its first prompts without the SIGKILL cases — every code
# path of each, sanitized, in CI's time; the normal build below runs their full sets.
# Left out (docs/reliability.md, "Sanitizers"):
#   slow label         fault/load/soak/fuzz runs (minutes each, timed by the clock: they run in
#                      the normal build; their daemon paths run sanitized in test_daemon_crash
#                      and test_daemon_robust, tests/fuzz/run.sh's libFuzzer binaries are
#                      ASan+UBSan themselves, test_kvpool_repeat is test_kvpool 20 times)
#   test_bench_*, test_cli_bench  benchmark runs, not correctness tests (the bench client's
#                      code runs sanitized in test_cli_fake)
#   test_oracle_gemma3 Gemma 3 with f32 weights: its model code runs sanitized in
#                      test_oracle_gemma3_q, the f32 kernels in test_oracle
#   test_engine_draft  the draft model against plain decoding on SmolLM2, 16 requests in
#                      many configurations (minutes under ASan): spec_draft.c runs sanitized
#                      in test_spec_draft (tiny random models) and test_daemon_spec's draft
#                      daemon
#   test_daemon_crash_q8_0, _q4_0  crash-resume with quantized KV: the resume path runs
#                      sanitized in test_daemon_crash, the quantized blocks in
#                      test_engine_model_q8_0/_q4_0 and test_cpu_attention
#   *_emu (CUDA off)   the CUDA emulator's fibers switch stacks with _longjmp, which ASan
#                      cannot follow; the *_avx2 and *_scalar reruns of the kernel tests do run
#   test_daemon_langchain  a client's compatibility (langchain-openai's request shapes and
#                      its parsing of the answers): the daemon paths it drives (chat, streams,
#                      forced and required tools, json_schema, tool messages, Responses) run
#                      sanitized in test_daemon_openai, _structured and _responses, the
#                      request parser under libFuzzer (fuzz_openai); 20 s of CI's ASan run
#   *_avx512emu        on a CPU with AVX-512 (this one and CI's) the native run is the
#                      AVX-512 path itself, sanitized; the emulated rerun adds only the
#                      emulation header's code (the normal build runs it)
ASAN_EXCLUDE='test_cli_bench|test_bench_.*|test_oracle_gemma3|test_engine_draft|test_daemon_crash_q8_0|test_daemon_crash_q4_0'
ASAN_EXCLUDE+='|test_daemon_langchain'
# The ASan build leaves out what only those tests (and the slow ones) run: the benchmark
# programs (bench/; bench_engine stays, test_gpu_vs_hf_tiny's fallback when its daemon
# cannot run), test_engine_draft, test_kvpool_repeat and, where the _avx512emu tests are out,
# their binaries and the kernels built again against the emulation header
# (ifd_kernels_avx512emu): 55 of its 362 build steps, the kernels' among them (2026-12-06).
ASAN_SKIP_BUILD='bench/bench_[a-z0-9_]+|tests/test_engine_draft|tests/test_kvpool_repeat'
if grep -qw avx512f /proc/cpuinfo 2>/dev/null; then
    ASAN_EXCLUDE+='|.*_avx512emu'
    ASAN_SKIP_BUILD+='|tests/[a-z0-9_]+_avx512emu'
fi
ASAN_EXCLUDE="^($ASAN_EXCLUDE)\$"
ASAN_SKIP_BUILD="^($ASAN_SKIP_BUILD)\$"

# The files Ninja's `all` target of build folder $1 makes (libraries and programs), one a
# line: `all` and each folder's `DIR/all` expanded (ninja -t query).
ninja_all_files() {  # DIR
    local todo=(all) t f
    while [ ${#todo[@]} -gt 0 ]; do
        t=${todo[0]}
        todo=("${todo[@]:1}")
        while read -r f; do
            case $f in */all) todo+=("$f") ;; *) echo "$f" ;; esac
        done < <(ninja -C "$1" -t query "$t" |
                 awk '/^  input:/ { i = 1; next } /^  outputs:/ { i = 0 } i { print $NF }')
    done
}

# Sanitizer reports of every process (daemons and workers that a test kills and restarts
# included) go to files in a reports folder: any file there fails the run, whatever the
# tests said.
fail_on_reports() {  # DIR CTEST_RC
    if [ -n "$(ls -A "$1")" ]; then
        echo "test.sh: sanitizer reports in $1:" >&2
        for f in "$1"/*; do echo "---- $f" >&2; cat "$f" >&2; done
        exit 1
    fi
    [ "$2" -eq 0 ] || exit "$2"
}

echo "== sanitizer build ($ASAN_DIR): address,undefined =="
cmake -S . -B "$ASAN_DIR" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_C_FLAGS_DEBUG=-g -O1" \
      -DINFERD_SANITIZE=address,undefined -DINFERD_CUDA=OFF -DINFERD_TEST_HOOKS=ON >/dev/null
asan_targets=()
if [ ${#GEN[@]} -gt 0 ]; then
    while read -r f; do
        if [[ ! $f =~ $ASAN_SKIP_BUILD || $f == bench/bench_engine ]]; then asan_targets+=("$f"); fi
    done < <(ninja_all_files "$ASAN_DIR")
fi
# (without Ninja, or should the listing come back empty: everything)
cmake --build "$ASAN_DIR" -j "$JOBS" ${asan_targets[0]:+--target "${asan_targets[@]}"}
reports="$PWD/$ASAN_DIR/sanitizer-reports"
rm -rf "$reports" && mkdir -p "$reports"
rc=0
CK_TIMEOUT_MULTIPLIER=3 INFERD_TEST_TIMEOUT_SCALE=3 ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:log_path=$reports/asan" \
UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$reports/ubsan" \
    ctest --test-dir "$ASAN_DIR" -j "$JOBS" --output-on-failure -LE slow -E "$ASAN_EXCLUDE" || rc=$?
fail_on_reports "$reports" "$rc"

# ---- TSan: the KV pool from threads and processes, the thread pool, the engine -------------
# and the kernels that split work across the pool (the backend's projections, attention's
# split mode). test_worker_serve (the real model in a worker process, 80 s under TSan) left
# in 2026-12-02 to keep CI under 30 minutes: its threads are those of the pieces tested here.
TSAN_DIR=${TSAN_DIR:-build-tsan}
TSAN_TESTS=(test_kvpool test_kvdisk test_threadpool test_engine test_backend_cpu test_backend_cpu_q
            test_cpu_attention test_outcheck)
echo "== sanitizer build ($TSAN_DIR): thread =="
cmake -S . -B "$TSAN_DIR" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_C_FLAGS_DEBUG=-g -O1" \
      -DINFERD_SANITIZE=thread -DINFERD_CUDA=OFF -DINFERD_TEST_HOOKS=ON >/dev/null
cmake --build "$TSAN_DIR" -j "$JOBS" --target "${TSAN_TESTS[@]}"
reports="$PWD/$TSAN_DIR/sanitizer-reports"
rm -rf "$reports" && mkdir -p "$reports"
rc=0
regex="^($(IFS='|'; echo "${TSAN_TESTS[*]}"))\$"
CK_TIMEOUT_MULTIPLIER=3 INFERD_TEST_TIMEOUT_SCALE=3 TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:log_path=$reports/tsan" \
    ctest --test-dir "$TSAN_DIR" -j "$JOBS" --output-on-failure -R "$regex" || rc=$?
fail_on_reports "$reports" "$rc"

echo "== build ($BUILD_DIR) =="
cmake -S . -B "$BUILD_DIR" "${GEN[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DINFERD_TEST_HOOKS=ON >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS"
ctest --test-dir "$BUILD_DIR" -j "$JOBS" --output-on-failure "$@"
