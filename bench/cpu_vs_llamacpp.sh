#!/usr/bin/env bash
# cpu_vs_llamacpp.sh — inferd against llama.cpp on the CPU, side by side: the
# same GGUF, the same thread count, the same workloads, interleaved, several
# repetitions; prints both and inferd ÷ llama.cpp as one JSON object
# (bench/cpu_vs_llamacpp.py does the measuring; docs/benchmarks.md has the
# results and what each number means).
#
#   bench/cpu_vs_llamacpp.sh [--build DIR] [--bench-engine PATH] [--models default,gemma3]
#                            [--reps N] [--threads T] [--json FILE] [--smoke] [--inferd-only]
#                            [--workloads single,batched4,batched16,batched64] [--also-isa ISA]
#                            [--shapes llama-3.2-1b,llama-3.2-3b] [--quants Q4_K_M,Q4_0,Q8_0,Q6_K]
#                            [--peers llama-bench,ik_llama.cpp] [--isa avx2]
#
# llama.cpp comes from the PyPI sdist of llama-cpp-python (LLAMACPP_PY_VERSION,
# default 0.3.36, which vendors llama.cpp 0c1e57098), built once from source for
# this CPU (GGML_NATIVE) into a wheel cached outside the repository and
# installed into its own venv:
#   ${XDG_CACHE_HOME:-~/.cache}/inferd/llamacpp-wheels/   the built wheel (reused)
#   ${XDG_CACHE_HOME:-~/.cache}/inferd/llamacpp-venv/     the venv that runs it
# The first run builds it (tens of minutes on 2 cores); later runs reuse it.
# inferd is measured with DIR/bench/bench_engine (brought up to date first; default DIR:
# build/ of this checkout), or the --bench-engine given.
#
# --smoke: one repetition of tiny workloads on the default model (seconds once
# the wheel exists; tests/integration/test_bench_cpu_vs_llamacpp.sh runs it);
# --inferd-only skips llama.cpp (no build needed). --also-isa ISA also runs
# inferd with its SIMD path capped (INFERD_CPU=ISA, e.g. avx2 on an AVX-512
# CPU) and reports inferd ÷ that as ratio_vs_ISA.
# --shapes adds models in the shapes of deploy/shapes/NAME.json with seeded
# random weights (bench/make_shape_gguf.py writes the f16 GGUF), quantized by
# llama.cpp's own llama-quantize to each of --quants (default Q4_K_M), so every
# engine reads byte-identical weights; files cached in
#   ${XDG_CACHE_HOME:-~/.cache}/inferd/shapes/NAME-QUANT.gguf
# (a 3B shape is 6.4 GB in f16: ~10 GB of disk for the f16 and one quant).
# --peers adds the peers' own llama-bench for the single workload (pp512,
# tg128): llama.cpp's, built from the same sdist into
#   ${XDG_CACHE_HOME:-~/.cache}/inferd/llamacpp-tools/ (with llama-quantize
#   and llama-server; GGML_NATIVE, AMX off),
# and ik_llama.cpp's (run with -rtr 1 -fa 1), built from IK_LLAMA_SRC (a
# source tree; default: a clone of github.com/ikawrakow/ik_llama.cpp at
# IK_LLAMA_REF, default main) into ${XDG_CACHE_HOME:-~/.cache}/inferd/ik_llama-build/
# (its flash-attention kernels for f16/q8_0 K only, GGML_IQK_FA_ALL_QUANTS=OFF: the
# benchmark keeps f16 KV, and all quants take an hour to compile on 2 cores).
# --isa avx2: the whole comparison as on an AVX2-only CPU — inferd with INFERD_CPU=avx2 (its
# _avx2 path, no AVX-512/VNNI/AMX) and the peers' llama-bench built without AVX-512
# (GGML_NATIVE off; AVX, AVX2, FMA, F16C, BMI2 on) into llamacpp-tools-avx2/ and
# ik_llama-build-avx2/ beside the native builds; llama-quantize stays the native one (the
# files are the same bytes). The memory is this machine's either way: it is the figure for
# an AVX2 CPU with this one's bandwidth.
# Exit status: 0, 1 on a failed step, 2 on bad usage.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build="$root/build"
bench_engine=""
models="default,gemma3"
reps=3
threads=2
json=""
smoke=0
inferd_only=0
only=""
also_isa=""
shapes=""
quants="Q4_K_M"
peers=""
isa=""
while [ $# -gt 0 ]; do
    case "$1" in
    --build) build=$2; shift 2 ;;
    --bench-engine) bench_engine=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --json) json=$2; shift 2 ;;
    --smoke) smoke=1; shift ;;
    --inferd-only) inferd_only=1; shift ;;
    --workloads) only=$2; shift 2 ;;
    --also-isa) also_isa=$2; shift 2 ;;
    --shapes) shapes=$2; shift 2 ;;
    --quants) quants=$2; shift 2 ;;
    --peers) peers=$2; shift 2 ;;
    --isa) isa=$2; shift 2 ;;
    -h|--help) sed -n '2,/^# Exit status/p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "cpu_vs_llamacpp.sh: unknown option $1" >&2; exit 2 ;;
    esac
done

cache="${XDG_CACHE_HOME:-$HOME/.cache}/inferd"
venv="$cache/llamacpp-venv"
wheels="$cache/llamacpp-wheels"
version="${LLAMACPP_PY_VERSION:-0.3.36}"

# llama-cpp-python, built once for this CPU
if [ "$inferd_only" = 0 ] &&
   ! "$venv/bin/python" -c "import llama_cpp, sys; sys.exit(llama_cpp.__version__ != '$version')" 2>/dev/null; then
    echo "cpu_vs_llamacpp: installing llama-cpp-python $version into $venv" >&2
    mkdir -p "$wheels"
    [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
    if ! ls "$wheels"/llama_cpp_python-"$version"-*.whl >/dev/null 2>&1; then
        echo "cpu_vs_llamacpp: building llama.cpp from the sdist (log: $cache/llamacpp-build.log)" >&2
        CMAKE_ARGS="-DGGML_NATIVE=ON -DGGML_CUDA=OFF -DGGML_OPENMP=ON -DLLAMA_BUILD_TESTS=OFF \
-DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF" \
        CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
            "$venv/bin/pip" wheel --no-deps -v "llama-cpp-python==$version" -w "$wheels" \
            >"$cache/llamacpp-build.log" 2>&1 ||
            { echo "cpu_vs_llamacpp: the build failed, see $cache/llamacpp-build.log" >&2; exit 1; }
    fi
    "$venv/bin/pip" install -q --find-links "$wheels" numpy "llama-cpp-python==$version" ||
        { echo "cpu_vs_llamacpp: installing the wheel failed" >&2; exit 1; }
fi

# The peers' builds compile AMX out: GGML_NATIVE's -march=native turns on the AMX
# intrinsics where the CPU advertises them, and a virtual machine may advertise AMX without
# granting its tile state — ggml's AMX/repack paths then die (SIGILL on one Sapphire Rapids
# VM, SIGSEGV in llama-bench's first product on another, 2026-12-06). GGML_AMX=OFF alone
# does not keep them out. (Builds made before this flag: delete the folder to rebuild.)
no_amx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
# --isa: the peers' ISA flags and build folders (a suffix), inferd's cap
isa_flags=(-DGGML_NATIVE=ON)
sfx=""
case "$isa" in
"") ;;
avx2)
    isa_flags=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
               -DGGML_BMI2=ON -DGGML_AVX512=OFF)
    sfx=-avx2
    export INFERD_CPU=avx2 ;;
*) echo "cpu_vs_llamacpp: --isa takes avx2" >&2; exit 2 ;;
esac

# llama.cpp's own tools (llama-quantize for --shapes, llama-bench for --peers)
tools="$cache/llamacpp-tools"
build_tools() {  # [FOLDER-SUFFIX CMAKE-ISA-FLAGS...]: the native build without arguments
    local sfx=${1:-} dir
    [ $# -gt 0 ] && shift
    local flags=("$@")
    [ ${#flags[@]} -gt 0 ] || flags=(-DGGML_NATIVE=ON)
    dir="$tools$sfx"
    [ -x "$dir/bin/llama-quantize" ] && [ -x "$dir/bin/llama-bench" ] && return 0
    local src="$cache/llamacpp-src/llama_cpp_python-$version/vendor/llama.cpp"
    if [ ! -d "$src" ]; then
        mkdir -p "$cache/llamacpp-src"
        python3 -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$version" \
            -d "$cache/llamacpp-src" >&2 &&
            tar xzf "$cache/llamacpp-src/llama_cpp_python-$version.tar.gz" -C "$cache/llamacpp-src" ||
            { echo "cpu_vs_llamacpp: cannot get the llama-cpp-python $version sdist" >&2; exit 1; }
    fi
    echo "cpu_vs_llamacpp: building llama.cpp's tools (log: $cache/llamacpp-tools$sfx.log)" >&2
    { cmake -S "$src" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "${flags[@]}" \
          "-DCMAKE_C_FLAGS=$no_amx" "-DCMAKE_CXX_FLAGS=$no_amx" \
          -DGGML_CUDA=OFF -DGGML_OPENMP=ON -DGGML_AMX=OFF -DLLAMA_BUILD_TESTS=OFF \
          -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_CURL=OFF &&
      cmake --build "$dir" -j "$(nproc)" --target llama-quantize llama-bench llama-server; } \
        >"$cache/llamacpp-tools$sfx.log" 2>&1 ||
        { echo "cpu_vs_llamacpp: the tools' build failed, see $cache/llamacpp-tools$sfx.log" >&2; exit 1; }
}
ik_build="$cache/ik_llama-build$sfx"
build_ik() {
    [ -x "$ik_build/bin/llama-bench" ] && return 0
    local src="${IK_LLAMA_SRC:-$cache/ik_llama-src}"
    if [ ! -f "$src/CMakeLists.txt" ]; then
        git clone -q --depth 1 --branch "${IK_LLAMA_REF:-main}" \
            https://github.com/ikawrakow/ik_llama.cpp "$src" >&2 ||
            { echo "cpu_vs_llamacpp: cannot clone ik_llama.cpp (set IK_LLAMA_SRC)" >&2; exit 1; }
    fi
    echo "cpu_vs_llamacpp: building ik_llama.cpp's llama-bench (log: $cache/ik_llama-build$sfx.log)" >&2
    { cmake -S "$src" -B "$ik_build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${isa_flags[@]}" \
          "-DCMAKE_C_FLAGS=$no_amx" "-DCMAKE_CXX_FLAGS=$no_amx" \
          -DGGML_CUDA=OFF -DGGML_OPENMP=ON -DGGML_AMX=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_CURL=OFF \
          -DGGML_IQK_FA_ALL_QUANTS=OFF &&
      cmake --build "$ik_build" -j "$(nproc)" --target llama-bench; } \
        >"$cache/ik_llama-build$sfx.log" 2>&1 ||
        { echo "cpu_vs_llamacpp: ik_llama.cpp's build failed, see $cache/ik_llama-build$sfx.log" >&2; exit 1; }
}
peer_args=()
IFS=, read -r -a peer_list <<<"$peers"
for p in "${peer_list[@]}"; do
    case "$p" in
    llama-bench) build_tools "$sfx" "${isa_flags[@]}"; peer_args+=(--llama-bench "$tools$sfx/bin/llama-bench") ;;
    ik_llama.cpp) build_ik; peer_args+=(--ik-bench "$ik_build/bin/llama-bench") ;;
    *) echo "cpu_vs_llamacpp: unknown peer $p (llama-bench, ik_llama.cpp)" >&2; exit 2 ;;
    esac
done

# inferd's side
if [ -z "$bench_engine" ]; then
    # always brought up to date (a no-op when it is): a stale binary measures old kernels
    bench_engine="$build/bench/bench_engine"
    cmake --build "$build" --target bench_engine bench_membw >&2 ||
        { echo "cpu_vs_llamacpp: cannot build $bench_engine (configure $build first)" >&2; exit 1; }
fi
membw="$(dirname "$bench_engine")/bench_membw"   # the read bandwidth, beside bench_engine
[ -x "$membw" ] || cmake --build "$build" --target bench_membw >&2 || membw=""

# the models
model_args=()
IFS=, read -r -a names <<<"$models"
for name in "${names[@]}"; do
    if [ "$name" = default ]; then
        path=$("$root/deploy/fetch-model.sh" --path)
    else
        path=$("$root/deploy/fetch-model.sh" --path "$name")
    fi
    [ -f "$path" ] || { echo "cpu_vs_llamacpp: model $name not found (deploy/fetch-model.sh $name)" >&2; exit 1; }
    model_args+=(--model "$name=$path")
done

# the realistic shapes: f16 once per shape, then one llama-quantize per quant
if [ -n "$shapes" ]; then
    build_tools
    mkdir -p "$cache/shapes"
    IFS=, read -r -a shape_list <<<"$shapes"
    IFS=, read -r -a quant_list <<<"$quants"
    for sh in "${shape_list[@]}"; do
        shape_json="$root/deploy/shapes/$sh.json"
        [ -f "$shape_json" ] || { echo "cpu_vs_llamacpp: no shape $shape_json" >&2; exit 2; }
        f16="$cache/shapes/$sh-f16.gguf"
        for q in "${quant_list[@]}"; do
            out="$cache/shapes/$sh-$q.gguf"
            if [ ! -f "$out" ]; then
                if [ ! -f "$f16" ]; then  # gguf + numpy: the test venv has both
                    "${INFERD_PYTHON:-$cache/venv/bin/python}" "$here/make_shape_gguf.py" \
                        --shape "$shape_json" --out "$f16.part" >&2 && mv "$f16.part" "$f16" ||
                        { echo "cpu_vs_llamacpp: cannot write $f16" >&2; exit 1; }
                fi
                "$tools/bin/llama-quantize" "$f16" "$out.part" "$q" 2 >"$cache/shapes/quantize.log" 2>&1 &&
                    mv "$out.part" "$out" ||
                    { echo "cpu_vs_llamacpp: llama-quantize $q failed ($cache/shapes/quantize.log)" >&2; exit 1; }
            fi
            model_args+=(--model "$sh-$q=$out")
        done
    done
fi

py="$venv/bin/python"
[ "$inferd_only" = 1 ] && py=python3
args=(--bench-engine "$bench_engine" --driver "$here/llamacpp_driver.py"
      --llama-python "$venv/bin/python" --threads "$threads" --reps "$reps" --repo "$root"
      "${model_args[@]}")
[ -n "$membw" ] && args+=(--membw "$membw")
[ "$smoke" = 1 ] && args+=(--smoke)
[ "$inferd_only" = 1 ] && args+=(--inferd-only)
[ -n "$json" ] && args+=(--json "$json")
[ -n "$only" ] && args+=(--workloads "$only")
[ -n "$also_isa" ] && args+=(--also-isa "$also_isa")
args+=("${peer_args[@]}")
exec "$py" "$here/cpu_vs_llamacpp.py" "${args[@]}"
