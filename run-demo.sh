#!/usr/bin/env bash
# The main job: build inferd and run the default model.
# Today: build, then inspect the default model (the runtime and the daemon
# are still landing; see README.md "Status").
set -euo pipefail
cd "$(dirname "$0")"
BUILD_DIR=${BUILD_DIR:-build}
GEN=()
command -v ninja >/dev/null 2>&1 && GEN=(-G Ninja)
cmake -S . -B "$BUILD_DIR" "${GEN[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)"
model=$(deploy/fetch-model.sh --path)
"$BUILD_DIR/worker/inferd-worker" --inspect "$model"
