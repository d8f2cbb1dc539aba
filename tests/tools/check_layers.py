#!/usr/bin/env python3
"""The layering of the source tree, checked (docs/architecture.md, "Map").

Every folder is one library; a library includes headers only of the libraries
it may use (LAYERS below: never one above it), and a private header (named
*_impl.h, or saying it is not a public interface / API) only inside its own folder.
Headers are included by folder from outside ("kvpool/kvpool.h",
"daemon/http.h"); a bare name must be a header of the file's own folder or of
common/'s basics. Prints each violation and exits 1; exits 0 when clean.

    check_layers.py [SOURCE_DIR]
"""
import os
import re
import sys

# library -> the libraries it may include (directly). Order: bottom to top.
LAYERS = {
    'common': set(),
    'modelfile': {'common'},
    'kvpool': {'common', 'modelfile'},
    'tokenizer': {'common', 'modelfile'},
    'jinja': {'common'},
    'chat': {'common', 'modelfile', 'tokenizer', 'jinja'},
    'grammar': {'common', 'modelfile', 'tokenizer'},
    'inspect': {'common', 'modelfile', 'tokenizer'},
    'image': {'common'},
    'kernels': {'common', 'modelfile', 'kvpool'},
    'proto': {'common', 'modelfile', 'tokenizer', 'grammar'},
    'worker': {'common', 'modelfile', 'kvpool', 'tokenizer', 'chat', 'grammar', 'inspect',
               'image', 'kernels', 'proto'},
    'daemon': {'common', 'modelfile', 'kvpool', 'tokenizer', 'chat', 'grammar', 'inspect',
               'image', 'proto'},
    'client': {'common', 'modelfile', 'tokenizer', 'chat', 'image', 'inspect', 'proto'},
}
# folder (relative to the source root) -> library; the longest prefix wins.
FOLDERS = {
    'common': 'common', 'common/modelfile': 'modelfile', 'common/kvpool': 'kvpool',
    'common/tokenizer': 'tokenizer', 'common/chat': 'chat', 'common/chat/jinja': 'jinja',
    'common/grammar': 'grammar', 'common/inspect': 'inspect', 'common/image': 'image',
    'kernels': 'kernels',
    'proto': 'proto', 'worker': 'worker', 'daemon': 'daemon', 'client': 'client',
}
SOURCE = re.compile(r'\.(c|h|cu|cuh|cc)$')
PRIVATE = re.compile(r'Not a public (interface|API)|Not part of the public API|private to |internal to ')
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def library_of(folder):
    best = None
    for f, lib in FOLDERS.items():
        if folder == f or folder.startswith(f + '/'):
            if best is None or len(f) > len(best[0]):
                best = (f, lib)
    return best[1] if best else None


def resolve(root, src_dir, name):
    """The repo-relative path #include "name" in src_dir finds, or None."""
    for base in (src_dir, 'common', 'kernels', ''):
        p = os.path.normpath(os.path.join(base, name))
        if os.path.isfile(os.path.join(root, p)):
            return p, base
    return None, None


def is_private(root, header):
    if header.endswith('_impl.h'):
        return True
    with open(os.path.join(root, header), encoding='utf-8', errors='replace') as f:
        return PRIVATE.search(f.read(4000)) is not None


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), '..', '..'))
    bad = []
    for folder in FOLDERS:
        for name in sorted(os.listdir(os.path.join(root, folder))):
            path = os.path.join(folder, name)
            if not SOURCE.search(name) or not os.path.isfile(os.path.join(root, path)):
                continue
            lib = library_of(folder)
            text = open(os.path.join(root, path), encoding='utf-8', errors='replace').read()
            for inc in INCLUDE.findall(text):
                hdr, base = resolve(root, folder, inc)
                if hdr is None:
                    continue  # a system or generated header
                hlib = library_of(os.path.dirname(hdr))
                if hlib is None:
                    continue  # tests/, third-party shims
                hfolder = os.path.dirname(hdr)
                if hfolder != folder and is_private(root, hdr):
                    bad.append(f'{path}: includes {hdr}, private to {hfolder}/')
                if hlib != lib and hlib not in LAYERS[lib]:
                    bad.append(f'{path}: {lib} may not include {hlib} ({inc})')
                if base != folder and '/' not in inc and hfolder not in ('common', 'kernels'):
                    bad.append(f'{path}: includes "{inc}" by its bare name; write "{hdr if not hdr.startswith("common/") else hdr[7:]}"')
    for b in bad:
        print(b)
    print(f'check_layers: {len(bad)} violation(s)')
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
