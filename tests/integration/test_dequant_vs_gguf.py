"""test_dequant_vs_gguf.py TOOL — ifd_cpu_dequantize against the PyPI gguf
package's dequantizers (gguf.quants.dequantize), an independent implementation.

TOOL is tests/tools/dequant_dump. Two parts:
  1. Model tensors: for the default model (SmolLM2 Q4_1) and Gemma 3 270M
     (Q4_K_M), up to three of the smallest tensors of every type present
     (Q4_1, Q8_0, F32; Q4_K, Q5_0, Q6_K, Q8_0, F32). Where each tensor's bytes
     lie comes from `TOOL --list` (inferd's GGUF reader, tested on its own);
     gguf-py decodes those raw bytes.
  2. Random blocks of every type inferd supports (including those no model
     here uses: Q4_0, Q5_1, Q2_K, Q3_K, Q5_K, IQ4_NL, F16, BF16), with finite
     fp16 scale fields.
Every element must agree bit for bit or within 1 ulp (the report gives the
counts; inferd's arithmetic order matches ggml's, so 0 ulp is expected).

Exit 77 (skip) when numpy/gguf are missing or no model is present. Gemma is
used when deploy/fetch-model.sh gemma3 has fetched it; its absence is reported.
"""
import collections
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.dont_write_bytecode = True
import model_paths  # noqa: E402  (tests/model_paths.py)

try:
    import numpy as np
    import gguf
    from gguf.quants import dequantize
except ImportError as e:  # pragma: no cover
    print(f"SKIPPED: Python test tools missing ({e}); run deploy/install-deps.sh",
          file=sys.stderr)
    sys.exit(77)

TOOL = sys.argv[1]
MAX_PER_TYPE = 3
MAX_ELEMS_PER_TYPE = 40_000_000



def ulp_diff(a, b):
    """|a − b| in units in the last place, via the ordered-integer view."""
    def ordered(x):
        i = x.view(np.int32).astype(np.int64)
        return np.where(i < 0, -(i & 0x7FFFFFFF), i)
    return np.abs(ordered(a) - ordered(b))


failures = []
report = collections.defaultdict(lambda: [0, 0, 0, 0])  # type -> tensors, elems, 1ulp, worse


def compare(label, tname, ours, ref):
    ref = np.ascontiguousarray(ref, dtype=np.float32).ravel()
    ours = ours.ravel()
    if ours.shape != ref.shape:
        failures.append(f"{label}: shape {ours.shape} vs gguf {ref.shape}")
        return
    same_nan = np.isnan(ours) & np.isnan(ref)
    d = np.where(same_nan, 0, ulp_diff(ours, ref))
    r = report[tname]
    r[0] += 1
    r[1] += ours.size
    r[2] += int(np.count_nonzero(d == 1))
    r[3] += int(np.count_nonzero(d > 1))
    if np.count_nonzero(d > 1):
        i = int(np.argmax(d))
        failures.append(f"{label}: {np.count_nonzero(d > 1)} elements differ by > 1 ulp; "
                        f"first worst at {i}: inferd {ours[i]!r} gguf {ref[i]!r}")


def check_model(path, tmp):
    """Tensors located by the tool's --list (gguf-py's GGUFReader takes tens of
    seconds on Gemma's 262k-token vocabulary); their raw bytes are read here
    and decoded by gguf-py."""
    short = os.path.basename(path).split("-")[0].lower()
    out = subprocess.run([TOOL, "--list", path], capture_output=True, text=True)
    if out.returncode != 0:
        failures.append(f"{TOOL} --list {path}: exit {out.returncode}: {out.stderr.strip()}")
        return
    by_type = collections.defaultdict(list)
    for line in out.stdout.splitlines():
        name, tname, n, off, nbytes = line.split()
        by_type[tname].append((int(n), name, int(off), int(nbytes)))
    chosen = []
    for tname, ts in sorted(by_type.items()):
        total = 0
        for n, name, off, nbytes in sorted(ts)[:MAX_PER_TYPE]:
            if total > 0 and total + n > MAX_ELEMS_PER_TYPE:
                break
            chosen.append((name, tname, n, off, nbytes))
            total += n
    out = subprocess.run([TOOL, path, tmp, *[c[0] for c in chosen]],
                         capture_output=True, text=True)
    if out.returncode != 0:
        failures.append(f"{TOOL} {path}: exit {out.returncode}: {out.stderr.strip()}")
        return
    for k, (name, tname, n, off, nbytes) in enumerate(chosen):
        ours = np.load(os.path.join(tmp, f"{k}.npy"))
        raw = np.fromfile(path, dtype=np.uint8, count=nbytes, offset=off)
        ref = dequantize(raw, gguf.GGMLQuantizationType[tname])
        if ref.size != n:
            failures.append(f"{short}:{name}: gguf-py gives {ref.size} elements, want {n}")
            continue
        compare(f"{short}:{name} ({tname})", f"{short} {tname}", ours, ref)
        os.unlink(os.path.join(tmp, f"{k}.npy"))


# type name -> (ggml id, block elements, block bytes, offsets of fp16 fields)
RANDOM_TYPES = {
    "F32": (0, 1, 4, []), "F16": (1, 1, 2, []), "BF16": (30, 1, 2, []),
    "Q4_0": (2, 32, 18, [0]), "Q4_1": (3, 32, 20, [0, 2]), "Q5_0": (6, 32, 22, [0]),
    "Q5_1": (7, 32, 24, [0, 2]), "Q8_0": (8, 32, 34, [0]), "IQ4_NL": (20, 32, 18, [0]),
    "Q2_K": (10, 256, 84, [80, 82]), "Q3_K": (11, 256, 110, [108]),
    "Q4_K": (12, 256, 144, [0, 2]), "Q5_K": (13, 256, 176, [0, 2]),
    "Q6_K": (14, 256, 210, [208]),
}


def check_random(tmp):
    rng = np.random.default_rng(1234)
    for name, (tid, be, bb, offs) in RANDOM_TYPES.items():
        nb = 4096 if be == 256 else 32768
        raw = rng.integers(0, 256, size=(nb, bb), dtype=np.uint8)
        for off in offs:
            h = (rng.standard_normal(nb) * 10.0 ** rng.uniform(-4, 1, nb)).astype(np.float16)
            raw[:, off:off + 2] = h.view(np.uint8).reshape(nb, 2)
        if name in ("F32", "BF16"):
            raw[:, -1] &= 0xBF  # top exponent bit clear: finite
        if name == "F16":
            raw[:, 1] &= 0xBB   # exponent < 31: finite
        bin_path = os.path.join(tmp, f"{name}.bin")
        npy_path = os.path.join(tmp, f"{name}.npy")
        raw.tofile(bin_path)
        n = nb * be
        out = subprocess.run([TOOL, "--raw", str(tid), str(n), bin_path, npy_path],
                             capture_output=True, text=True)
        if out.returncode != 0:
            failures.append(f"{TOOL} --raw {name}: exit {out.returncode}: {out.stderr.strip()}")
            continue
        ref = dequantize(raw.reshape(-1), gguf.GGMLQuantizationType[name])
        compare(f"random {name}", "random " + name, np.load(npy_path), ref)


def main():
    default = model_paths.model_path()
    gemma = model_paths.model_path("gemma3")
    models = [p for p in (default, gemma) if os.path.isfile(p)]
    if not os.path.isfile(default):
        print(f"SKIPPED: default model not found at {default} (run deploy/fetch-model.sh)",
              file=sys.stderr)
        sys.exit(77)
    if not os.path.isfile(gemma):
        print(f"NOTE: {gemma} not present (deploy/fetch-model.sh gemma3): "
              "its Q4_K/Q5_0/Q6_K tensors are not checked, only random blocks of those types")
    with tempfile.TemporaryDirectory(prefix="inferd-dequant-") as tmp:
        for m in models:
            t0 = time.monotonic()
            check_model(m, tmp)
            print(f"{os.path.basename(m)}: {time.monotonic() - t0:.1f} s")
        t0 = time.monotonic()
        check_random(tmp)
        print(f"random blocks: {time.monotonic() - t0:.1f} s")
    for tname, (nt, ne, one, worse) in sorted(report.items()):
        print(f"{tname:16s} tensors {nt:2d}  elements {ne:10d}  1-ulp {one:6d}  worse {worse}")
    if failures:
        for f in failures:
            print("FAIL:", f, file=sys.stderr)
        sys.exit(1)
    print("OK: inferd dequantization matches gguf-py")


if __name__ == "__main__":
    main()
