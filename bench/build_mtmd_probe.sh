#!/bin/sh
# Builds llama.cpp's llama-mtmd-cli and bench/mtmd_probe.cpp (libmtmd on one image: embeddings,
# greedy tokens, encode time) against an existing llama.cpp build whose shared libraries include
# libmtmd.so (any build with tools on: llama-server links it), without rebuilding llama.cpp.
#
#   bench/build_mtmd_probe.sh [OUT]
#     LLAMACPP_SRC  llama.cpp's source (default: the sdist's vendor/llama.cpp in ~/.cache/inferd)
#     LLAMACPP_LIB  the build's folder of shared libraries (default ~/.cache/inferd/llamacpp-tools/bin,
#                   built Release, -DGGML_NATIVE=ON, AMX compiled out)
#     OUT           where the two binaries go (default ~/.cache/inferd/llamacpp-mtmd/bin); they find
#                   the libraries by rpath. Same compiler flags as llama.cpp's Release (-O3).
set -eu
SRC=${LLAMACPP_SRC:-$HOME/.cache/inferd/llamacpp-src/llama_cpp_python-0.3.36/vendor/llama.cpp}
LIB=${LLAMACPP_LIB:-$HOME/.cache/inferd/llamacpp-tools/bin}
OUT=${1:-$HOME/.cache/inferd/llamacpp-mtmd/bin}
HERE=$(cd "$(dirname "$0")" && pwd)
for f in libmtmd.so libllama.so libllama-common.so libggml.so libggml-base.so; do
    [ -e "$LIB/$f" ] || { echo "build_mtmd_probe: $LIB/$f missing (LLAMACPP_LIB)" >&2; exit 1; }
done
mkdir -p "$OUT"
CXX=${CXX:-c++}
FLAGS="-O3 -DNDEBUG -std=c++17 -march=native -mno-amx-tile -mno-amx-int8 -mno-amx-bf16 -DLLAMA_SHARED -DGGML_SHARED
  -I$SRC/include -I$SRC/ggml/include -I$SRC/common -I$SRC/tools/mtmd -I$SRC/vendor"
LIBS="-L$LIB -Wl,-rpath,$LIB -lmtmd -lllama-common -lllama -lggml -lggml-base -lpthread"
# shellcheck disable=SC2086
$CXX $FLAGS -o "$OUT/mtmd_probe" "$HERE/mtmd_probe.cpp" $LIBS
# shellcheck disable=SC2086
$CXX $FLAGS -o "$OUT/llama-mtmd-cli" "$SRC/tools/mtmd/mtmd-cli.cpp" $LIBS
echo "$OUT/mtmd_probe $OUT/llama-mtmd-cli"
