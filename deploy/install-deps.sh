#!/usr/bin/env bash
# Installs every build and test dependency of inferd. Idempotent: packages that
# are already present are not reinstalled, and an existing venv is reused.
#
# This is the only file in the tree that knows package names.
#
#   deploy/install-deps.sh            Debian packages + the Python test venv
#   deploy/install-deps.sh --no-venv  Debian packages only
#
# Environment:
#   INFERD_VENV   where the Python test tools go
#                 (default ${XDG_CACHE_HOME:-$HOME/.cache}/inferd/venv)
# Works as root, or as a user with sudo. Never touches the system Python.
set -euo pipefail

DEBS=(
    build-essential cmake ninja-build pkg-config git
    libuv1-dev libmsgpack-dev libjansson-dev check libpcre2-dev
    libxxhash-dev libhttp-parser-dev libsystemd-dev libedit-dev libsimde-dev
    libjpeg62-turbo-dev libpng-dev libwebp-dev libgif-dev libcurl4-openssl-dev
    python3 python3-venv python3-pip curl ca-certificates
    systemd clang
)
# pillow is pinned: test_image_vs_transformers matches its 8-bit resampling
# bit for bit (the pass order of Pillow 13.0.0; docs/vision.md).
PIP_PKGS=(pytest numpy gguf openai httpx tokenizers jinja2 jsonschema pyyaml langchain-openai
          pillow==13.0.0 transformers)

want_venv=1
for a in "$@"; do
    case "$a" in
        --no-venv) want_venv=0 ;;
        -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
        *) echo "install-deps: unknown option '$a'" >&2; exit 2 ;;
    esac
done

if [ "$(id -u)" -eq 0 ]; then
    SUDO=()
elif command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
else
    echo "install-deps: need root or sudo to install Debian packages" >&2
    exit 1
fi

missing=()
for p in "${DEBS[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "install-deps: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    "${SUDO[@]}" apt-get update -qq
    "${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
    echo "install-deps: Debian packages already installed"
fi
# libFuzzer's runtime (tests/fuzz) is only a Recommends of clang: name the one
# of the installed clang's version (libclang-rt-14-dev on Debian 12).
clang_major=$(clang --version 2>/dev/null | sed -n 's/.*clang version \([0-9]*\).*/\1/p' | head -1)
if [ -n "$clang_major" ]; then
    rt="libclang-rt-$clang_major-dev"
    if ! dpkg-query -W -f='${Status}' "$rt" 2>/dev/null | grep -q "install ok installed"; then
        echo "install-deps: installing $rt (libFuzzer)"
        export DEBIAN_FRONTEND=noninteractive
        "${SUDO[@]}" apt-get install -y -qq --no-install-recommends "$rt" ||
            echo "install-deps: $rt is not available: the fuzz runs will skip" >&2
    fi
fi

if [ "$want_venv" -eq 1 ]; then
    venv="${INFERD_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/inferd/venv}"
    if [ ! -x "$venv/bin/python" ]; then
        echo "install-deps: creating Python venv at $venv"
        mkdir -p "$(dirname "$venv")"
        python3 -m venv "$venv"
    fi
    if ! "$venv/bin/python" -c 'import pytest, numpy, gguf, openai, httpx, tokenizers, jinja2, jsonschema, yaml, langchain_openai, PIL, transformers' 2>/dev/null; then
        echo "install-deps: installing ${PIP_PKGS[*]} into $venv"
        "$venv/bin/python" -m pip install -q --upgrade pip
        "$venv/bin/python" -m pip install -q "${PIP_PKGS[@]}"
    else
        echo "install-deps: Python test tools already in $venv"
    fi
fi
echo "install-deps: done"
