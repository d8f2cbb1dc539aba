#!/usr/bin/env bash
# served_vs_llamaserver.sh — inferd's daemon against llama.cpp's llama-server,
# both serving over loopback TCP and driven by the same client
# (`infer bench serve`): the same GGUF, thread count and KV capacity, the same
# prompts, 1 and 16 concurrent streams, several repetitions interleaved; prints
# both and inferd ÷ llama-server as one JSON object
# (bench/served_vs_llamaserver.py does the measuring; docs/benchmarks.md,
# "Served", has the results and what each number means).
#
#   bench/served_vs_llamaserver.sh [--build DIR] [--models default,gemma3] [--reps N]
#                                  [--threads T] [--ctx N] [--json FILE] [--smoke]
#                                  [--llama-server PATH] [--build-llama-server]
#                                  [--model-file NAME=PATH]... [--inferd-arg ARG]...
#
# llama-server is built once from the llama.cpp that the PyPI sdist of
# llama-cpp-python vendors (LLAMACPP_PY_VERSION, default 0.3.36: llama.cpp
# 0c1e57098, the one bench/cpu_vs_llamacpp.sh measures), for this CPU
# (GGML_NATIVE, OpenMP, no CUDA, no curl/OpenSSL, no web UI, static), with
# `nice -n 19` and LLAMA_SERVER_JOBS (default 2) compile jobs, into
#   ${XDG_CACHE_HOME:-~/.cache}/inferd/llamacpp-sdist/    the sdist (pip download)
#   ${XDG_CACHE_HOME:-~/.cache}/inferd/llamacpp-server/   build/, bin/llama-server, build.log
# The first run builds it (≈ 30-40 min on 2 loaded cores); later runs reuse
# bin/llama-server. --build-llama-server only builds it; --llama-server PATH
# uses another binary. inferd's side is DIR/daemon/inferd,
# DIR/worker/inferd-worker and DIR/client/infer (built if missing; default
# DIR: build/ of this checkout).
#
# --model-file NAME=PATH adds a GGUF by path (repeatable; e.g. the Llama-3.2-1B
# shape that bench/cpu_vs_llamacpp.sh --shapes quantizes into
# ~/.cache/inferd/shapes/llama-3.2-1b-Q4_K_M.gguf); with --models "" only those.
# --inferd-arg ARG passes ARG to inferd (e.g. --inferd-arg=--chat-template=llama3: the
# shape files carry no chat template, and inferd refuses to start without one).
#
# --smoke: one repetition of tiny workloads on the default model (seconds once
# llama-server is built; tests/integration/test_bench_served_vs_llamaserver.sh
# runs it). Exit status: 0, 1 on a failed step, 2 on bad usage.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build="$root/build"
models="default,gemma3"
reps=3
threads=2
ctx=8192
json=""
smoke=0
server=""
build_only=0
files=()
iargs=()
while [ $# -gt 0 ]; do
    case "$1" in
    --build) build=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --ctx) ctx=$2; shift 2 ;;
    --json) json=$2; shift 2 ;;
    --smoke) smoke=1; shift ;;
    --llama-server) server=$2; shift 2 ;;
    --build-llama-server) build_only=1; shift ;;
    --model-file) files+=("$2"); shift 2 ;;
    --inferd-arg) iargs+=(--inferd-arg="$2"); shift 2 ;;
    --inferd-arg=*) iargs+=("$1"); shift ;;
    -h|--help) sed -n '2,36p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "served_vs_llamaserver.sh: unknown option $1" >&2; exit 2 ;;
    esac
done

cache="${XDG_CACHE_HOME:-$HOME/.cache}/inferd"
version="${LLAMACPP_PY_VERSION:-0.3.36}"
lsdir="$cache/llamacpp-server"

die() { echo "served_vs_llamaserver: $*" >&2; exit 1; }

# llama-server, built once from the sdist's vendored llama.cpp. Prints its path.
ensure_llama_server() {
    local bin="$lsdir/bin/llama-server"
    if [ -x "$bin" ] && [ "$(cat "$lsdir/bin/VERSION" 2>/dev/null)" = "$version" ]; then
        echo "$bin"
        return
    fi
    local sdist_dir="$cache/llamacpp-sdist" log="$lsdir/build.log"
    local tarball="$sdist_dir/llama_cpp_python-$version.tar.gz"
    mkdir -p "$sdist_dir" "$lsdir"
    if [ ! -f "$tarball" ]; then
        echo "served_vs_llamaserver: downloading the llama-cpp-python $version sdist" >&2
        local pip=(python3 -m pip)
        [ -x "$cache/llamacpp-venv/bin/pip" ] && pip=("$cache/llamacpp-venv/bin/pip")
        "${pip[@]}" download --no-binary :all: --no-deps -d "$sdist_dir" \
            "llama-cpp-python==$version" >"$lsdir/download.log" 2>&1 ||
            die "pip download llama-cpp-python==$version failed, see $lsdir/download.log"
        [ -f "$tarball" ] || die "no $tarball after pip download"
    fi
    local src="$sdist_dir/llama_cpp_python-$version/vendor/llama.cpp"
    if [ ! -f "$src/tools/server/CMakeLists.txt" ]; then
        tar -xzf "$tarball" -C "$sdist_dir" || die "cannot unpack $tarball"
        [ -f "$src/tools/server/CMakeLists.txt" ] || die "$tarball vendors no llama.cpp tools/server"
    fi
    echo "served_vs_llamaserver: building llama-server (nice -n 19, -j${LLAMA_SERVER_JOBS:-2};" \
         "tens of minutes; log: $log)" >&2
    # the same llama.cpp configuration as the wheel of cpu_vs_llamacpp.sh (GGML_NATIVE,
    # OpenMP, no CUDA, Release), plus the server; nothing fetched from the network
    { nice -n 19 cmake -S "$src" -B "$lsdir/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=ON -DGGML_CUDA=OFF -DGGML_OPENMP=ON \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON \
        -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF \
        -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF &&
      nice -n 19 cmake --build "$lsdir/build" -j "${LLAMA_SERVER_JOBS:-2}" --target llama-server
    } >"$log" 2>&1 || die "building llama-server failed, see $log"
    mkdir -p "$lsdir/bin"
    [ -x "$lsdir/build/bin/llama-server" ] ||
        die "no $lsdir/build/bin/llama-server after the build (see $log)"
    cp "$lsdir/build/bin/llama-server" "$bin.tmp"
    mv "$bin.tmp" "$bin"
    echo "$version" >"$lsdir/bin/VERSION"
    echo "$bin"
}

if [ -z "$server" ]; then
    server=$(ensure_llama_server)
fi
[ -x "$server" ] || die "no llama-server at $server"
[ "$build_only" = 1 ] && { echo "$server"; exit 0; }

# inferd's side
inferd="$build/daemon/inferd"
worker="$build/worker/inferd-worker"
infer="$build/client/infer"
if [ ! -x "$inferd" ] || [ ! -x "$worker" ] || [ ! -x "$infer" ]; then
    cmake --build "$build" --target inferd inferd-worker infer >&2 ||
        die "cannot build inferd, inferd-worker and infer in $build (configure it first)"
fi

# the models
model_args=()
IFS=, read -r -a names <<<"$models"
for f in "${files[@]}"; do
    [ -f "${f#*=}" ] || die "no model file ${f#*=}"
    model_args+=(--model "$f")
done
for name in "${names[@]}"; do
    if [ "$name" = default ]; then
        path=$("$root/deploy/fetch-model.sh" --path)
    else
        path=$("$root/deploy/fetch-model.sh" --path "$name")
    fi
    [ -f "$path" ] || die "model $name not found (deploy/fetch-model.sh $name)"
    model_args+=(--model "$name=$path")
done

args=(--llama-server "$server" --inferd "$inferd" --worker "$worker" --infer "$infer"
      --threads "$threads" --ctx "$ctx" --reps "$reps" --repo "$root" "${model_args[@]}")
[ "$smoke" = 1 ] && args+=(--smoke)
[ -n "$json" ] && args+=(--json "$json")
args+=("${iargs[@]}")
exec python3 "$here/served_vs_llamaserver.py" "${args[@]}"
