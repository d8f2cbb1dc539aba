#!/usr/bin/env bash
# vision_vs_mtmd.sh — the encode time of one 896² image with google/gemma-3-4b's vision tower
# (random weights), inferd against llama.cpp's mtmd on the SAME mmproj GGUF (issue 28 item 8;
# docs/benchmarks.md "Vision tower", docs/vision.md).
#
#   bench/vision_vs_mtmd.sh [--rounds N] [--reps N] [--threads N] [--mmproj F] [--text F]
#
# Needs: build/bench/bench_vision (cmake --build build --target bench_vision); mtmd_probe
# (bench/build_mtmd_probe.sh: libmtmd of a llama.cpp build); the files of
# tools/make_gemma3_4b_mmproj.py (default ~/.cache/inferd/shapes/mmproj-gemma-3-4b-random-f16.gguf
# and gemma-3-4b-vision-text1.gguf — libmtmd needs a text model of the projection's width).
# Each round runs inferd (bench_vision --mmproj) then llama.cpp (mtmd_probe --random), each
# process one warm-up encode then --reps timed ones, same thread count (default 2); what is
# timed: from normalized pixels to the projector's 256 rows (inferd: ifd_vision_encode;
# llama.cpp: mtmd_encode_chunk, clip's graph with its default flash attention "auto"). Loading
# and preprocessing are outside both. → one JSON object on stdout (progress on stderr).
# Figures count only from a quiet machine.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
rounds=3 reps=1 threads=2
shapes=$HOME/.cache/inferd/shapes
mmproj=$shapes/mmproj-gemma-3-4b-random-f16.gguf
text=$shapes/gemma-3-4b-vision-text1.gguf
bench=${BENCH_VISION:-$ROOT/build/bench/bench_vision}
probe=${MTMD_PROBE:-$HOME/.cache/inferd/llamacpp-mtmd/bin/mtmd_probe}
while [ $# -gt 0 ]; do
    case $1 in
        --rounds) rounds=$2; shift 2 ;;
        --reps) reps=$2; shift 2 ;;
        --threads) threads=$2; shift 2 ;;
        --mmproj) mmproj=$2; shift 2 ;;
        --text) text=$2; shift 2 ;;
        *) echo "usage: $0 [--rounds N] [--reps N] [--threads N] [--mmproj F] [--text F]" >&2; exit 2 ;;
    esac
done
for f in "$bench" "$probe"; do
    [ -x "$f" ] || { echo "vision_vs_mtmd: $f missing (see the header)" >&2; exit 1; }
done
for f in "$mmproj" "$text"; do
    [ -f "$f" ] || { echo "vision_vs_mtmd: $f missing (tools/make_gemma3_4b_mmproj.py)" >&2; exit 1; }
done
py=${INFERD_PYTHON:-python3}
ours=() theirs=()
inferd_line='' mtmd_line=''
for ((r = 1; r <= rounds; r++)); do
    inferd_line=$("$bench" --mmproj "$mmproj" --threads "$threads" --reps "$reps")
    ms=$("$py" -c 'import json,sys; print(json.loads(sys.argv[1])["encode_ms"]["median"])' "$inferd_line")
    ours+=("$ms")
    echo "round $r: inferd $ms ms" >&2
    mtmd_line=$("$probe" --model "$text" --mmproj "$mmproj" --random --threads "$threads" --reps "$reps" 2>/dev/null)
    ms=$("$py" -c 'import json,sys; print(json.loads(sys.argv[1])["encode_ms"]["median"])' "$mtmd_line")
    theirs+=("$ms")
    echo "round $r: llama.cpp $ms ms" >&2
done
"$py" - "$mmproj" "$threads" "$rounds" "$reps" "$inferd_line" "$mtmd_line" "${ours[*]}" "${theirs[*]}" <<'PY'
import json, statistics, sys
mm, threads, rounds, reps, il, ml, ours, theirs = sys.argv[1:]
ours = [float(x) for x in ours.split()]
theirs = [float(x) for x in theirs.split()]
i, m = json.loads(il), json.loads(ml)
if i["tokens"] != m["image_tokens"] or i["text_width"] != m["text_width"]:
    sys.exit("vision_vs_mtmd: the engines disagree on the shape: inferd %d tokens of %d, "
             "llama.cpp %d of %d" % (i["tokens"], i["text_width"], m["image_tokens"],
                                     m["text_width"]))
if (i["image_size"], i["layers"], i["width"], i["tokens"]) != (896, 27, 1152, 256):
    print("vision_vs_mtmd: note: not gemma-3-4b's tower shape", file=sys.stderr)
o = {"bench": "vision_vs_mtmd", "mmproj": mm, "threads": int(threads), "rounds": int(rounds),
     "reps_per_round": int(reps), "image_size": i["image_size"], "layers": i["layers"],
     "width": i["width"], "tokens": i["tokens"], "text_width": i["text_width"],
     "llamacpp_image_tokens": m["image_tokens"], "llamacpp_flash_attn": m["flash_attn"],
     "inferd_encode_ms": {"per_round": ours, "median": statistics.median(ours), "min": min(ours)},
     "llamacpp_encode_ms": {"per_round": theirs, "median": statistics.median(theirs),
                            "min": min(theirs)},
     "inferd_over_llamacpp_median": statistics.median(ours) / statistics.median(theirs)}
print(json.dumps(o))
PY
