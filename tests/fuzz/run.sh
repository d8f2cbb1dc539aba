#!/usr/bin/env bash
# run.sh SOURCE_DIR BUILD_DIR — builds the libFuzzer targets of tests/fuzz with
# clang (ASan + UBSan + libFuzzer) in BUILD_DIR and runs each for
# $INFERD_FUZZ_SECONDS (default 10: a CI smoke; longer by hand) starting from its committed corpus, $JOBS
# (default 2) targets at a time. New
# inputs go to a temporary directory, never into the source tree. A crash
# fails the test and prints the input's path: fix the bug, then add the input
# to tests/fuzz/corpus/<target>/ so the plain regression test keeps it.
# Skips (77) when clang or libFuzzer's runtime is missing.
set -euo pipefail
src=$1
build=$2
secs=${INFERD_FUZZ_SECONDS:-10}
targets=(http openai wire gguf safetensors tokenizer chat jinja image)

if ! command -v clang >/dev/null 2>&1; then
    echo "SKIPPED: clang is not installed (deploy/install-deps.sh installs it)"
    exit 77
fi
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
echo 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }' \
    > "$probe/p.c"
if ! clang -fsanitize=fuzzer "$probe/p.c" -o "$probe/p" 2>"$probe/err"; then
    echo "SKIPPED: clang cannot link libFuzzer: $(head -c 300 "$probe/err")"
    exit 77
fi

gen=()
command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
launcher=()
command -v ccache >/dev/null 2>&1 && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache)
# CI=true makes warnings errors in the main build; clang's differ from gcc's,
# so the fuzz tree is built without -Werror
CI= cmake -S "$src" -B "$build" "${gen[@]}" "${launcher[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER=clang -DINFERD_CUDA=OFF -DINFERD_FUZZ=ON \
    -DINFERD_SANITIZE=address,undefined >/dev/null
lf=()
for t in "${targets[@]}"; do lf+=("fuzz_${t}_lf"); done
cmake --build "$build" -j "${JOBS:-2}" --target "${lf[@]}"

# One target: its log and exit status go to $runs/$t.{log,rc}; new inputs to $runs/$t.d.
fuzz_one() {
    local t=$1 work=$runs/$1.d rc
    mkdir -p "$work"
    set +e
    (cd "$work" && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        "$build/tests/fuzz/fuzz_${t}_lf" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
        -error_exitcode=1 \
        -print_final_stats=1 "$work" "$src/tests/fuzz/corpus/$t") >"$runs/$t.log" 2>&1
    rc=$?
    set -e
    echo $rc >"$runs/$t.rc"
}

# libFuzzer runs one process on one core: $JOBS targets (default 2, CI's cores) run at once,
# each still for $secs, which halves the wall time of the seven on two cores.
jobs=${JOBS:-2}
runs=$(mktemp -d)
trap 'rm -rf "$probe" "$runs"' EXIT
echo "== ${#targets[@]} targets, ${secs}s each, $jobs at a time"
for t in "${targets[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
    fuzz_one "$t" &
done
wait

fail=0
for t in "${targets[@]}"; do
    log="$runs/$t.log"
    work="$runs/$t.d"
    rc=$(cat "$runs/$t.rc")
    echo "== fuzz_$t: ${secs}s"
    if [ "$rc" -eq 77 ] && grep -q '^SKIPPED:' "$log"; then
        grep '^SKIPPED:' "$log" | head -1
    elif [ "$rc" -ne 0 ]; then
        tail -60 "$log"
        crash=$(ls "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-* 2>/dev/null | head -1 || true)
        echo "fuzz_$t FAILED (rc $rc); input kept: ${crash:-none} — add it to tests/fuzz/corpus/$t/ once fixed"
        [ -n "$crash" ] && cp "$crash" "$build/" && echo "copied to $build/$(basename "$crash")"
        fail=1
    else
        echo "fuzz_$t: ok, $(grep -E '^stat::(number_of_executed_units|new_units_added)' "$log" |
            tr -s ' \n' ' ' || true)"
    fi
done
exit $fail
