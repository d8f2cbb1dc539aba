#!/usr/bin/env python3
"""bench/gpu_vs_hf.py — inferd's CUDA backend raced against Hugging Face transformers on
the same random-weight Llama-3.2-3B-Instruct-shaped model (issue 13, item 9). Run by
tests/gpu/check.sh on the device machine after the tests; prints progress to stderr and
writes one JSON object (--out, rewritten after every part, so a run cut short keeps what
it measured).

    gpu_vs_hf.py --build CMAKE_BUILD [--work DIR] [--out F.json] [--time-limit S]
    gpu_vs_hf.py --tiny --cpu --build build     # the whole flow on a CPU, tiny shape

The model: deploy/shapes/llama-3.2-3b.json (--tiny: a 2-layer shape) with Llama 3.2's
config.json extras (llama3 rope scaling, tied embeddings), written once as a Hugging Face
directory (config.json, model.safetensors in bf16, a byte-level tokenizer.json with the
shape's vocabulary size) that both transformers (LlamaForCausalLM.from_pretrained) and
inferd load: identical weights by construction. The values are seeded pseudo-random:
each tensor is a window, at an offset hashed from its name, of one seeded uniform pool
of 2^24 + 7 values (--tiny: 2^16 + 7), scaled to U(-a, a), a = sqrt(3 / columns)
(norm weights 1 + U(-0.1, 0.1); the tied embedding U(-0.1, 0.1), small beside the layers'
unit-variance outputs, so greedy decoding does not just repeat a token). Speed does not
depend on the values; 3.2e9 independent draws would eat the time budget. Never zeros
(METHOD.md: zeros can run faster than data).

Parts (tokens are ids; no text anywhere):
  (a) 256 new tokens, greedy, from a 32-token prompt, use_cache on and off, both
      engines; whether the greedy tokens agree (random weights: bf16 rounding
      differences flip near-ties, so a divergence is information, not a failure);
  (b) batch-1 decode tok/s of both (inferd: inferd-worker's decode_tok_s; transformers:
      (256 - 1) tokens over generate(256) minus generate(1)), and inferd's achieved
      bandwidth = bf16 weight bytes (the file's, every weight read once per token; the
      tied embedding once, as the output matrix) x tok/s, as a fraction of the device-to-device copy
      bandwidth measured in this run (torch; --cpu: a NumPy copy);
  (c) output tok/s of 64 concurrent requests of 512 prompt / 256 output tokens through
      the daemon: `inferd --gpus 0` (--cpu: one CPU worker) on a Unix socket and
      `infer bench serve -c 64` (streaming /v1/completions, ignore_eos, greedy; vLLM's
      definitions). The daemon needs tier B's carried libraries (libuv, http-parser,
      systemd...) and a CUDA worker path; when it cannot start (an older inferd refuses
      --gpus) the note says why and bench_engine --backend cuda drives the worker's
      engine directly instead (closed loop, max_seqs 64: the same engine and backend
      without HTTP);
  (d) time to first token of a 2048-token prompt (inferd-worker's ttft_ms, the first
      request of a fresh process, so cold: first-use costs included; transformers:
      generate(max_new_tokens=1), synchronised, cold (first 2048-token call) and warm).
transformers runs in PyTorch eager mode (no torch.compile), default attention (sdpa),
bf16 on the GPU (--cpu: f32 on the CPU). Without torch or transformers that half is
skipped with a note and inferd's half still runs (this machine's test venv has no torch
on purpose: CI stays fast); with --cpu the independent NumPy reference
tests/oracle/llama_oracle.py (float64, reading the same directory) then takes its place for
part (a)'s tokens and every logit row ("reference": tokens, logits_rel_l2_max against
inferd's --dump-logits), which is what tests/integration/test_gpu_vs_hf_tiny.sh checks.
"""

from __future__ import annotations

import argparse
import gc
import http.client
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
import zlib

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Llama 3.2's config.json fields that deploy/shapes/ does not carry.
LLAMA32 = dict(rope_scaling={"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                             "original_max_position_embeddings": 8192, "rope_type": "llama3"},
               tie_word_embeddings=True)
TINY_SHAPE = {"name": "tiny llama (gpu_vs_hf --tiny)", "arch": "llama", "n_layer": 2,
              "n_embd": 128, "n_ff": 256, "n_head": 4, "n_head_kv": 2, "head_dim": 32,
              "n_vocab": 512, "n_ctx_train": 4096, "rms_eps": 1e-5, "rope_base": 500000.0}
# the sizes of the four parts, full and --tiny
SIZES = {"full": dict(prompt=32, new=256, conc=64, c_in=512, c_out=256, budget=4096,
                      ttft=2048),
         "tiny": dict(prompt=16, new=32, conc=8, c_in=48, c_out=16, budget=256, ttft=256)}
POOLS = {"full": (1 << 24) + 7, "tiny": (1 << 16) + 7}


def log(*a):
    print("gpu_vs_hf:", *a, file=sys.stderr, flush=True)


class Deadline:
    def __init__(self, seconds):
        self.end = time.monotonic() + seconds

    def left(self):
        return self.end - time.monotonic()


# ---- the model directory ----------------------------------------------------------------

def to_bf16_bits(a: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bit patterns, round to nearest even (finite inputs)."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def tensor_list(s):
    """(HF name, shape, kind) of every tensor of a Llama with tied embeddings."""
    h, ff, v = s["n_embd"], s["n_ff"], s["n_vocab"]
    q, kv = s["n_head"] * s["head_dim"], s["n_head_kv"] * s["head_dim"]
    out = [("model.embed_tokens.weight", (v, h), "embed")]
    for i in range(s["n_layer"]):
        p = f"model.layers.{i}."
        out += [(p + "input_layernorm.weight", (h,), "norm"),
                (p + "self_attn.q_proj.weight", (q, h), "mat"),
                (p + "self_attn.k_proj.weight", (kv, h), "mat"),
                (p + "self_attn.v_proj.weight", (kv, h), "mat"),
                (p + "self_attn.o_proj.weight", (h, q), "mat"),
                (p + "post_attention_layernorm.weight", (h,), "norm"),
                (p + "mlp.gate_proj.weight", (ff, h), "mat"),
                (p + "mlp.up_proj.weight", (ff, h), "mat"),
                (p + "mlp.down_proj.weight", (h, ff), "mat")]
    out.append(("model.norm.weight", (h,), "norm"))
    return out


def write_safetensors(path, s, seed, pool_n):
    """model.safetensors in bf16, streamed: each tensor is pool windows written as they are."""
    rng = np.random.default_rng(seed)
    pool = rng.uniform(-1.0, 1.0, size=pool_n).astype(np.float32)
    scaled = {}  # scale -> the pool as bf16 bits, twice over (a window never wraps)

    def pool_for(kind, cols):
        key = (kind, cols)
        if key not in scaled:
            if kind == "norm":
                p = 1.0 + 0.1 * pool
            elif kind == "embed":
                p = 0.1 * pool
            else:
                p = pool * math.sqrt(3.0 / cols)
            b = to_bf16_bits(p)
            scaled[key] = np.concatenate([b, b])
        return scaled[key]

    tensors = tensor_list(s)
    header, off = {}, 0
    for name, shape, _ in tensors:
        n = int(np.prod(shape)) * 2
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    header["__metadata__"] = {"format": "pt", "writer": "bench/gpu_vs_hf.py", "seed": str(seed)}
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * (-len(hj) % 8)
    with open(path, "wb") as f:
        f.write(len(hj).to_bytes(8, "little"))
        f.write(hj)
        for name, shape, kind in tensors:
            src = pool_for(kind, shape[-1])
            n = int(np.prod(shape))
            start = zlib.crc32(name.encode()) % pool_n
            while n > 0:
                k = min(n, pool_n)
                f.write(memoryview(src[start:start + k]))  # no copy
                n -= k
    return off


def write_tokenizer(d, n_vocab):
    """A character-level BPE tokenizer.json of n_vocab tokens: the 95 printable ASCII
    characters and newline (ids 0-95, so `infer bench serve` can tokenize its random
    words), ASCII filler tokens <rN> (any id sequence decodes to valid UTF-8:
    inferd-worker --json prints nothing for text that is not), no merges, and the two
    specials last (ids n_vocab - 2, n_vocab - 1)."""
    chars = [chr(c) for c in range(0x20, 0x7F)] + ["\n"]
    vocab = {c: i for i, c in enumerate(chars)}
    for i in range(len(chars), n_vocab - 2):
        vocab[f"<r{i}>"] = i
    bos, eos = n_vocab - 2, n_vocab - 1
    specials = [(bos, "<|begin_of_text|>"), (eos, "<|eot_id|>")]
    for i, t in specials:
        vocab[t] = i
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, t in specials]
    tok = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
           "normalizer": None, "pre_tokenizer": None, "post_processor": None, "decoder": None,
           "model": {"type": "BPE", "dropout": None, "unk_token": None,
                     "continuing_subword_prefix": None, "end_of_word_suffix": None,
                     "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                     "vocab": vocab, "merges": []}}
    with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f)
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>",
                   "add_bos_token": False, "tokenizer_class": "PreTrainedTokenizerFast",
                   # the daemon wants one; the race sends completions only
                   "chat_template": "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"},
                  f)
    return bos, eos


def write_model_dir(d, s, seed, pool_n):
    """Writes the directory; returns the weights' bytes. A directory written before with the
    same shape, seed and pool (stamp.json; a rerun on a warm device machine) is kept."""
    stamp = {"shape": s, "seed": seed, "pool": pool_n, "writer": 2}
    sp = os.path.join(d, "stamp.json")
    try:
        with open(sp) as f:
            old = json.load(f)
        if old.get("stamp") == stamp:
            log(f"reusing {d} (same shape, seed and pool)")
            return old["bytes"]
    except (OSError, ValueError):
        pass
    os.makedirs(d, exist_ok=True)
    bos, eos = write_tokenizer(d, s["n_vocab"])
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
           "hidden_size": s["n_embd"], "intermediate_size": s["n_ff"],
           "num_hidden_layers": s["n_layer"], "num_attention_heads": s["n_head"],
           "num_key_value_heads": s["n_head_kv"], "head_dim": s["head_dim"],
           "vocab_size": s["n_vocab"], "max_position_embeddings": s["n_ctx_train"],
           "rms_norm_eps": s["rms_eps"], "rope_theta": s["rope_base"], "hidden_act": "silu",
           "attention_bias": False, "mlp_bias": False, "bos_token_id": bos,
           "eos_token_id": eos, "torch_dtype": "bfloat16", "use_cache": True, **LLAMA32}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    with open(os.path.join(d, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": bos, "eos_token_id": eos, "do_sample": False}, f)
    n = write_safetensors(os.path.join(d, "model.safetensors"), s, seed, pool_n)
    with open(sp, "w") as f:
        json.dump({"stamp": stamp, "bytes": n}, f)
    return n


def prompt_ids(n, n_vocab, seed):
    """n token ids from the filler range (never a special)."""
    rng = np.random.default_rng(seed)
    return [int(x) for x in rng.integers(0, n_vocab - 2, size=n)]


# ---- copy bandwidth ---------------------------------------------------------------------------

def copy_bandwidth(torch, cpu):
    """Bytes read + written per second of a large copy (GB/s), median of 10 after warm-up."""
    if cpu or torch is None or not torch.cuda.is_available():
        a = np.ones(1 << 27, dtype=np.float32)  # 512 MiB
        b = np.empty_like(a)
        ts = []
        for _ in range(5):
            t0 = time.perf_counter()
            np.copyto(b, a)
            ts.append(time.perf_counter() - t0)
        return 2 * a.nbytes / sorted(ts)[len(ts) // 2] / 1e9, "numpy copy, 512 MiB"
    n = 1 << 31  # 2 GiB
    a = torch.empty(n, dtype=torch.uint8, device="cuda").random_()
    b = torch.empty_like(a)
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
    for _ in range(3):
        b.copy_(a)
    ts = []
    for _ in range(10):
        ev[0].record()
        b.copy_(a)
        ev[1].record()
        torch.cuda.synchronize()
        ts.append(ev[0].elapsed_time(ev[1]) / 1e3)
    del a, b
    torch.cuda.empty_cache()
    return 2 * n / sorted(ts)[len(ts) // 2] / 1e9, "torch D2D copy, 2 GiB"


# ---- transformers --------------------------------------------------------------------------------

def run_transformers(d, sz, prompt, long_prompt, cpu, dl, res):
    try:
        import torch
        import transformers
    except ImportError as e:
        res["notes"].append(f"transformers half skipped: {e} (pip install torch transformers)")
        return None
    if not cpu and not torch.cuda.is_available():
        res["notes"].append("transformers half skipped: torch sees no CUDA device")
        return torch
    dev = "cpu" if cpu else "cuda"
    dtype = torch.float32 if cpu else torch.bfloat16
    log(f"transformers {transformers.__version__}, torch {torch.__version__}: loading on {dev}")
    t0 = time.perf_counter()
    kw = {} if cpu else {"device_map": dev}  # straight onto the GPU (accelerate)
    try:
        model = transformers.LlamaForCausalLM.from_pretrained(d, dtype=dtype, **kw)
    except (TypeError, ValueError, ImportError):  # older spelling, or no accelerate
        model = transformers.LlamaForCausalLM.from_pretrained(d, torch_dtype=dtype)
    model = model.to(dev).eval()
    log(f"transformers: loaded in {time.perf_counter() - t0:.1f} s")
    hf = {"version": transformers.__version__, "torch": torch.__version__,
          "dtype": str(dtype).replace("torch.", ""), "attn": model.config._attn_implementation}
    res["transformers"] = hf

    def sync():
        if dev == "cuda":
            torch.cuda.synchronize()

    def gen(ids, n, cache):
        x = torch.tensor([ids], device=dev)
        sync()
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=n,
                                 min_new_tokens=n, do_sample=False, use_cache=cache,
                                 pad_token_id=0)
        sync()
        return out[0, len(ids):].tolist(), time.perf_counter() - t0

    gen(prompt, 8, True)  # warm-up: kernels, allocator, cuBLAS handles
    if dl.left() > 30:
        toks, t = gen(prompt, sz["new"], True)
        hf["use_cache"] = {"tokens": toks, "seconds": t, "tok_s": sz["new"] / t}
        log(f"transformers use_cache: {sz['new']} tokens in {t:.2f} s")
        _, t1 = gen(prompt, 1, True)
        hf["decode_tok_s"] = (sz["new"] - 1) / max(t - t1, 1e-9)
    else:
        res["notes"].append("transformers use_cache: skipped, out of time")
    if dl.left() > 20:  # the first long prompt is cold (new shapes), the second warm
        _, t = gen(long_prompt, 1, True)
        hf["ttft_cold_ms"] = t * 1e3
        _, t = gen(long_prompt, 1, True)
        hf["ttft_ms"] = t * 1e3
    else:
        res["notes"].append("transformers ttft: skipped, out of time")
    if dl.left() > 30:  # the slowest part last
        toks, t = gen(prompt, sz["new"], False)
        hf["no_cache"] = {"tokens": toks, "seconds": t, "tok_s": sz["new"] / t}
        log(f"transformers no_cache: {sz['new']} tokens in {t:.2f} s")
    else:
        res["notes"].append("transformers no_cache: skipped, out of time")
    del model
    gc.collect()
    if dev == "cuda":
        torch.cuda.empty_cache()
    return torch


# ---- inferd --------------------------------------------------------------------------------------

def run_json(cmd, dl, what, res):
    """Runs cmd; the last stdout line that parses as a JSON object, or None (noted)."""
    lim = dl.left() - 5
    if lim < 5:
        res["notes"].append(f"{what}: not run, out of time")
        return None
    log(f"{what}: {' '.join(cmd[:3])} ... (limit {lim:.0f} s)")
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=lim)
    except subprocess.TimeoutExpired:
        res["notes"].append(f"{what}: killed after {lim:.0f} s")
        return None
    if p.returncode != 0:
        res["notes"].append(f"{what}: exit {p.returncode}: {p.stderr.strip()[-300:]}")
        return None
    for line in reversed(p.stdout.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                break
    res["notes"].append(f"{what}: no JSON on stdout")
    return None


def run_oracle(d, sz, prompt, logits_file, res):
    """--cpu without transformers: the NumPy oracle's greedy tokens and logits for part (a),
    compared with inferd's dumped logits (rows: every prompt position, then each step)."""
    sys.path.insert(0, os.path.join(ROOT, "tests", "oracle"))
    try:
        from llama_oracle import LlamaOracle
    except ImportError as e:
        res["notes"].append(f"oracle reference skipped: {e}")
        return
    t0 = time.perf_counter()
    r = LlamaOracle(d).generate(prompt, sz["new"])
    ref = {"engine": "tests/oracle/llama_oracle.py (NumPy float64)", "tokens": r.tokens,
           "seconds": time.perf_counter() - t0}
    try:
        got = np.load(logits_file)
        want = r.logits
        if got.shape != want.shape:
            ref["logits_error"] = f"inferd dumped {got.shape}, the oracle has {want.shape}"
        else:
            num = np.linalg.norm(got.astype(np.float64) - want, axis=1)
            ref["logits_rel_l2_max"] = float(np.max(num / np.linalg.norm(want, axis=1)))
    except OSError as e:
        ref["logits_error"] = str(e)
    res["reference"] = ref


def run_inferd(d, sz, prompt, long_prompt, args, dl, res):
    worker = os.path.join(args.build, "worker", "inferd-worker")
    engine = os.path.join(args.build, "bench", "bench_engine")
    backend = "cpu" if args.cpu else "cuda"
    ifd = res["inferd"] = {"backend": backend}
    base = [worker, "--model", d, "--backend", backend, "--ignore-eos", "--json",
            "--log-level", "warn"]
    ids = " ".join(map(str, prompt))
    dump = os.path.join(os.path.dirname(d), "inferd_logits.npy")
    for cache, key in ((True, "use_cache"), (False, "no_cache")):
        extra = ["--dump-logits", dump] if cache and args.cpu else []
        j = run_json(base + ["--prompt-ids", ids, "-n", str(sz["new"])] + extra +
                     ([] if cache else ["--no-kv-cache"]), dl, f"inferd {key}", res)
        if j:
            t = j["total_ms"] / 1e3
            ifd[key] = {"tokens": j["tokens"], "seconds": t, "tok_s": len(j["tokens"]) / t,
                        "decode_tok_s": j.get("decode_tok_s"), "ttft_ms": j.get("ttft_ms")}
            ifd["weight_bytes"] = j.get("weight_bytes")
            log(f"inferd {key}: {len(j['tokens'])} tokens in {t:.2f} s")
        write(res, args.out)
    j = run_json(base + ["--prompt-ids", " ".join(map(str, long_prompt)), "-n", "2"], dl,
                 "inferd ttft", res)
    if j:
        ifd["ttft_ms"] = j["ttft_ms"]
    write(res, args.out)
    r = run_daemon(d, sz, args, dl, res)
    if r:
        res["concurrent"] = {"via": "the daemon (inferd" + (" --gpus 0" if not args.cpu else "") +
                             ", infer bench serve)", "concurrency": r["max_concurrency"],
                             "prompt": sz["c_in"], "output": sz["c_out"],
                             "output_tok_s": r["output_throughput"],
                             "completed": r["completed"], "failed": r["failed"],
                             "ttft_p50_ms": r["ttft_ms"]["median"],
                             "itl_p50_ms": (r.get("itl_ms") or {}).get("median")}
        return
    res["notes"].append("concurrent: through bench_engine instead (the worker's engine, "
                        "no HTTP), the daemon could not run")
    j = run_json([engine, "--model", d, "--backend", backend, "--requests", str(sz["conc"]),
                  "--concurrency", str(sz["conc"]), "--prompt", str(sz["c_in"]),
                  "--output", str(sz["c_out"]), "--budget", str(sz["budget"])], dl,
                 "bench_engine", res)
    if j and j.get("runs"):
        r = j["runs"][0]
        res["concurrent"] = {"via": "bench_engine (the worker engine, no daemon)",
                             "concurrency": r["concurrency"], "prompt": sz["c_in"],
                             "output": sz["c_out"], "output_tok_s": r["output_tok_s"],
                             "ttft_p50_ms": r.get("ttft_ms", {}).get("p50"),
                             "itl_p50_ms": r.get("itl_ms", {}).get("p50"),
                             "mean_step_ms": r.get("mean_step_ms")}


class _UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path, timeout=5):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self.unix_path)
        self.sock = s


def _health(sock):
    try:
        c = _UnixHTTP(sock)
        c.request("GET", "/health")
        body = c.getresponse().read()
        c.close()
        return json.loads(body).get("status")
    except (OSError, ValueError, http.client.HTTPException):
        return None


def run_daemon(d, sz, args, dl, res):
    """(c) through the daemon: inferd (--gpus 0; --cpu: one CPU worker) on a Unix socket,
    `infer bench serve` with conc requests in flight. The run's entry, or None (noted)."""
    inferd = os.path.join(args.build, "daemon", "inferd")
    infer = os.path.join(args.build, "client", "infer")
    worker = os.path.join(args.build, "worker", "inferd-worker")
    if not all(os.access(x, os.X_OK) for x in (inferd, infer, worker)):
        res["notes"].append("daemon: inferd, infer or inferd-worker not built")
        return None
    work = os.path.dirname(d)
    sock, logp = os.path.join(work, "inferd.sock"), os.path.join(work, "inferd.log")
    cmd = [inferd, "--model", d, "--socket", sock, "--worker-binary", worker,
           "--max-seqs", str(sz["conc"]), "--max-batched-tokens", str(sz["budget"])]
    cmd += ["--workers", "1", "--kv-budget", "256M"] if args.cpu else ["--gpus", "0"]
    env = {k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET", "LISTEN_FDS")}
    log(f"daemon: {' '.join(cmd[4:] if len(cmd) > 4 else cmd)}")
    with open(logp, "wb") as lf:
        proc = subprocess.Popen(cmd, stdout=lf, stderr=subprocess.STDOUT, env=env)
    try:
        ready = False
        while dl.left() > 30:
            if proc.poll() is not None:
                break
            if _health(sock) == "ok":
                ready = True
                break
            time.sleep(0.1)
        if not ready:
            with open(logp, errors="replace") as f:
                tail = f.read()[-400:].strip()
            res["notes"].append(f"daemon: not ready (exit {proc.poll()}): {tail}")
            return None
        out = os.path.join(work, "bench_serve.json")
        lim = dl.left() - 10
        try:
            p = subprocess.run([infer, "bench", "serve", "--socket", sock, "-c", str(sz["conc"]),
                                "-N", str(sz["conc"]), "--input-len", str(sz["c_in"]),
                                "--output-len", str(sz["c_out"]), "--warmup", "1",
                                "--no-progress", "--json", out],
                               capture_output=True, text=True, timeout=lim)
        except subprocess.TimeoutExpired:
            res["notes"].append(f"daemon: infer bench serve killed after {lim:.0f} s")
            return None
        if p.returncode != 0:
            res["notes"].append(f"daemon: infer bench serve exit {p.returncode}: "
                                f"{p.stderr.strip()[-300:]}")
            return None
        with open(out) as f:
            return json.load(f)["runs"][0]
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def write(res, path):
    if path:
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(res, f, indent=1)
        os.replace(tmp, path)


def first_divergence(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def summarize(res, sz):
    hf, ifd = res.get("transformers") or {}, res.get("inferd") or {}
    a = (hf.get("use_cache") or {}).get("tokens")
    against = "transformers"
    if a is None and res.get("reference"):
        a, against = res["reference"]["tokens"], "oracle"
    b = (ifd.get("use_cache") or {}).get("tokens")
    if a and b:
        fd = first_divergence(a, b)
        res["greedy_256"] = {"new_tokens": sz["new"], "against": against,
                             "identical": fd is None, "first_divergence": fd}
    c = (ifd.get("no_cache") or {}).get("tokens")
    if b and c:
        res["inferd_cache_vs_no_cache_identical"] = b == c
    dec = (ifd.get("use_cache") or {}).get("decode_tok_s")
    b1 = {"hf_tok_s": hf.get("decode_tok_s"), "inferd_tok_s": dec}
    if dec and res.get("weight_file_bytes"):
        b1["inferd_gb_s"] = res["weight_file_bytes"] * dec / 1e9
        if res.get("copy_gb_s"):
            b1["frac_copy"] = b1["inferd_gb_s"] / res["copy_gb_s"]
    if dec and hf.get("decode_tok_s"):
        b1["speedup_vs_hf_eager"] = dec / hf["decode_tok_s"]
    res["batch1"] = b1
    res["ttft"] = {"prompt": sz["ttft"], "hf_ms": hf.get("ttft_ms"),
                   "hf_cold_ms": hf.get("ttft_cold_ms"), "inferd_ms": ifd.get("ttft_ms"),
                   "inferd_is": "cold (a fresh inferd-worker's first request)"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", required=True, help="the CMake build (inferd-worker, bench_engine)")
    ap.add_argument("--work", default=None, help="where the model directory goes")
    ap.add_argument("--out", default=None, help="JSON result file (also printed)")
    ap.add_argument("--tiny", action="store_true", help="a 2-layer shape and small sizes")
    ap.add_argument("--cpu", action="store_true", help="inferd's CPU backend, torch on the CPU")
    ap.add_argument("--shape", default=os.path.join(ROOT, "deploy/shapes/llama-3.2-3b.json"))
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--time-limit", type=float, default=180, help="seconds for everything")
    ap.add_argument("--skip-hf", action="store_true", help="inferd only")
    args = ap.parse_args()
    dl = Deadline(args.time_limit)
    if args.tiny:
        shape = dict(TINY_SHAPE)
    else:
        with open(args.shape) as f:
            shape = json.load(f)
    sz = SIZES["tiny" if args.tiny else "full"]
    if shape["arch"] != "llama":
        sys.exit(f"gpu_vs_hf: {args.shape}: arch {shape['arch']}, expected llama")
    work = args.work or os.path.join(args.build, "gpu_vs_hf")
    d = os.path.join(work, "model")
    res = {"bench": "gpu_vs_hf", "mode": "cpu" if args.cpu else "device",
           "shape": shape["name"], "sizes": sz, "seed": args.seed, "notes": [],
           "date": time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime())}
    res["commit"] = os.environ.get("COMMIT")  # check.sh's (the device copy may lack .git)
    if not res["commit"]:
        try:
            res["commit"] = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                                           capture_output=True, text=True).stdout.strip() or None
        except OSError:
            res["commit"] = None
    t0 = time.perf_counter()
    res["weight_file_bytes"] = write_model_dir(d, shape, args.seed,
                                               POOLS["tiny" if args.tiny else "full"])
    res["write_s"] = time.perf_counter() - t0
    log(f"model {d}: {res['weight_file_bytes'] / 1e9:.2f} GB of weights, ready in {res['write_s']:.1f} s")
    prompt = prompt_ids(sz["prompt"], shape["n_vocab"], args.seed)
    long_prompt = prompt_ids(sz["ttft"], shape["n_vocab"], args.seed + 1)
    try:
        import torch
    except ImportError:
        torch = None
    res["copy_gb_s"], res["copy_how"] = copy_bandwidth(torch, args.cpu)
    if torch is not None and not args.cpu and torch.cuda.is_available():
        res["device"] = torch.cuda.get_device_name(0)
    else:
        res["device"] = "cpu" if args.cpu else "unknown (no torch)"
    write(res, args.out)
    # inferd first (what is measured), then transformers, whose parts a short budget cuts
    run_inferd(d, sz, prompt, long_prompt, args, dl, res)
    summarize(res, sz)
    write(res, args.out)
    if args.skip_hf:
        res["notes"].append("transformers half skipped (--skip-hf)")
    else:
        try:
            run_transformers(d, sz, prompt, long_prompt, args.cpu, dl, res)
        except Exception as e:  # an API change in the image's transformers, say: keep inferd's half
            import traceback
            res["notes"].append(f"transformers half failed: {e!r} at "
                                f"{traceback.format_exc(limit=-2).strip().splitlines()[-3:]}")
            log("transformers half failed:", traceback.format_exc())
    if args.cpu and "transformers" not in res and not args.skip_hf:
        run_oracle(d, sz, prompt, os.path.join(work, "inferd_logits.npy"), res)
    summarize(res, sz)
    res["seconds"] = time.perf_counter() - t0
    write(res, args.out)
    print(json.dumps(res, separators=(",", ":")))
    # exit 1 when inferd produced nothing: the race did not run
    return 0 if (res.get("inferd") or {}).get("use_cache") else 1


if __name__ == "__main__":
    sys.exit(main())
