#!/usr/bin/env python3
"""kv_accuracy_vs_llamacpp.py — the KV types' accuracy, inferd next to llama.cpp (JSON).

The measurements of the accuracy guard (tests/oracle/kv_guard.py, docs/kvpool.md
"Accuracy guard") for llama.cpp's K/V cache types (-ctk/-ctv f16, q8_0, q4_0, flash
attention on) on the same model, prompts and token ids, with inferd's figures measured in
the same run beside them. A measurement, not a test: nothing here has a bound.

  oracle  the oracle prompts (tests/oracle/prompts.json), 32 greedy tokens, on exact
          weights (inferd: --weights-dtype f32; llama.cpp: the same GGUF requantized to
          F32 by llama-quantize, i.e. the dequantized weights the oracle uses): every row's
          logits (prompt positions and generated steps) against the float64 NumPy oracle
          scoring the same tokens: max / median relative L2, top-1 agreement, greedy
          tokens equal to the oracle's.
  held    the held prompts (kv_prompts.json) on the default (quantized) weights: 48 greedy
          tokens from the token ids inferd's chat template gives, each KV type against the
          same engine's f16 KV (agreement length per prompt); and llama.cpp's f16 against
          inferd's f16.
  ppl     the long-context text (kv_long_context.txt, raw, 4.5k tokens) on the default
          weights: the mean negative log-likelihood of every token given the ones before it
          in one context (the same token ids for both engines; inferd's from its logit
          dump), and llama.cpp's own llama-perplexity on the same text (-c 1024: its
          chunked figure, scoring each chunk's second half) when the tool is built.

llama.cpp's side is bench/kv_accuracy_llamacpp.c (compiled here against the shared
libllama of --llama-bin, into --work) and llama-perplexity (built into --work by
compiling the sdist's tools/perplexity against the same libraries; AMX compiled out).

    kv_accuracy_vs_llamacpp.py [--worker build/worker/inferd-worker] [--model GGUF]
        [--parts oracle,held,ppl] [--types f16,q8_0,q4_0] [--threads 1] [--no-ours]
        [--llama-bin ~/.cache/inferd/llamacpp-tools/bin] [--llama-src DIR]
        [--work ~/.cache/inferd/llamacpp-kvacc]

Progress on stderr, one JSON object on stdout. Took 28 minutes on a loaded 2-core machine.
"""

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ORACLE = os.path.join(ROOT, "tests", "oracle")
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, ORACLE)
sys.dont_write_bytecode = True
import model_paths  # noqa: E402
from kv_guard import agree, worker_run  # noqa: E402

HOME = os.path.expanduser("~")
AMX_OFF = ["-mno-amx-tile", "-mno-amx-int8", "-mno-amx-bf16"]


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def llama_src(a):
    if a.llama_src:
        return a.llama_src
    hits = sorted(glob.glob(os.path.join(HOME, ".cache/inferd/llamacpp-src/*/vendor/llama.cpp")))
    if not hits:
        sys.exit("no llama.cpp source: give --llama-src")
    return hits[-1]


def build_tools(a):
    """kvacc (bench/kv_accuracy_llamacpp.c), llama-perplexity (best effort) and the F32
    GGUF, into a.work; paths in a."""
    os.makedirs(a.work, exist_ok=True)
    src, lib = llama_src(a), a.llama_bin
    inc = ["-I" + os.path.join(src, "include"), "-I" + os.path.join(src, "ggml", "include")]
    link = ["-L" + lib, "-Wl,-rpath," + lib]
    a.kvacc = os.path.join(a.work, "kvacc")
    csrc = os.path.join(ROOT, "bench", "kv_accuracy_llamacpp.c")
    if not os.path.exists(a.kvacc) or os.path.getmtime(a.kvacc) < os.path.getmtime(csrc):
        subprocess.run(["cc", "-O2", "-Wall"] + AMX_OFF + inc + ["-o", a.kvacc, csrc] + link +
                       ["-lllama", "-lggml", "-lggml-base", "-lm"], check=True)
    a.perplexity = os.path.join(a.work, "llama-perplexity")
    if not os.path.exists(a.perplexity):
        pdir = os.path.join(src, "tools", "perplexity")
        cmd = (["c++", "-O2", "-std=c++17", "-DGGML_BACKEND_SHARED", "-DGGML_SHARED",
                "-DGGML_USE_CPU", "-DLLAMA_SHARED", "-I" + pdir, "-I" + os.path.join(src, "common"),
                "-I" + os.path.join(src, "vendor")] + AMX_OFF + inc +
               ["-o", a.perplexity, os.path.join(pdir, "perplexity.cpp"),
                os.path.join(pdir, "main.cpp")] + link +
               ["-lllama-common", "-lllama", "-lggml", "-lggml-base", "-lpthread"])
        log("building llama-perplexity (a few minutes)")
        if subprocess.run(cmd).returncode != 0:
            log("llama-perplexity did not build: its figure is left out")
            a.perplexity = None
    a.f32 = os.path.join(a.work, os.path.basename(a.model).rsplit(".", 2)[0] + ".F32.gguf")
    if "oracle" in a.parts and not os.path.exists(a.f32):
        log("requantizing the model to F32 for the exact-weights part")
        subprocess.run([os.path.join(lib, "llama-quantize"), "--allow-requantize", a.model,
                        a.f32 + ".tmp", "F32"], check=True, capture_output=True)
        os.rename(a.f32 + ".tmp", a.f32)


def kvacc(a, model, kv, mode, n, ids, dump=None):
    with tempfile.NamedTemporaryFile("w", suffix=".ids", dir=a.tmp, delete=False) as f:
        f.write(" ".join(map(str, ids)))
    cmd = [a.kvacc, model, kv, kv, str(a.threads), mode, str(n), f.name] + ([dump] if dump else [])
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    os.unlink(f.name)
    if p.returncode != 0:
        raise RuntimeError(f"kvacc {kv} {mode}: exit {p.returncode}: {p.stderr[-800:]}")
    return json.loads([ln for ln in p.stdout.splitlines() if ln.startswith("{")][-1])


def rows_vs_oracle(np, w, o, n_prompt, toks):
    rows = min(w.shape[0], o.shape[0])
    w, o = w[:rows].astype(np.float64), o[:rows]
    rel = np.linalg.norm(w - o, axis=1) / np.linalg.norm(o, axis=1)
    top1 = float(np.mean(np.argmax(w, axis=1) == np.argmax(o, axis=1)))
    ot = [int(x) for x in np.argmax(o[n_prompt - 1:], axis=1)]
    return {"rows": int(rows), "rel_l2_max": float(rel.max()), "rel_l2_median": float(np.median(rel)),
            "top1": top1, "greedy_equal_oracle": agree(toks, ot)}


def part_oracle(a, out):
    import numpy as np
    from llama_oracle import LlamaOracle
    with open(os.path.join(ORACLE, "prompts.json"), encoding="utf-8") as f:
        prompts = json.load(f)["prompts"]
    t = time.perf_counter()
    oracle = LlamaOracle(a.model)
    log(f"oracle loaded in {time.perf_counter() - t:.0f}s")
    scored = {}
    res = {"llamacpp": {}, "inferd": {}}
    for kv in a.types:
        for p in prompts:
            ids = p["ids"]
            for eng in (["llamacpp"] + ([] if a.no_ours else ["inferd"])):
                dump = os.path.join(a.tmp, f"o-{eng}-{kv}-{p['name']}.npy")
                if eng == "llamacpp":
                    toks = kvacc(a, a.f32, kv, "gen", a.n, ids, dump)["tokens"]
                else:
                    wj = worker_run(a.worker, a.model, ["--prompt-ids", " ".join(map(str, ids)),
                                                        "--weights-dtype", "f32", "--kv-dtype", kv],
                                    a.n, dump)
                    toks = [int(x) for x in wj["tokens"]]
                seq = tuple(ids + toks[:-1])
                if seq not in scored:
                    scored[seq] = oracle.score(list(seq))
                r = rows_vs_oracle(np, np.load(dump), scored[seq], len(ids), toks)
                os.unlink(dump)
                res[eng].setdefault(kv, {})[p["name"]] = r
                log(f"[oracle {eng} {kv} {p['name']}] {r}")
    out["oracle"] = res


def part_held(a, out):
    with open(os.path.join(ORACLE, "kv_prompts.json"), encoding="utf-8") as f:
        held = json.load(f)["held"]
    ours = {kv: [] for kv in ("f16",) + tuple(t for t in a.types if t != "f16")}
    ids = []
    for h in held:  # inferd's runs give the chat-templated prompt ids both engines read
        for kv in ours:
            if kv != "f16" and a.no_ours:
                continue
            wj = worker_run(a.worker, a.model, ["--prompt", h["user"], "--kv-dtype", kv], 48)
            ours[kv].append([int(x) for x in wj["tokens"]])
            if kv == "f16":
                ids.append([int(x) for x in wj["prompt_tokens"]])
    theirs = {kv: [kvacc(a, a.model, kv, "gen", 48, i)["tokens"] for i in ids] for kv in ours}
    res = {"prompts": [h["name"] for h in held], "prompt_tokens": [len(i) for i in ids],
           "llamacpp": {}, "inferd": {}}
    for eng, toks in (("llamacpp", theirs), ("inferd", ours)):
        for kv in ours:
            if kv == "f16" or not toks[kv]:
                continue
            lens = [agree(x, y) for x, y in zip(toks[kv], toks["f16"])]
            res[eng][kv] = {"agreement_vs_f16": lens, "mean": sum(lens) / len(lens),
                            "all_48_equal": sum(1 for n in lens if n >= 48)}
            log(f"[held {eng} {kv}] {res[eng][kv]}")
    lens = [agree(x, y) for x, y in zip(theirs["f16"], ours["f16"])]
    res["llamacpp_f16_vs_inferd_f16"] = {"agreement": lens, "mean": sum(lens) / len(lens)}
    log(f"[held llama.cpp f16 vs inferd f16] {lens}")
    out["held"] = res


def nll_from_dump(np, dump, ids):
    w = np.load(dump, mmap_mode="r")
    total, n = 0.0, len(ids) - 1
    for s in range(0, n, 256):
        x = np.asarray(w[s:min(s + 256, n)], dtype=np.float64)
        m = x.max(axis=1)
        lse = m + np.log(np.exp(x - m[:, None]).sum(axis=1))
        total += float((lse - x[np.arange(x.shape[0]), ids[s + 1:s + 1 + x.shape[0]]]).sum())
    return total / n


def part_ppl(a, out):
    import math
    import numpy as np
    with open(os.path.join(ORACLE, "kv_prompts.json"), encoding="utf-8") as f:
        spec = json.load(f)["long"]
    path = os.path.join(ORACLE, spec["file"])
    with open(path, encoding="utf-8") as f:
        text = f.read()
    res = {"text": "tests/oracle/" + spec["file"], "llamacpp": {}, "inferd": {}}
    ids = None
    for kv in a.types:
        if not a.no_ours or ids is None:
            dump = os.path.join(a.tmp, f"ppl-{kv}.npy")
            wj = worker_run(a.worker, a.model, ["--prompt", text, "--raw", "--kv-dtype", kv], 1, dump)
            ids = ids or [int(x) for x in wj["prompt_tokens"]]
            if not a.no_ours:
                nll = nll_from_dump(np, dump, ids)
                res["inferd"][kv] = {"nll": nll, "ppl": math.exp(nll)}
                log(f"[ppl inferd {kv}] {res['inferd'][kv]}")
            os.unlink(dump)
        r = kvacc(a, a.model, kv, "nll", 0, ids)
        res["llamacpp"][kv] = {"nll": r["nll"], "ppl": r["ppl"]}
        if a.perplexity:
            p = subprocess.run([a.perplexity, "-m", a.model, "-f", path, "-c", "1024", "-b", "1024",
                                "-t", str(a.threads), "-ctk", kv, "-ctv", kv, "-fa", "on"],
                               capture_output=True, text=True, timeout=1800)
            est = [ln for ln in (p.stdout + p.stderr).splitlines() if "Final estimate" in ln]
            if p.returncode == 0 and est:
                res["llamacpp"][kv]["llama_perplexity_c1024"] = est[-1].split("Final estimate:")[-1].strip()
            else:
                res["llamacpp"][kv]["llama_perplexity_c1024"] = f"failed (exit {p.returncode})"
        log(f"[ppl llama.cpp {kv}] {res['llamacpp'][kv]}")
    res["tokens"] = len(ids)
    out["ppl"] = res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worker", default=os.path.join(ROOT, "build", "worker", "inferd-worker"))
    ap.add_argument("--model", default=None)
    ap.add_argument("--parts", default="oracle,held,ppl")
    ap.add_argument("--types", default="f16,q8_0,q4_0")
    ap.add_argument("--threads", type=int, default=1,
                    help="llama.cpp's threads (1: its logits are the same with 2, and two spin "
                         "at their barriers on a loaded 2-core machine)")
    ap.add_argument("-n", type=int, default=32, help="oracle part: greedy tokens (32)")
    ap.add_argument("--no-ours", action="store_true", help="llama.cpp's figures only")
    ap.add_argument("--llama-bin", default=os.path.join(HOME, ".cache/inferd/llamacpp-tools/bin"))
    ap.add_argument("--llama-src", default=None)
    ap.add_argument("--work", default=os.path.join(HOME, ".cache/inferd/llamacpp-kvacc"))
    a = ap.parse_args()
    a.model = a.model or model_paths.model_path("smollm2")
    a.parts = [p for p in a.parts.split(",") if p]
    a.types = [t for t in a.types.split(",") if t]
    if "f16" not in a.types:
        a.types.insert(0, "f16")
    if not os.access(a.worker, os.X_OK):
        sys.exit(f"no inferd-worker at {a.worker}")
    build_tools(a)
    out = {"model": os.path.basename(a.model), "threads": a.threads, "types": a.types,
           "llamacpp": {"lib": a.llama_bin, "flash_attn": True}}
    t = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="inferd-kvacc-") as tmp:
        a.tmp = tmp
        for part in a.parts:
            {"oracle": part_oracle, "held": part_held, "ppl": part_ppl}[part](a, out)
    out["seconds"] = round(time.perf_counter() - t)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
