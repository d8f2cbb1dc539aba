#!/usr/bin/env bash
# The main job: build inferd, inspect the default model and let it answer
# "Explain paged attention in one paragraph." (offline, through
# inferd-worker; the daemon path replaces this once the router lands).
set -euo pipefail
cd "$(dirname "$0")"
BUILD_DIR=${BUILD_DIR:-build}
GEN=()
command -v ninja >/dev/null 2>&1 && GEN=(-G Ninja)
cmake -S . -B "$BUILD_DIR" "${GEN[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)"
model=$(deploy/fetch-model.sh --path)
"$BUILD_DIR/worker/inferd-worker" --inspect "$model" | head -n 32
echo
echo "> Explain paged attention in one paragraph."
"$BUILD_DIR/worker/inferd-worker" --model "$model" -n 256 \
    --prompt "Explain paged attention in one paragraph."
