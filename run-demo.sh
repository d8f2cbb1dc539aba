#!/usr/bin/env bash
# The main job: build inferd, start the daemon on the default model, stream
# the answer to "Explain paged attention in one paragraph." through its Unix
# socket (curl --unix-socket, OpenAI's SSE format), then stop the daemon with
# SIGTERM (a graceful drain).
#
# Environment: BUILD_DIR (default build), INFERD_DEMO_PROMPT (another prompt).
set -euo pipefail
cd "$(dirname "$0")"
BUILD_DIR=${BUILD_DIR:-build}
GEN=()
command -v ninja >/dev/null 2>&1 && GEN=(-G Ninja)
cmake -S . -B "$BUILD_DIR" "${GEN[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)"
model=$(deploy/fetch-model.sh --path)
prompt=${INFERD_DEMO_PROMPT:-Explain paged attention in one paragraph.}

"$BUILD_DIR/worker/inferd-worker" --inspect "$model" | sed -n "1,12p"
echo

tmp=$(mktemp -d)
sock=$tmp/inferd.sock
"$BUILD_DIR/daemon/inferd" --model "$model" --socket "$sock" --kv-budget 256M \
    >"$tmp/inferd.log" 2>&1 &
pid=$!
stop() {
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid"
        wait "$pid" || { echo "inferd exited with $?" >&2; cat "$tmp/inferd.log" >&2; }
    fi
    rm -rf "$tmp"
}
trap stop EXIT

echo "== inferd (pid $pid) is loading $model"
for _ in $(seq 600); do
    curl -sf --unix-socket "$sock" http://localhost/health >/dev/null 2>&1 && break
    if ! kill -0 "$pid" 2>/dev/null; then
        cat "$tmp/inferd.log" >&2
        exit 1
    fi
    sleep 0.1
done
curl -sf --unix-socket "$sock" http://localhost/health >/dev/null || {
    cat "$tmp/inferd.log" >&2
    exit 1
}
echo "== ready on $sock; streaming the answer to: $prompt"
echo

esc=$(printf '%s' "$prompt" | sed 's/\\/\\\\/g; s/"/\\"/g')
body=$(printf '{"messages":[{"role":"user","content":"%s"}],"max_tokens":256,"temperature":0,"stream":true}' \
       "$esc")
show() {
    # print each SSE chunk's content as it arrives
    if command -v python3 >/dev/null 2>&1; then
        python3 -u -c '
import json, sys
for line in sys.stdin:
    line = line.strip()
    if line.startswith("data: ") and line != "data: [DONE]":
        o = json.loads(line[6:])
        if "error" in o:
            sys.exit("error: " + o["error"]["message"])
        for c in o["choices"]:
            print(c["delta"].get("content") or "", end="", flush=True)
print()'
    else
        cat
    fi
}
curl -sN --unix-socket "$sock" http://localhost/v1/chat/completions \
    -H 'Content-Type: application/json' -d "$body" | show
echo
echo "== stopping inferd"
