#!/usr/bin/env bash
# tests/gpu/check.sh — the one-shot device check: build and run the CUDA
# tests, the kernel micro-benchmarks and the race against Hugging Face
# transformers (bench/gpu_vs_hf.py) on a lent GPU machine, within one
# 10-minute call, printing a results table last. docs/gpu-status.md says how
# to call it through the device tool; tests/gpu/README.md what it runs.
#
#   tests/gpu/check.sh             on the GPU machine
#   tests/gpu/check.sh --prepare   here (needs apt-get + network): unpack the
#                                  Debian libraries tier B needs into .gpu-deps/
#   tests/gpu/check.sh --dry-run   list what would run, with its time limits
#   tests/gpu/check.sh --emu       the same flow on this CPU: tier A against the
#                                  kernel emulator (tests/gpu/emu), tier B's
#                                  tests and the race (--tiny --cpu) from an
#                                  existing CMake build (CMAKE_BUILD, default build/)
#   --quick                        with --emu: a small subset (the CI test)
#   --plan                         with --emu: write tier A's whole build.ninja
#                                  and check its graph (ninja -n: every input
#                                  exists or has a rule), build nothing, exit
#   --no-race                      skip bench/gpu_vs_hf.py
#
# Two tiers, because the device machine has nvcc, cmake, ninja, a C compiler
# and python3 with PyTorch and transformers, but none of the project's Debian
# libraries (libuv, jansson, pcre2, xxhash, msgpack, check, http-parser,
# systemd) and no network:
#  A  libc only, a generated build.ninja: the kernel tests (test_gpu_attention,
#     _fused, _dequant, _sample, _vision) and bench_gpu_kernels. Headers of the Debian
#     libraries are poisoned (#error) in this build, so a tier-A source that
#     starts to need one fails here, in --emu and in CI, not on the device.
#  B  the CMake project (INFERD_CUDA=ON) against the libraries carried in
#     .gpu-deps/ (made by --prepare here, named in the run's carry list),
#     built in the background while tier A runs: every CTest test labelled
#     gpu that tier A does not run (test_gpu_device, test_gpu_kvpool,
#     test_backend_cuda — the CUDA backend end to end vs the CPU backend —
#     and whatever GPU tests are registered later), then inferd-worker and
#     bench_engine for the race (building either builds the CUDA backend
#     module $CB/lib/inferd/libinferd-cuda.so, which they dlopen from
#     <their dir>/../lib/inferd: worker/cuda_module.h). Without .gpu-deps
#     tier B is reported as NOT BUILT and tier A still runs.
#
# Limits (seconds; environment overrides): each test TEST_TIMEOUT=90, the
# kernel benchmark BENCH_TIMEOUT=120, the race RACE_TIMEOUT=200, each build
# BUILD_TIMEOUT=240, and the whole script BUDGET=480: a step never runs past
# the budget (it is cut to what is left and reported TIMEOUT, or NOT RUN).
#
# $OUT (the device tool's output folder; at most 8 files come back): every
# step's log is appended to $OUT/steps.log the moment the step ends, and
# $OUT/table.txt (the results table so far), $OUT/logs.tgz (all logs) and the
# JSON results (bench_gpu_kernels.json, gpu_vs_hf.json) are rewritten then too,
# so a run cut short still returns everything up to that point.
#
# Other environment: NVCC (default nvcc on PATH, else /usr/local/cuda/bin/nvcc;
# CUDA_HOME is resolved through links with readlink -f), CC (cc), CXX (c++,
# --emu), CUDA_ARCH (e.g. 90; default from nvidia-smi, else "80 90"), BUILD
# (build-gpu-check, or build-gpu-check-emu), GPU_DEPS (.gpu-deps), JOBS
# (nproc), PYTHON (python3; --emu: the test venv's when it exists), COMMIT (the
# commit the table names; default git's, and the device copy may have no .git).
# Exit status: 0 when every step passed or skipped, 1 otherwise, 2 bad usage.
set -uo pipefail
{ # the whole script is one compound command: bash reads it all before it runs
cd "$(dirname "$0")/../.."
ROOT=$PWD
T_START=$(date +%s)

MODE=device QUICK=0 DRY=0 PREPARE=0 RACE=1 PLAN=0
for a in "$@"; do
    case $a in
        --emu) MODE=emu ;;
        --quick) QUICK=1 ;;
        --plan) PLAN=1 ;;
        --dry-run | -n) DRY=1 ;;
        --prepare) PREPARE=1 ;;
        --no-race) RACE=0 ;;
        -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "check.sh: unknown option '$a' (see --help)" >&2; exit 2 ;;
    esac
done
if [ $QUICK = 1 ] && [ $MODE != emu ]; then
    echo "check.sh: --quick is for --emu (the device run is always the whole check)" >&2
    exit 2
fi

TEST_TIMEOUT=${TEST_TIMEOUT:-90}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-120}
RACE_TIMEOUT=${RACE_TIMEOUT:-200}
BUILD_TIMEOUT=${BUILD_TIMEOUT:-240}
BUDGET=${BUDGET:-480}
JOBS=${JOBS:-$(nproc)}
CC=${CC:-cc}
CXX=${CXX:-c++}
DEPS=${GPU_DEPS:-$ROOT/.gpu-deps}
if [ $MODE = emu ]; then
    B=${BUILD:-$ROOT/build-gpu-check-emu}
    CB=${CMAKE_BUILD:-$ROOT/build}
    venv=${INFERD_PYTHON:-${INFERD_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/inferd/venv}/bin/python}
    [ -x "$venv" ] || venv=python3
    PYTHON=${PYTHON:-$venv}
else
    B=${BUILD:-$ROOT/build-gpu-check}
    CB=$B/cmake
    PYTHON=${PYTHON:-python3}
fi
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
CUDA_HOME=""
[ -x "$NVCC" ] && CUDA_HOME=$(dirname "$(dirname "$(readlink -f "$NVCC")")")

# ---- what runs ------------------------------------------------------------------------
KERNELS=(device attn_decode attn_prefill rmsnorm rope_kv glu convert embed dequant sample vision)
CREFS=(common/error.c common/log.c common/modelfile/ggml_types.c kernels/kernels.c kernels/cpu/fp16.c
       kernels/cpu/dequant.c kernels/cpu/threadpool.c kernels/cpu/attention.c kernels/cpu/attention_q.c
       kernels/cpu/norm.c kernels/cpu/rope.c kernels/cpu/activations.c kernels/cpu/matmul.c
       kernels/cpu/vision.c
       tests/gpu/gpu_test.c)
TESTS_A=(test_gpu_attention test_gpu_fused test_gpu_dequant test_gpu_sample test_gpu_vision)
BENCH_ARGS=() BENCH=1
if [ $MODE = emu ]; then
    BENCH_ARGS=(--quick)
    # the quick subset (CI): one cheap emulated kernel test and only the kernels
    # it links, no benchmark; the whole of them runs in CTest as test_gpu_*_emu
    if [ $QUICK = 1 ]; then
        TESTS_A=(test_gpu_dequant)
        KERNELS=(device dequant)
        BENCH=0
    fi
fi
# Headers of the Debian libraries the device lacks: tier A must need none.
POISON=(jansson.h uv.h pcre2.h xxhash.h msgpack.h check.h http_parser.h systemd/sd-daemon.h
        editline/readline.h)
RACE_ARGS=()
[ $MODE = emu ] && RACE_ARGS=(--tiny --cpu)
# The tier-B CMake targets besides the gpu-labelled tests (found by ctest -N -L gpu).
TARGETS_B=(inferd-worker bench_engine inferd infer)

# ---- --prepare (here, not on the device) ---------------------------------------------------
# The runtime and -dev packages of every library the CMake project needs, and
# pkgconf, unpacked (dpkg -x) into $DEPS: headers, .so files and .pc files
# (used there with PKG_CONFIG_SYSROOT_DIR). Debian bookworm x86-64 builds;
# they need glibc >= 2.36 there.
DEBS=(libjansson-dev libjansson4 libxxhash-dev libxxhash0 libpcre2-dev libpcre2-8-0
      libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 libuv1-dev libuv1 libmsgpack-dev
      libmsgpackc2 check libsubunit-dev libsubunit0 libsystemd-dev libsystemd0
      libhttp-parser-dev libhttp-parser2.9 pkgconf-bin libpkgconf3)
if [ $PREPARE = 1 ]; then
    command -v apt-get > /dev/null && command -v dpkg > /dev/null ||
        { echo "check.sh --prepare: needs apt-get and dpkg (Debian)" >&2; exit 1; }
    tmp=$(mktemp -d)
    if ! (cd "$tmp" && apt-get download -q "${DEBS[@]}") > "$tmp/apt.log" 2>&1; then
        cat "$tmp/apt.log" >&2
        echo "check.sh --prepare: apt-get download failed" >&2
        rm -rf "$tmp"
        exit 1
    fi
    rm -rf "$DEPS"
    mkdir -p "$DEPS"
    for f in "$tmp"/*.deb; do dpkg -x "$f" "$DEPS"; done
    rm -rf "$tmp"
    if [ -d "$DEPS/lib" ]; then # merged /usr: one library directory
        cp -a "$DEPS/lib/." "$DEPS/usr/lib/"
        rm -rf "$DEPS/lib"
    fi
    rm -rf "$DEPS/usr/share/doc" "$DEPS/usr/share/man" "$DEPS/usr/share/lintian"
    find "$DEPS" -name '*.a' ! -name 'libcheck*.a' -delete # check ships only static
    echo "check.sh --prepare: $(du -sh "$DEPS" | cut -f1) in $DEPS (${#DEBS[@]} packages)"
    c=$(git -C "$ROOT" rev-parse --short HEAD 2> /dev/null || echo HASH)
    echo "carry it: run(command=\"COMMIT=$c bash tests/gpu/check.sh\"," \
         "carry=[\"$(basename "$DEPS")\"], timeout_s=540) — see docs/gpu-status.md"
    exit 0
fi

HAVE_DEPS=0
[ -x "$DEPS/usr/bin/pkgconf" ] && [ -f "$DEPS/usr/include/jansson.h" ] && HAVE_DEPS=1

# ---- --dry-run ------------------------------------------------------------------------------
if [ $DRY = 1 ]; then
    echo "check.sh --dry-run: mode $MODE$([ $QUICK = 1 ] && echo ' (quick)'), budget ${BUDGET}s"
    echo "  nvcc: $NVCC (CUDA_HOME ${CUDA_HOME:-none})"
    echo "tier A (libc only, $B/build.ninja, poisoned: ${POISON[*]}):"
    echo "  build: kernels ${KERNELS[*]} ($([ $MODE = emu ] && echo "as C++ on the emulator" || echo nvcc))," \
         "limit ${BUILD_TIMEOUT}s"
    for t in "${TESTS_A[@]}"; do echo "  test  $t (limit ${TEST_TIMEOUT}s)"; done
    [ $BENCH = 1 ] && echo "  bench bench_gpu_kernels ${BENCH_ARGS[*]} (limit ${BENCH_TIMEOUT}s)"
    if [ $MODE = emu ]; then
        echo "tier B (the CMake build $CB, not rebuilt):"
    else
        echo "tier B (cmake -DINFERD_CUDA=ON in $CB against $DEPS: $([ $HAVE_DEPS = 1 ] && echo present ||
              echo 'MISSING, run --prepare here and carry it'), limit ${BUILD_TIMEOUT}s):"
    fi
    if [ -f "$CB/CTestTestfile.cmake" ]; then
        for t in $(ctest --test-dir "$CB" -N -L '^gpu$' 2>/dev/null | sed -n 's/^ *Test *#[0-9]*: //p'); do
            case " ${TESTS_A[*]} test_gpu_attention test_gpu_fused test_gpu_dequant test_gpu_sample test_gpu_vision " in
                *" $t "*) ;;
                *) echo "  test  $t (limit ${TEST_TIMEOUT}s)" ;;
            esac
        done
    else
        echo "  test  every CTest test labelled gpu not in tier A (listed once configured)" \
             "(limit ${TEST_TIMEOUT}s each)"
    fi
    echo "  build ${TARGETS_B[*]}"
    if [ $RACE = 1 ] && [ $QUICK = 0 ]; then
        echo "race: $PYTHON bench/gpu_vs_hf.py ${RACE_ARGS[*]} --build $CB (limit ${RACE_TIMEOUT}s)"
    else
        echo "race: not run"
    fi
    echo "then the results table (also \$OUT/table.txt)"
    exit 0
fi

# ---- helpers ----------------------------------------------------------------------------------
# The device copy of the tree may have no .git: the caller passes COMMIT then.
if [ -z "${COMMIT:-}" ]; then
    if COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2> /dev/null); then
        git -C "$ROOT" diff --quiet HEAD 2> /dev/null || COMMIT="$COMMIT (+ uncommitted changes)"
    else
        COMMIT="unknown (no .git here: pass COMMIT=<hash>)"
    fi
fi
export COMMIT
mkdir -p "$B/logs" "$B/obj"
rm -f "$B"/logs/*.log "$B/bench_gpu_kernels.json" "$B/gpu_vs_hf.json"
STATUS=0
ROWS=()
BUILD_A_S=-
left() { echo $(( BUDGET - ($(date +%s) - T_START) )); }
row() { ROWS+=("$(printf '%-24s %-10s %5s  %s' "$1" "$2" "$3" "$4")"); }

# limit SECONDS: the smaller of SECONDS and what the budget leaves (10 s kept
# for the table); 0 when nothing is left.
limit() {
    local l=$(( $(left) - 10 ))
    [ "$l" -lt 0 ] && l=0
    [ "$1" -lt "$l" ] && l=$1
    echo "$l"
}

# publish LOG...: append the logs to $OUT/steps.log, refresh the copies there.
publish() {
    [ -n "${OUT:-}" ] && [ -d "$OUT" ] || return 0
    local f
    for f in "$@"; do
        [ -f "$f" ] || continue
        { echo "===== $(basename "$f") (t+$(( $(date +%s) - T_START ))s)"; tail -n 400 "$f"; } \
            >> "$OUT/steps.log"
    done
    for f in bench_gpu_kernels.json gpu_vs_hf.json; do
        [ -f "$B/$f" ] && cp "$B/$f" "$OUT/$f.tmp" && mv "$OUT/$f.tmp" "$OUT/$f"
    done
    tar -C "$B" -czf "$OUT/logs.tgz.tmp" logs 2> /dev/null && mv "$OUT/logs.tgz.tmp" "$OUT/logs.tgz"
    table > "$OUT/table.txt.tmp" 2>&1 && mv "$OUT/table.txt.tmp" "$OUT/table.txt"
}

# run_test NAME CMD...: one test under its time limit, its log published at once
# (a CTest script test runs through ctest, which reports a skip as "***Skipped").
run_test() {
    local name=$1 lim log=$B/logs/$1.log t0 rc dt summary res
    shift
    lim=$(limit "$TEST_TIMEOUT")
    if [ "$lim" -le 0 ]; then
        row "$name" "NOT RUN" - "out of time (budget ${BUDGET}s)"
        STATUS=1
        return
    fi
    echo "== $name (limit ${lim}s)"
    t0=$(date +%s)
    timeout -k 5 "$lim" "$@" > "$log" 2>&1
    rc=$?
    [ $rc -eq 0 ] && grep -q '\*\*\*Skipped' "$log" && rc=77
    dt=$(( $(date +%s) - t0 ))
    grep -E "^(ok|FAIL|  FAIL)|passed|SKIPPED" "$log" | tail -n 30
    summary=$(grep -E "passed, [0-9]+ failed|^[0-9]+%: Checks" "$log" | tail -n1 | sed 's/^[^:]*: //')
    case $rc in
        0) res=PASS ;;
        77) res=SKIP; summary=$(grep -m1 -i skipped "$log") ;;
        124 | 137) res=TIMEOUT; summary="killed after ${lim}s"; STATUS=1 ;;
        *) res="FAIL($rc)"; STATUS=1 ;;
    esac
    row "$name" "$res" "${dt}s" "$summary"
    publish "$log"
}

table() {
    echo
    echo "==================== GPU check ($MODE$([ $QUICK = 1 ] && echo ', quick'), $(date -u +%Y-%m-%dT%H:%MZ)) ===================="
    if [ $MODE = emu ]; then
        echo "device: the CPU emulator (tests/gpu/emu): correctness only, no speed"
    else
        echo "device: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2> /dev/null |
                         head -n1 || echo unknown)"
    fi
    echo "commit: $COMMIT"
    echo "tier A build: ${BUILD_A_S}s, arch ${CUDA_ARCH:-emu}; tier B: ${TIER_B_NOTE:-not started}"
    echo
    printf '%-24s %-10s %6s  %s\n' step result time summary
    local r
    for r in "${ROWS[@]}"; do echo "$r"; done
    echo
    "$PYTHON" "$ROOT/tests/gpu/check_table.py" "$B/bench_gpu_kernels.json" "$B/gpu_vs_hf.json" 2>&1 ||
        python3 "$ROOT/tests/gpu/check_table.py" "$B/bench_gpu_kernels.json" "$B/gpu_vs_hf.json"
    echo
    echo "total $(( $(date +%s) - T_START ))s of ${BUDGET}s; overall: $([ $STATUS = 0 ] && echo OK || echo FAILED)"
}

# ---- tier A: build ------------------------------------------------------------------------------
if [ $MODE = device ]; then
    if [ ! -x "$NVCC" ]; then
        echo "check.sh: no nvcc at $NVCC (set NVCC)" >&2
        exit 1
    fi
    if [ -z "${CUDA_ARCH:-}" ]; then
        CUDA_ARCH=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2> /dev/null |
                    head -n1 | tr -d ' .')
    fi
    CUDA_ARCH=${CUDA_ARCH:-80 90}
fi
GENCODE="" ARCHS_B="" # tier A's nvcc flags; tier B's CMAKE_CUDA_ARCHITECTURES (this GPU only)
for a in ${CUDA_ARCH:-}; do
    for x in ${a//,/ }; do
        GENCODE="$GENCODE -gencode arch=compute_$x,code=sm_$x"
        ARCHS_B="${ARCHS_B:+$ARCHS_B;}$x-real"
    done
done
mkdir -p "$B/poison/systemd" "$B/poison/editline"
for h in "${POISON[@]}"; do
    echo "#error \"check.sh tier A must not need <$h>: the device machine lacks it (tests/gpu/check.sh)\"" \
        > "$B/poison/$h"
done
CUDA_INC=""
[ -n "$CUDA_HOME" ] && CUDA_INC="-I$CUDA_HOME/include"
INC="-I$B/poison -I$ROOT -I$ROOT/common -I$ROOT/kernels -I$ROOT/kernels/cpu -I$ROOT/tests/gpu"
{
    echo "cc = $CC"
    if [ $MODE = emu ]; then
        echo "kflags = -std=c++17 -O2 -g -x c++ -DIFD_CUDA_EMU -ffp-contract=off -U_FORTIFY_SOURCE" \
             "-Wno-unknown-pragmas $INC -I$ROOT/tests/gpu/emu $CUDA_INC"
        echo "cflags = -std=c11 -O2 -g -D_GNU_SOURCE -DIFD_CUDA_EMU -Wall $INC $CUDA_INC"
        echo "rule kc"
        echo "  command = $CXX \$kflags -c \$in -o \$out"
        echo "rule link"
        echo "  command = $CXX \$in -o \$out -lm -lpthread"
    else
        echo "kflags = -std=c++17 -O3 $GENCODE $INC"
        echo "cflags = -std=c11 -O2 -g -D_GNU_SOURCE -Wall $INC $CUDA_INC"
        echo "rule kc"
        echo "  command = $NVCC \$kflags -c \$in -o \$out"
        echo "rule link"
        echo "  command = $NVCC $GENCODE \$in -o \$out -lm -lpthread"
    fi
    echo "  description = LINK \$out"
    echo "rule cc"
    echo "  command = \$cc \$cflags \$extra -c \$in -o \$out"
    echo "  description = CC \$in"
    kobjs=""
    for k in "${KERNELS[@]}"; do
        echo "build obj/cuda_$k.o: kc $ROOT/kernels/cuda/$k.cu"
        kobjs="$kobjs obj/cuda_$k.o"
    done
    if [ $MODE = emu ]; then
        echo "build obj/cuda_emu.o: kc $ROOT/tests/gpu/emu/cuda_emu.cc"
        echo "build obj/cuda_emu_vmm.o: kc $ROOT/tests/gpu/emu/cuda_emu_vmm.cc"
        kobjs="$kobjs obj/cuda_emu.o obj/cuda_emu_vmm.o"
    fi
    robjs=""
    for f in "${CREFS[@]}"; do
        o=obj/$(echo "${f%.c}" | tr / _).o
        echo "build $o: cc $ROOT/$f"
        robjs="$robjs $o"
    done
    echo "build obj/worker_sampler.o: cc $ROOT/worker/sampler.c"
    echo "  extra = -ffp-contract=off -fno-trapping-math -fopenmp-simd"
    # the sampler's grammar hook, without the grammar's dependencies (see the file)
    echo "build obj/no_constraint.o: cc $ROOT/tests/gpu/no_constraint.c"
    for t in "${TESTS_A[@]}"; do
        echo "build obj/$t.o: cc $ROOT/tests/gpu/$t.c"
        extra=""
        [ "$t" = test_gpu_sample ] && extra=" obj/worker_sampler.o obj/no_constraint.o"
        echo "build $t: link obj/$t.o$kobjs$robjs$extra"
    done
    if [ $BENCH = 1 ]; then
        echo "build obj/gpu_kernels.o: cc $ROOT/bench/gpu_kernels.c"
        echo "build bench_gpu_kernels: link obj/gpu_kernels.o$kobjs obj/common_error.o" \
             "obj/common_log.o obj/common_modelfile_ggml_types.o"
    fi
} > "$B/build.ninja"
if [ $PLAN = 1 ]; then
    # the graph only: a renamed source or an object named after an old path fails here
    ninja -C "$B" -n > "$B/plan.log" 2>&1 || { cat "$B/plan.log"; exit 1; }
    echo "check.sh --plan: tier A's build graph is complete ($(grep -c '^build ' "$B/build.ninja") edges)"
    exit 0
fi

# ---- tier B: the CMake build, in the background (device mode) --------------------------------------
TIER_B=0 B_PID=""
if [ $MODE = emu ]; then
    if [ -f "$CB/CTestTestfile.cmake" ]; then
        TIER_B=1 TIER_B_NOTE="the existing CMake build $CB"
    else
        TIER_B_NOTE="no CMake build at $CB (set CMAKE_BUILD)"
    fi
elif [ $HAVE_DEPS = 1 ]; then
    lib=$DEPS/usr/lib/x86_64-linux-gnu
    cat > "$B/pkgconf" << EOF
#!/bin/sh
# pkg-config for tier B: the carried pkgconf on the carried .pc files
export LD_LIBRARY_PATH="$lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export PKG_CONFIG_LIBDIR="$lib/pkgconfig:$DEPS/usr/share/pkgconfig"
export PKG_CONFIG_SYSROOT_DIR="$DEPS"
exec "$DEPS/usr/bin/pkgconf" "\$@"
EOF
    chmod +x "$B/pkgconf"
    (
        lim=$(limit "$BUILD_TIMEOUT")
        export PKG_CONFIG_LIBDIR="$lib/pkgconfig:$DEPS/usr/share/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$DEPS"
        timeout -k 5 "$lim" cmake -S "$ROOT" -B "$CB" -G Ninja -DCMAKE_BUILD_TYPE=Release \
            -DINFERD_CUDA=ON -DCMAKE_CUDA_COMPILER="$NVCC" -DPKG_CONFIG_EXECUTABLE="$B/pkgconf" \
            -DCMAKE_PREFIX_PATH="$DEPS/usr" -DCMAKE_BUILD_RPATH="$lib" \
            ${ARCHS_B:+"-DCMAKE_CUDA_ARCHITECTURES=$ARCHS_B"} || exit 1
        gpu=""
        for t in $(ctest --test-dir "$CB" -N -L '^gpu$' | sed -n 's/^ *Test *#[0-9]*: //p'); do
            case " ${TESTS_A[*]} " in *" $t "*) continue ;; esac
            ninja -C "$CB" -t query "$t" > /dev/null 2>&1 && gpu="$gpu $t" # a target, not a script
        done
        lim=$(limit "$BUILD_TIMEOUT")
        # -k 0: a target that fails to build (the daemon, say) does not stop the others
        timeout -k 5 "$lim" cmake --build "$CB" -j "$JOBS" --target "${TARGETS_B[@]}" $gpu -- -k 0
    ) > "$B/logs/build_b.log" 2>&1 &
    B_PID=$!
    TIER_B_NOTE="building (cmake, $DEPS)"
else
    TIER_B_NOTE="NOT BUILT: no $DEPS (run tests/gpu/check.sh --prepare here and carry it)"
fi

# ---- what the machine has (the first device run's answers to docs/gpu-status.md's unknowns) -------
{
    echo "uname: $(uname -srm)"
    echo "glibc: $(ldd --version 2> /dev/null | head -n1)"
    echo "cc: $($CC --version 2> /dev/null | head -n1)"
    echo "cmake: $(cmake --version 2> /dev/null | head -n1); ninja $(ninja --version 2> /dev/null)"
    echo "nvcc: $("$NVCC" --version 2> /dev/null | tail -n2 | tr '\n' ' ') (CUDA_HOME $CUDA_HOME)"
    echo "cublasLt: $(ls "$CUDA_HOME"/lib64/libcublasLt.so* "$CUDA_HOME"/lib/libcublasLt.so* 2> /dev/null | head -n1)"
    echo "nvidia-smi: $(nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap \
                       --format=csv,noheader 2> /dev/null | head -n1)"
    echo "python: $("$PYTHON" -c 'import sys; print(sys.version.split()[0])' 2> /dev/null)" \
         "$("$PYTHON" -c 'import torch, transformers; print("torch", torch.__version__,
                          "transformers", transformers.__version__)' 2> /dev/null)"
    echo "nproc: $(nproc); mem: $(free -g 2> /dev/null | awk '/Mem:/ {print $2 " GiB"}')"
} > "$B/logs/env.log" 2>&1
cat "$B/logs/env.log"
publish "$B/logs/env.log"

echo "== tier A build ($B, ${CUDA_ARCH:-emulator}, $JOBS jobs; tier B: $TIER_B_NOTE)"
t0=$(date +%s)
timeout -k 5 "$(limit "$BUILD_TIMEOUT")" ninja -C "$B" -j "$JOBS" > "$B/logs/build_a.log" 2>&1
rc=$?
BUILD_A_S=$(( $(date +%s) - t0 ))
if [ $rc -ne 0 ]; then
    tail -n 60 "$B/logs/build_a.log"
    echo "check.sh: tier A BUILD FAILED (rc $rc; full log $B/logs/build_a.log)"
    row "build (tier A)" "FAIL($rc)" "${BUILD_A_S}s" "see logs/build_a.log"
    STATUS=1
else
    row "build (tier A)" OK "${BUILD_A_S}s" "${TESTS_A[*]}$([ $BENCH = 1 ] && echo ' bench_gpu_kernels')"
fi
publish "$B/logs/build_a.log"

# ---- tier A: tests, then the kernel benchmark ----------------------------------------------------------
if [ $rc -eq 0 ]; then
    for t in "${TESTS_A[@]}"; do run_test "$t" "$B/$t"; done
    lim=$(limit "$BENCH_TIMEOUT")
    if [ $BENCH = 0 ]; then
        :
    elif [ "$lim" -gt 0 ]; then
        echo "== bench_gpu_kernels ${BENCH_ARGS[*]} (limit ${lim}s)"
        t0=$(date +%s)
        timeout -k 5 "$lim" "$B/bench_gpu_kernels" "${BENCH_ARGS[@]}" > "$B/bench_gpu_kernels.json" \
            2> "$B/logs/bench_gpu_kernels.log"
        brc=$?
        dt=$(( $(date +%s) - t0 ))
        cp "$B/bench_gpu_kernels.json" "$B/logs/bench_gpu_kernels.json.log"
        case $brc in
            0) row bench_gpu_kernels OK "${dt}s" "JSON below" ;;
            124 | 137) row bench_gpu_kernels TIMEOUT "${dt}s" "killed after ${lim}s"; STATUS=1 ;;
            *) row bench_gpu_kernels "FAIL($brc)" "${dt}s" "$(tail -n1 "$B/logs/bench_gpu_kernels.log")"
               STATUS=1 ;;
        esac
        publish "$B/logs/bench_gpu_kernels.log" "$B/logs/bench_gpu_kernels.json.log"
    else
        row bench_gpu_kernels "NOT RUN" - "out of time"
        STATUS=1
    fi
fi

# ---- tier B: the gpu-labelled CMake tests ---------------------------------------------------------------
if [ -n "$B_PID" ]; then
    echo "== waiting for the tier B build"
    wait "$B_PID"
    brc=$?
    publish "$B/logs/build_b.log"
    if [ $brc -ne 0 ]; then
        grep -E "error|Error|FAILED" "$B/logs/build_b.log" | head -n 30
        row "build (tier B)" "FAIL($brc)" - "cmake against $(basename "$DEPS"): see logs/build_b.log"
        STATUS=1
        if [ -f "$CB/CTestTestfile.cmake" ]; then # configured: run what did build
            TIER_B=1 TIER_B_NOTE="build FAILED in part (what built runs)"
        else
            TIER_B_NOTE="configure FAILED"
        fi
    else
        row "build (tier B)" OK - "cmake, INFERD_CUDA=ON, $(basename "$DEPS")"
        TIER_B=1 TIER_B_NOTE="built with cmake against $(basename "$DEPS")"
    fi
elif [ $MODE = device ]; then
    row "tier B" "NOT BUILT" - "no $(basename "$DEPS"): test_gpu_device, test_gpu_kvpool, test_backend_cuda, the race"
fi
if [ $TIER_B = 1 ]; then
    # every gpu-labelled CTest test that tier A does not run: a test program
    # (ifd_add_test: a target of that name, run directly) or a script test (run
    # through ctest -R, its dependencies built as TARGETS_B)
    for t in $(ctest --test-dir "$CB" -N -L '^gpu$' 2> /dev/null | sed -n 's/^ *Test *#[0-9]*: //p'); do
        case " test_gpu_attention test_gpu_fused test_gpu_dequant test_gpu_sample test_gpu_vision " in
            *" $t "*) continue ;;
        esac
        [ $QUICK = 1 ] && [ "$t" != test_gpu_device ] && continue
        if ninja -C "$CB" -t query "$t" > /dev/null 2>&1; then
            exe=$(find "$CB" -type f -name "$t" -perm -u+x 2> /dev/null | head -n1)
            if [ -z "$exe" ]; then
                row "$t" "NOT BUILT" - "see logs/build_b.log"
                STATUS=1
                continue
            fi
            run_test "$t" "$exe"
        else
            run_test "$t" ctest --test-dir "$CB" -R "^$t\$" --output-on-failure \
                --timeout "$(limit "$TEST_TIMEOUT")"
        fi
    done
fi

# ---- the race: bench/gpu_vs_hf.py -----------------------------------------------------------------------
if [ $RACE = 1 ] && [ $QUICK = 0 ]; then
    lim=$(limit "$RACE_TIMEOUT")
    if [ $TIER_B = 0 ] || [ ! -x "$CB/worker/inferd-worker" ] || [ ! -x "$CB/bench/bench_engine" ]; then
        row gpu_vs_hf "NOT RUN" - "needs tier B's inferd-worker and bench_engine"
        [ $MODE = device ] && STATUS=1
    elif [ "$lim" -le 0 ]; then
        row gpu_vs_hf "NOT RUN" - "out of time"
        STATUS=1
    else
        echo "== gpu_vs_hf ${RACE_ARGS[*]} (limit ${lim}s)"
        t0=$(date +%s)
        PYTHONUNBUFFERED=1 timeout -k 5 "$lim" "$PYTHON" "$ROOT/bench/gpu_vs_hf.py" "${RACE_ARGS[@]}" \
            --build "$CB" --work "$B/race" --out "$B/gpu_vs_hf.json" \
            --time-limit "$(( lim - 10 ))" > "$B/logs/gpu_vs_hf.log" 2>&1
        rrc=$?
        dt=$(( $(date +%s) - t0 ))
        tail -n 20 "$B/logs/gpu_vs_hf.log"
        case $rrc in
            0) row gpu_vs_hf OK "${dt}s" "JSON below" ;;
            124 | 137) row gpu_vs_hf TIMEOUT "${dt}s" "killed after ${lim}s"; STATUS=1 ;;
            1) row gpu_vs_hf "FAIL(1)" "${dt}s" "inferd gave no result: see the notes below"; STATUS=1 ;;
            *) row gpu_vs_hf "FAIL($rrc)" "${dt}s" "$(grep -v '^{' "$B/logs/gpu_vs_hf.log" | tail -n1)"
               STATUS=1 ;;
        esac
        publish "$B/logs/gpu_vs_hf.log"
    fi
fi

# ---- the table, last --------------------------------------------------------------------------------------
publish
table | tee "$B/table.txt"
exit $STATUS
}
