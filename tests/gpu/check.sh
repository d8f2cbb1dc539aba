#!/usr/bin/env bash
# tests/gpu/check.sh — build and run the CUDA kernel tests and the GPU
# micro-benchmarks on a machine with a GPU, printing a short results table
# last. Needs only the CUDA toolkit (nvcc), a C compiler, ninja, python3 and
# libc: it does not use the CMake project, whose Debian -dev dependencies
# (libuv, jansson, check, ...) the device machine lacks. The kernel sources
# and the CPU references they are checked against (plain C, libc/libm/
# pthreads only) are compiled directly; see tests/gpu/README.md.
#
#   bash tests/gpu/check.sh
#
# Environment:
#   NVCC       nvcc to use (default: nvcc on PATH, else /usr/local/cuda/bin/nvcc)
#   CC         host C compiler (default: cc)
#   CUDA_ARCH  e.g. 90 (default: the first GPU's compute capability from
#              nvidia-smi; 80 and 90 when that is unknown)
#   BUILD      build directory (default: build-gpu-check)
#   JOBS       parallel compile jobs (default: nproc)
#   OUT        if set, logs, the benchmark JSON and the table are copied there
#   XXHASH_INCLUDE  a directory with xxhash.h, for test_gpu_kvpool (the KV pool's
#              CUDA segments) and test_backend_cuda (the CUDA backend end to end
#              vs the CPU backend), built only where that header exists
#              (xxhash is used header-only, XXH_INLINE_ALL)
# Exit status: 0 when every test passed or skipped, 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
B=${BUILD:-$ROOT/build-gpu-check}
JOBS=${JOBS:-$(nproc)}
CC=${CC:-cc}
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
CUDA_HOME=$(cd "$(dirname "$NVCC")/.." && pwd)
start=$(date +%s)

if [ ! -x "$NVCC" ]; then
    echo "check.sh: no nvcc at $NVCC" >&2
    exit 1
fi
if [ -z "${CUDA_ARCH:-}" ]; then
    CUDA_ARCH=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null |
                head -n1 | tr -d ' .')
fi
GENCODE=""
for a in ${CUDA_ARCH:-80 90}; do
    a=${a//,/ }
    for x in $a; do GENCODE="$GENCODE -gencode arch=compute_$x,code=sm_$x"; done
done

mkdir -p "$B/obj"
KERNELS=(device attn_decode attn_prefill rmsnorm rope_kv glu convert embed dequant sample)
CREFS=(common/error.c common/log.c common/ggml_types.c kernels/kernels.c kernels/cpu/fp16.c
       kernels/cpu/dequant.c kernels/cpu/threadpool.c kernels/cpu/attention.c
       kernels/cpu/norm.c kernels/cpu/rope.c kernels/cpu/activations.c kernels/cpu/matmul.c
       tests/gpu/gpu_test.c)
TESTS=(test_gpu_attention test_gpu_fused test_gpu_dequant test_gpu_sample)
INC="-I$ROOT/common -I$ROOT/kernels -I$ROOT/kernels/cpu -I$ROOT/worker -I$ROOT/tests/gpu"

# test_gpu_kvpool needs xxhash.h (libxxhash-dev), absent on the device machine
# unless carried: build it only when the header is found.
XXINC=""
[ -n "${XXHASH_INCLUDE:-}" ] && XXINC="-I$XXHASH_INCLUDE"
KVPOOL=0
if echo '#include <xxhash.h>' | $CC $XXINC -E -x c - > /dev/null 2>&1; then
    KVPOOL=1
fi

# ---- build (a generated build.ninja) ------------------------------------------------
{
    echo "nvcc = $NVCC"
    echo "cc = $CC"
    echo "nvflags = -std=c++17 -O3 $GENCODE $INC"
    echo "cflags = -std=c11 -O2 -g -D_GNU_SOURCE -Wall $INC -I$CUDA_HOME/include"
    echo "rule nvcc"
    echo "  command = \$nvcc \$nvflags -c \$in -o \$out"
    echo "  description = NVCC \$in"
    echo "rule cc"
    echo "  command = \$cc \$cflags \$extra -c \$in -o \$out"
    echo "  description = CC \$in"
    echo "rule link"
    echo "  command = \$nvcc $GENCODE \$in -o \$out \$libs -lm -lpthread"
    echo "  description = LINK \$out"
    kobjs=""
    for k in "${KERNELS[@]}"; do
        echo "build obj/cuda_$k.o: nvcc $ROOT/kernels/cuda/$k.cu"
        kobjs="$kobjs obj/cuda_$k.o"
    done
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
    for t in "${TESTS[@]}"; do
        echo "build obj/$t.o: cc $ROOT/tests/gpu/$t.c"
        extra=""
        [ "$t" = test_gpu_sample ] && extra=" obj/worker_sampler.o obj/no_constraint.o"
        echo "build $t: link obj/$t.o$kobjs$robjs$extra"
    done
    if [ $KVPOOL = 1 ]; then
        kv=""
        for f in common/kvpool.c common/kvpool_check.c common/fdpass.c tests/gpu/test_gpu_kvpool.c; do
            o=obj/$(echo "${f%.c}" | tr / _).o
            echo "build $o: cc $ROOT/$f"
            echo "  extra = -DXXH_INLINE_ALL $XXINC"
            kv="$kv $o"
        done
        echo "build obj/cuda_kvseg_cuda.o: nvcc $ROOT/kernels/cuda/kvseg_cuda.cu"
        echo "build test_gpu_kvpool: link$kv obj/cuda_kvseg_cuda.o obj/cuda_device.o" \
             "obj/common_error.o obj/common_log.o"
        # the CUDA backend end to end vs the CPU backend (model.c needs the
        # pool's parameter defaults, hence xxhash too)
        be=""
        for f in common/gguf.c common/model_config.c worker/model.c worker/backend_cpu.c \
                 worker/backend_cuda.c tests/gpu/test_backend_cuda.c; do
            o=obj/$(echo "${f%.c}" | tr / _).o
            echo "build $o: cc $ROOT/$f"
            echo "  extra = -DIFD_TEST_NO_GENERATE"
            be="$be $o"
        done
        echo "build test_backend_cuda: link$be$kobjs$robjs obj/common_kvpool.o" \
             "obj/common_kvpool_check.o obj/common_fdpass.o"
        echo "  libs = -lcublasLt"
    fi
    echo "build obj/gpu_kernels.o: cc $ROOT/bench/gpu_kernels.c"
    echo "build bench_gpu_kernels: link obj/gpu_kernels.o$kobjs obj/common_error.o" \
         "obj/common_log.o obj/common_ggml_types.o"
} > "$B/build.ninja"

echo "== build ($B, arch ${CUDA_ARCH:-80 90}, $JOBS jobs)"
if ! ninja -C "$B" -j "$JOBS" > "$B/build.log" 2>&1; then
    tail -n 60 "$B/build.log"
    echo "check.sh: BUILD FAILED (full log: $B/build.log)"
    [ -n "${OUT:-}" ] && cp "$B/build.log" "$OUT/" 2>/dev/null
    exit 1
fi
build_s=$(( $(date +%s) - start ))
echo "built in ${build_s}s"

# ---- tests ----------------------------------------------------------------------------
status=0
rows=()
RUN=("${TESTS[@]}")
if [ $KVPOOL = 1 ]; then
    RUN+=(test_gpu_kvpool test_backend_cuda)
else
    for t in test_gpu_kvpool test_backend_cuda; do
        rows+=("$(printf '%-22s %-9s %5s   %s' $t "NOT BUILT" - \
                  "no xxhash.h here (set XXHASH_INCLUDE)")")
    done
fi
rows+=("$(printf '%-22s %-9s %5s   %s' test_gpu_device "NOT BUILT" - \
          "a Check test; the kernel tests print the device instead")")
for t in "${RUN[@]}"; do
    echo "== $t"
    t0=$(date +%s)
    timeout 600 "$B/$t" > "$B/$t.log" 2>&1
    rc=$?
    dt=$(( $(date +%s) - t0 ))
    grep -E "^(ok|FAIL|  FAIL|    )|passed|SKIPPED" "$B/$t.log" | tail -n 40
    summary=$(grep -E "passed, [0-9]+ failed" "$B/$t.log" | tail -n1 | sed 's/^[^:]*: //')
    case $rc in
        0) res=PASS ;;
        77) res=SKIP; summary=$(grep -m1 SKIPPED "$B/$t.log") ;;
        124) res=TIMEOUT; status=1 ;;
        *) res="FAIL($rc)"; status=1 ;;
    esac
    rows+=("$(printf '%-22s %-9s %5ss  %s' "$t" "$res" "$dt" "$summary")")
done

# ---- benchmarks ----------------------------------------------------------------------------
echo "== bench_gpu_kernels"
timeout 300 "$B/bench_gpu_kernels" > "$B/bench_gpu_kernels.json" 2> "$B/bench_gpu_kernels.err"
brc=$?
cat "$B/bench_gpu_kernels.json"
[ $brc -ne 0 ] && { cat "$B/bench_gpu_kernels.err"; status=1; }

# ---- table ---------------------------------------------------------------------------------------
{
    echo
    echo "==================== GPU results ($(date -u +%Y-%m-%dT%H:%MZ)) ===================="
    echo "device: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null |
                     head -n1 || echo unknown)"
    echo "commit: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(
          git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (+ uncommitted changes)')"
    echo "build: ${build_s}s, arch ${CUDA_ARCH:-80 90}"
    echo
    printf '%-22s %-9s %6s  %s\n' test result time summary
    for r in "${rows[@]}"; do echo "$r"; done
    echo
    python3 - "$B/bench_gpu_kernels.json" <<'EOF'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except Exception as e:
    print(f"bench: no JSON ({e})")
    sys.exit(0)
if r.get("skipped"):
    print("bench: skipped:", r.get("reason"))
    sys.exit(0)
cp = r["copy_gb_s"]
print(f"bench ({r['device']}, median of {r['runs']}): copy {cp:.0f} GB/s")
fmt = "  {:<34} {:>9} {:>10}  {:>8}  {}"
print(fmt.format("kernel", "ms", "GB/s|TF/s", "of copy", "target"))
for d in r["decode"]:
    ok = "met" if d["frac_copy"] >= 0.8 else "NOT met"
    print(fmt.format(f"decode b{d['batch']} x ctx{d['ctx']}", f"{d['ms']:.3f}",
                     f"{d['gb_s']:.0f}", f"{100*d['frac_copy']:.0f}%",
                     f">=80% {ok}" if d["batch"] == 64 else ""))
p = r["prefill"]
print(fmt.format(f"prefill b{p['batch']} x {p['len']} causal", f"{p['ms']:.3f}",
                 f"{p['tflop_s']:.0f} TF", "",
                 ">=350 TF " + ("met" if p["tflop_s"] >= 350 else "NOT met")))
for s in r["small"]:
    ok = "met" if s["frac_copy"] >= 0.8 else "NOT met"
    tgt = f">=80% {ok}" if s["kernel"] in ("rmsnorm_residual", "rope_kv_write", "swiglu") else ""
    print(fmt.format(s["kernel"], f"{s['ms']:.3f}", f"{s['gb_s']:.0f}",
                     f"{100*s['frac_copy']:.0f}%", tgt))
sm = r["sample"]
print(fmt.format(f"sample {sm['rows']} x {sm['vocab']}", f"{sm['ms']:.3f}", "", "", ""))
EOF
    echo
    overall=OK
    [ $status -eq 0 ] || overall=FAILED
    echo "total $(( $(date +%s) - start ))s; overall: $overall"
} | tee "$B/table.txt"

if [ -n "${OUT:-}" ]; then
    cp "$B"/*.log "$B/bench_gpu_kernels.json" "$B/table.txt" "$OUT/" 2>/dev/null
fi
exit $status
