#!/usr/bin/env python3
"""test_tiny_models.py — every architecture from both formats, against the NumPy oracle.

tiny_models.py writes tiny random-weight models (llama with llama3 RoPE scaling, tied
llama in F16, Mistral with a sliding window in BF16, Qwen 2 with biases, Qwen 3 with
QK-norm, Gemma 3, a Gemma 3 multimodal-layout checkpoint in two shards, and one with the
newer model.language_model.* names and an untied language_model.lm_head.weight) as Hugging Face
directories and, where GGUF can express the same model, as GGUF converted the way
llama.cpp's converter does. Then, for each:

  * inferd-worker's logits on a 14-token prompt + 4 generated tokens (past Mistral's and
    Gemma's windows) match the oracle (llama_oracle.py, float64, run on the HF weights)
    within --tol (1e-4) relative L2 per row, for the HF directory and for the GGUF
    (--full: the oracle also reads each GGUF itself, a check of the converter
    conventions; it passed at 2.4e-7 … 1.2e-6 on 2026-12-01);
  * the two formats agree with each other: bit for bit where the layouts are the same,
    within 1e-5 for llama/Mistral, whose GGUF Q/K rows are permuted (the attention dot
    products then sum in another order);
  * layout check: a llama GGUF written WITHOUT the Q/K permutation (HF rows served to the
    interleaved-RoPE path) must disagree with the oracle by more than 1e-2 — so the
    comparisons above would catch one path serving the other's layout;
  * sharded vs single file: the llama weights split over three shards give bit-identical
    logits;
  * corruption: a truncated, missing or garbled shard, a wrong-shape or missing tensor, a
    needed tensor stored as I64, a bad or unsupported config.json, an untied model without
    lm_head, and a directory that is no model each fail with exit status != 0 and a one-line
    message naming the file or directory (and tensor);
  * the local layers' own KV pool (--kv-local-pool): the multimodal-layout Gemma 3 (window
    5, local and global layers) at block size 2, prefilled 4 tokens at a time, on a
    40-token prompt, so that local blocks are released mid-prefill from a pool too small
    to hold them all: the same logits bit for bit as one pool, and the oracle's;
  * with --inferd, the daemon serving that Gemma 3 (in serve_test) makes the local layers'
    pool (/metrics inferd_kv_local_blocks_capacity), shows local K/V freed while a long
    completion runs (inferd_kv_local_released_bytes), and after its worker is SIGKILLed the
    replacement reattaches both pools and gives the same greedy tokens (through prefix hits
    in both);
  * --inspect DIR --json reports format, architecture and source, the chat template from
    tokenizer_config.json and generation_config.json's eos ids among the stop tokens;
    --inspect FILE.gguf (--json and text) its format, architecture and source;
  * with --inferd: the daemon serves every architecture (SERVE) from each of its formats
    (`--model DIR`, `--model FILE.gguf`; one daemon per model, all started at once): /v1/models shows its
    id, architecture, format and source; a greedy completion on the prompt's token ids and
    a greedy chat completion (the model's ChatML template; the prompt tokenized here with
    the `tokenizers` package) give the oracle's greedy tokens for the same prompt (the
    chat's as ids, from its logprobs' bytes; both as text); the Qwen 3 directory applies
    its generation_config.json sampling defaults, field by field, until
    `generation_config: false` is reloaded (SIGHUP);
  * `inferd --inspect DIR --json` prints what `inferd-worker --inspect DIR --json` does;
  * with --infer: `infer inspect DIR` (text and --json) prints the worker's report too, and
    against each daemon above `infer models` shows the model's architecture, format and
    source.

Exit 0 on success, 1 on a failure, 77 ("SKIPPED: why") without numpy/gguf/tokenizers, the
shared vocabulary or the worker.

    test_tiny_models.py WORKER [--inferd INFERD] [--infer INFER] [--keep DIR] [--only NAME ...]
                        [--tol 1e-4] [--full]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def skip(why):
    print(f"SKIPPED: {why}", flush=True)
    sys.exit(77)


try:
    import numpy as np
    import gguf  # noqa: F401
    import tokenizers  # noqa: F401
except ImportError as e:
    skip(f"the test venv lacks {e.name} (deploy/install-deps.sh installs it)")

import llama_oracle  # noqa: E402
import tiny_models  # noqa: E402

PROMPT = [464, 2068, 7586, 21831, 18045, 625, 262, 16931, 3290, 13, 198, 50257, 1000, 42]
N_GEN = 4

failures = []


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what, flush=True)
    if not ok:
        failures.append(what)


def run_worker(worker, model, extra=(), prompt=None, out_json=None):
    with tempfile.NamedTemporaryFile(suffix=".npy", delete=False) as f:
        dump = f.name
    cmd = [worker, "--model", model, "--prompt-ids", " ".join(map(str, prompt or PROMPT)),
           "-n", str(N_GEN), "--json", "--ignore-eos", "--dump-logits", dump, *extra]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        os.unlink(dump)
        raise RuntimeError(f"{' '.join(cmd[:3])}: exit {p.returncode}: {p.stderr.strip()}")
    out = json.loads([ln for ln in p.stdout.splitlines() if ln.startswith("{")][-1])
    if out_json is not None:
        out_json.update(out)
    logits = np.load(dump)
    os.unlink(dump)
    return out["tokens"], logits


def rel_l2(a, b):
    """Max over rows of ||a - b|| / ||b||."""
    n = min(len(a), len(b))
    a, b = a[:n].astype(np.float64), b[:n].astype(np.float64)
    return float(np.max(np.linalg.norm(a - b, axis=1) / np.linalg.norm(b, axis=1)))


_ORACLES: dict = {}


def oracle(path):
    """The oracle of a model, loaded once."""
    if path not in _ORACLES:
        _ORACLES[path] = llama_oracle.LlamaOracle(path)
    return _ORACLES[path]


def oracle_rows(path, tokens, prompt=None):
    return oracle(path).score((prompt or PROMPT) + tokens[:-1])


# name -> the oracle's greedy tokens after PROMPT (the argmax of its rows), for serve_test
GREEDY: dict = {}
N_TOKENS = 50259   # the tiny models' tokenizer: the GPT-2 vocabulary + 2 ChatML tokens


def greedy(o, prompt, n):
    """The oracle's n greedy tokens after prompt, among the tokenizer's ids."""
    if o.hp.n_vocab == N_TOKENS:
        return o.generate(prompt, n).tokens
    out = []
    for _ in range(n):   # a whole pass per token: the oracle's generate has no mask
        out.append(int(np.argmax(o.score(prompt + out)[-1, :N_TOKENS])))
    return out


def vocab_pad_checks(name, lg, rows, tokens):
    """A model with vocabulary rows past its tokenizer's (Gemma 3 4B's layout): the
    worker's logits of those ids are -inf, its greedy tokens are the oracle's argmax over
    the tokenizer's ids, and without the mask the oracle's argmax would be a padding id (the
    padding rows are made large), so the check can fail."""
    nv = N_TOKENS
    check(lg.shape[1] > nv and bool(np.all(np.isneginf(lg[:, nv:]))) and
          bool(np.all(np.isfinite(lg[:, :nv]))),
          f"{name}: the logits of the {lg.shape[1] - nv} ids past the tokenizer's are -inf")
    unmasked = np.argmax(rows[len(PROMPT) - 1:], axis=1)
    masked = [int(t) for t in np.argmax(rows[len(PROMPT) - 1:, :nv], axis=1)]
    check(bool(np.all(unmasked >= nv)) and tokens == masked,
          f"{name}: greedy tokens {tokens} = the oracle's among the tokenizer's ids {masked} "
          f"(unmasked it would pick {unmasked.tolist()})")


def local_pool_test(worker, path, tol):
    """Two KV pools (the local layers' holds only their window) vs one, and the oracle."""
    prompt = [(PROMPT[i % len(PROMPT)] + 97 * i) % 50000 for i in range(40)]
    small = ["--block-size", "2", "--prefill-chunk", "4"]
    tok_1, lg_1 = run_worker(worker, path, small, prompt)
    info = {}
    tok_2, lg_2 = run_worker(worker, path, small + ["--kv-local-pool"], prompt, info)
    # 44 positions in 22 blocks of 2; the local pool holds 2 + 2 + 1 of them
    check(info.get("kv_local_pool_blocks") == 5 and info.get("kv_local_released", 0) >= 17,
          f"gemma3_mm: the local pool is {info.get('kv_local_pool_blocks')} blocks, "
          f"{info.get('kv_local_released')} released on the way")
    check(tok_1 == tok_2 and bool(np.array_equal(lg_1, lg_2)),
          "gemma3_mm: the local layers' own pool (block size 2, window 5, 40 tokens) gives "
          "the same logits as one pool")
    # the tokenizer's ids only: a padded vocabulary's extra logits are masked to -inf
    e = rel_l2(lg_2[:, :N_TOKENS], oracle_rows(path, tok_2, prompt)[:, :N_TOKENS])
    check(e <= tol, f"gemma3_mm: local layers' own pool vs oracle, max rel-L2 {e:.2e}")


def fails_with(worker, model, needles, what):
    p = subprocess.run([worker, "--model", model, "--prompt-ids", "1 2 3", "-n", "1"],
                       capture_output=True, text=True, timeout=120)
    line = next((ln for ln in p.stderr.splitlines() if all(n in ln for n in needles)), None)
    check(p.returncode != 0 and line is not None,
          f"{what}: exit {p.returncode}, message: "
          f"{line or p.stderr.strip().splitlines()[-1:] or '(none)'}")


def corruption_tests(worker, root, base):
    """Each case works on a fresh copy of the llama directory."""
    src = os.path.join(root, base)

    def fresh(name):
        d = os.path.join(root, "bad_" + name)
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(src, d)
        return d

    st = "model.safetensors"
    d = fresh("trunc")
    p = os.path.join(d, st)
    with open(p, "r+b") as f:
        f.truncate(os.path.getsize(p) - 100)
    fails_with(worker, d, [p, "truncated"], "truncated shard")

    d = fresh("hdr")
    p = os.path.join(d, st)
    with open(p, "r+b") as f:
        f.write((1 << 40).to_bytes(8, "little"))
    fails_with(worker, d, [p, "header length"], "garbled header length")

    d = fresh("json")
    p = os.path.join(d, st)
    with open(p, "r+b") as f:
        f.seek(8)
        f.write(b"#")
    fails_with(worker, d, [p, "JSON"], "header not JSON")

    tensors = llama_oracle.read_safetensors(os.path.join(src, st))
    raw = {n: ("F32", a.astype(np.float32)) for n, a in tensors.items()}

    d = fresh("shape")
    bad = dict(raw)
    q = "model.layers.1.self_attn.q_proj.weight"
    bad[q] = ("F32", raw[q][1][:-1].copy())
    tiny_models.write_safetensors(os.path.join(d, st), bad)
    fails_with(worker, d, [os.path.join(d, st), q, "shape"], "wrong-shape tensor")

    d = fresh("missing")
    bad = dict(raw)
    u = "model.layers.0.mlp.up_proj.weight"
    del bad[u]
    tiny_models.write_safetensors(os.path.join(d, st), bad)
    fails_with(worker, d, [d, u, "missing"], "missing tensor")

    # a needed tensor in a dtype no backend loads: I64 of the same shape (8 bytes an element,
    # so the header's data_offsets stay consistent and only the loader can refuse it)
    d = fresh("dtype")
    bad = dict(raw)
    g = "model.layers.1.mlp.gate_proj.weight"
    bad[g] = ("I64", np.zeros(raw[g][1].shape, np.int64))
    tiny_models.write_safetensors(os.path.join(d, st), bad)
    fails_with(worker, d, [os.path.join(d, st), f"'{g}'", "I64", "cannot load"],
               "tensor stored as I64")

    d = fresh("nohead")
    bad = dict(raw)
    del bad["lm_head.weight"]
    tiny_models.write_safetensors(os.path.join(d, st), bad)
    fails_with(worker, d, ["lm_head.weight", "tie_word_embeddings"], "untied without lm_head")

    d = fresh("sharded_missing")
    os.unlink(os.path.join(d, st))
    tiny_models.write_sharded(d, raw, 3)
    gone = os.path.join(d, "model-00002-of-00003.safetensors")
    os.unlink(gone)
    fails_with(worker, d, [gone], "missing shard")

    d = fresh("cfg_json")
    with open(os.path.join(d, "config.json"), "w") as f:
        f.write("{\"architectures\": [")
    fails_with(worker, d, [os.path.join(d, "config.json"), "JSON"], "config.json not JSON")

    d = fresh("cfg_arch")
    c = json.load(open(os.path.join(d, "config.json")))
    c["architectures"] = ["FalconForCausalLM"]
    json.dump(c, open(os.path.join(d, "config.json"), "w"))
    fails_with(worker, d, ["FalconForCausalLM", "not supported"], "unsupported architecture")

    d = fresh("cfg_key")
    c = json.load(open(os.path.join(d, "config.json")))
    del c["hidden_size"]
    json.dump(c, open(os.path.join(d, "config.json"), "w"))
    fails_with(worker, d, ["config.json", "hidden_size"], "config.json without hidden_size")

    d = fresh("cfg_rope")
    c = json.load(open(os.path.join(d, "config.json")))
    c["rope_scaling"] = {"rope_type": "yarn", "factor": 4.0}
    json.dump(c, open(os.path.join(d, "config.json"), "w"))
    fails_with(worker, d, ["yarn", "not supported"], "unsupported rope_scaling")

    d = os.path.join(root, "bad_empty")
    os.makedirs(d, exist_ok=True)
    fails_with(worker, d, [d, "config.json"], "directory without config.json")


def inspect_test(worker, path, inferd=None, infer=None):
    p = subprocess.run([worker, "--inspect", path, "--json"], capture_output=True, text=True,
                       timeout=120)
    # `infer inspect` and `inferd --inspect` print the worker's report, text and JSON
    for what, tool in (("infer inspect", infer and [infer, "inspect"]),
                       ("inferd --inspect", inferd and [inferd, "--inspect"])):
        for extra in (["--json"], []) if tool else ():
            c = subprocess.run([*tool, path, *extra], capture_output=True, text=True,
                               timeout=120)
            w = p if extra else subprocess.run([worker, "--inspect", path], capture_output=True,
                                               text=True, timeout=120)
            check(c.returncode == 0 and w.returncode == 0 and c.stdout == w.stdout and c.stdout,
                  f"{what} DIR {' '.join(extra)}: the worker's report "
                  f"(exit {c.returncode}, {len(c.stdout)} vs {len(w.stdout)} bytes)")
    if inferd:
        d = subprocess.run([inferd, "--inspect", path + ".missing"], capture_output=True,
                           text=True, timeout=120)
        check(d.returncode == 1 and path + ".missing" in d.stderr,
              f"inferd --inspect on a missing path: exit {d.returncode}, {d.stderr.strip()}")
    try:
        r = json.loads(p.stdout)
    except ValueError:
        check(False, f"--inspect {path} --json: exit {p.returncode}, {p.stderr.strip()}")
        return
    tok = r.get("tokenizer", {})
    check(r.get("format") == "hf" and r.get("architecture") == "qwen2" and
          r.get("hf_architecture") == "Qwen2ForCausalLM" and r.get("source") == path,
          f"--inspect: format {r.get('format')}, architecture {r.get('architecture')} "
          f"({r.get('hf_architecture')}), source {r.get('source')}")
    check(tok.get("chat_template_bytes") == len(tiny_models.CHATML),
          f"--inspect: chat template from tokenizer_config.json "
          f"({tok.get('chat_template_bytes')} bytes)")
    eog = tok.get("eog_ids", [])
    check(50257 in eog and 50258 in eog,
          f"--inspect: generation_config eos ids among the stop tokens {eog}")
    gen = r.get("generation", {})
    check(gen.get("top_k") == 20 and abs(gen.get("temperature", 0) - 0.7) < 1e-6,
          f"--inspect: generation defaults {gen}")
    # the GGUF twin: its path contains "gguf" too, so the fields are compared, not searched
    g = path + ".gguf"
    p = subprocess.run([worker, "--inspect", g, "--json"], capture_output=True, text=True,
                       timeout=120)
    try:
        r = json.loads(p.stdout)
    except ValueError:
        r = {}
    check(p.returncode == 0 and r.get("format") == "gguf" and
          r.get("architecture") == "qwen2" and r.get("source") == g,
          f"--inspect FILE.gguf --json: exit {p.returncode}, format {r.get('format')}, "
          f"architecture {r.get('architecture')}, source {r.get('source')}")
    p = subprocess.run([worker, "--inspect", g], capture_output=True, text=True, timeout=120)
    head = {ln.split(":", 1)[0]: ln.split(":", 1)[1].strip()
            for ln in p.stdout.splitlines()[:3] if ":" in ln}
    check(p.returncode == 0 and head.get("format") == "gguf" and head.get("source") == g,
          f"--inspect FILE.gguf (text): format {head.get('format')}, source {head.get('source')}")


class _UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost", timeout=60)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(60)
        self.sock.connect(self.path)


def _http(sock, method, url, body=None):
    c = _UnixHTTP(sock)
    c.request(method, url, body=json.dumps(body) if body is not None else None,
              headers={"content-type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, json.loads(data or b"null")


def _spawn_daemon(inferd, model, sockdir, extra=()):
    """Starts inferd on a model (not waiting); returns (process, socket, log)."""
    os.makedirs(sockdir, exist_ok=True)
    sock = os.path.join(sockdir, "inferd.sock")
    log = open(os.path.join(sockdir, "inferd.log"), "a")
    p = subprocess.Popen([inferd, "--model", model, "--socket", sock, "--kv-budget", "32M",
                          "--workers", "1", "--threads", "1", *extra],
                         stdout=log, stderr=subprocess.STDOUT)
    return p, sock, log


def _wait_ready(p, sock, timeout=120):
    """True once /v1/models lists the model, False if the daemon exits or times out.
    (The worker may still be loading: the first request then waits for it.)"""
    deadline = time.time() + timeout
    while time.time() < deadline and p.poll() is None:
        try:
            st, r = _http(sock, "GET", "/v1/models")
            if st == 200 and r["data"]:
                return True
        except (OSError, http.client.HTTPException, ValueError):
            pass
        time.sleep(0.05)
    return False


# A seeded sampled completion: the same tokens exactly when the sampling parameters are equal.
def _sample(sock, **params):
    st, r = _http(sock, "POST", "/v1/completions",
                  {"prompt": [1, 2, 3, 4], "max_tokens": 12, "ignore_eos": True, "seed": 7,
                   **params})
    if st != 200:
        raise ValueError(f"completion: HTTP {st}: {r}")
    return r["choices"][0]["text"]


# A chat whose prompt leaves 11 tokens of the 256-token context: 236 content tokens
# ("hello" + 235 x " hello") + the ChatML template's 9.
LONG_CHAT = [{"role": "user", "content": "hello" + " hello" * 235}]


def _chat_len(sock, **params):
    """completion_tokens of a chat on LONG_CHAT that never stops early."""
    st, r = _http(sock, "POST", "/v1/chat/completions",
                  {"messages": LONG_CHAT, "ignore_eos": True, **params})
    if st != 200:
        raise ValueError(f"chat: HTTP {st}: {r}")
    return r["usage"]["prompt_tokens"], r["usage"]["completion_tokens"]


def generation_config_test(p, sock, cfg_file):
    """generation_config.json's sampling defaults (temperature 0.7, top_p 0.9, top_k 20)
    apply to requests that leave them out, field by field, and its max_new_tokens (7) is a
    chat's max_tokens when the request gives none (vLLM's default too: the rest of the
    context, capped by max_new_tokens); `generation_config: false` in the daemon's config
    file, reloaded by SIGHUP, gives OpenAI's defaults back."""
    dflt = _sample(sock)
    model_params = _sample(sock, temperature=0.7, top_p=0.9, top_k=20)
    plain = _sample(sock, temperature=1.0, top_p=1.0, top_k=0)
    check(dflt == model_params and dflt != plain,
          "daemon: generation_config.json's temperature/top_p/top_k are the request "
          f"defaults ({dflt!r} vs the same given {model_params!r}, plain {plain!r})")
    check(_sample(sock, temperature=1.0) == _sample(sock, temperature=1.0, top_p=0.9, top_k=20),
          "daemon: a field the request sets wins; the others still default to the model's")
    n = (_chat_len(sock), _chat_len(sock, max_tokens=9))
    check(n == ((245, 7), (245, 9)),
          f"daemon: max_new_tokens 7 is the default max_tokens, a request's own wins {n}")
    with open(cfg_file, "w") as f:
        json.dump({"generation_config": False}, f)
    p.send_signal(signal.SIGHUP)
    deadline, got = time.time() + 10, None
    while time.time() < deadline and got != plain:
        time.sleep(0.05)
        got = _sample(sock)
    check(got == plain, "daemon: generation_config false (SIGHUP reload): requests keep "
                        f"OpenAI's defaults ({got!r})")
    n = _chat_len(sock)
    check(n == (245, 11), f"daemon: generation_config false: the default max_tokens is the rest "
                          f"of the context again {n}")


SERVE_N = N_GEN                  # greedy tokens per request through the daemon
CHAT = [{"role": "user", "content": "Hello there"}]
# the architectures (and the multimodal Gemma 3 layout) the daemon serves in the test;
# llama_tied and qwen2_swa differ from these in what the worker's oracle test covers
SERVE = ["llama", "mistral", "qwen2", "qwen3", "gemma3", "gemma3_mm"]


class _Detok:
    """Token id <-> bytes of the tiny models' vocabulary (GPT-2 byte-level BPE + the
    ChatML tokens), independent of inferd: the reference text and the ids behind the
    chat logprobs' `bytes`."""

    def __init__(self):
        tokens, types, _ = tiny_models.load_vocab()
        inv = llama_oracle._unicode_to_byte()
        self.special = {i for i, t in enumerate(types) if t == 3}
        self.bytes = [t.encode() if i in self.special else
                      b"".join(bytes([inv[c]]) if c in inv else c.encode() for c in t)
                      for i, t in enumerate(tokens)]
        self.ids = {b: i for i, b in enumerate(self.bytes)}

    def text(self, ids):   # skip_special_tokens, as the daemon always does
        b = b"".join(self.bytes[t] for t in ids if t not in self.special)
        return b.decode("utf-8", errors="replace")


def infer_models_check(infer, sock, name, fmt, path, ref):
    """`infer models` against the daemon: the model's row shows its architecture, format and
    source (the table's columns: MODEL CONTEXT ARCH FORMAT SOURCE)."""
    what = f"{name} ({fmt})"
    p = subprocess.run([infer, "models", "--socket", sock], capture_output=True, text=True,
                       timeout=60)
    lines = p.stdout.splitlines()
    rows = [ln.split() for ln in lines[1:]]
    want = [ref["arch"], fmt, os.path.realpath(path)]
    check(p.returncode == 0 and len(lines) == 2 and
          lines[0].split()[2:] == ["ARCH", "FORMAT", "SOURCE"] and rows[0][2:] == want,
          f"{what}: infer models shows architecture, format and source {want} "
          f"(exit {p.returncode}: {' | '.join(lines[1:]) or p.stderr.strip()})")


def _serve_checks(sock, name, fmt, path, ref, detok):
    """One model through the daemon: /v1/models, a greedy completion on token ids and a
    greedy chat completion, against the oracle's greedy tokens for the same prompts."""
    what = f"{name} ({fmt})"
    st, r = _http(sock, "GET", "/v1/models")
    m = r["data"][0]
    mid = os.path.basename(path)[:-5] if fmt == "gguf" else os.path.basename(path)
    check(st == 200 and m["id"] == mid and m["root"] == os.path.realpath(path) and
          m.get("architecture") == ref["arch"] and m.get("format") == fmt,
          f"{what}: /v1/models shows id, architecture, format and source "
          f"({m.get('id')}, {m.get('architecture')}, {m.get('format')}, {m.get('root')})")
    st, r = _http(sock, "POST", "/v1/completions",
                  {"prompt": PROMPT, "max_tokens": SERVE_N, "temperature": 0,
                   "ignore_eos": True})
    want = detok.text(ref["completion"])
    got = r["choices"][0]["text"] if st == 200 else r
    check(st == 200 and got == want and r["usage"]["prompt_tokens"] == len(PROMPT) and
          r["usage"]["completion_tokens"] == SERVE_N,
          f"{what}: greedy completion = the oracle's {ref['completion']} ({got!r})")
    st, r = _http(sock, "POST", "/v1/chat/completions",
                  {"messages": CHAT, "max_tokens": SERVE_N, "temperature": 0,
                   "ignore_eos": True, "logprobs": True})
    if st != 200:
        check(False, f"{what}: chat completion: HTTP {st}: {r}")
        return
    c = r["choices"][0]
    ids = [detok.ids.get(bytes(e["bytes"]), -1) for e in c["logprobs"]["content"]]
    check(ids == ref["chat"] and c["message"]["content"] == detok.text(ref["chat"]) and
          r["usage"]["prompt_tokens"] == len(ref["chat_prompt"]),
          f"{what}: greedy chat completion = the oracle's {ref['chat']} (got {ids}, "
          f"{r['usage']['prompt_tokens']} prompt tokens, want {len(ref['chat_prompt'])})")
    # generation_config.json's second eos id (50257, <|im_start|>: neither the tokenizer's
    # eos nor GGUF's) ends a request that does not ignore eos; the GGUF twin runs on
    st, r = _http(sock, "POST", "/v1/completions",
                  {"prompt": PROMPT, "max_tokens": 4, "temperature": 0,
                   "logit_bias": {"50257": 100}})
    fin = r["choices"][0]["finish_reason"] if st == 200 else r
    n = r["usage"]["completion_tokens"] if st == 200 else -1
    if fmt == "hf":
        check(fin == "stop" and n <= 1, f"{what}: generation_config's eos id 50257 stops a "
              f"request (finish_reason {fin}, {n} tokens)")
    else:
        check(fin == "length" and n == 4, f"{what}: id 50257, no eos in the GGUF, does not "
              f"stop a request (finish_reason {fin}, {n} tokens)")
    if ref["n_vocab"] > N_TOKENS:
        vocab_pad_serve_checks(sock, what, ref, detok)


def vocab_pad_serve_checks(sock, what, ref, detok):
    """Vocabulary rows past the tokenizer's through the daemon: a logit_bias key among
    them is accepted, as vLLM accepts keys below the model's vocab_size, and changes
    nothing (greedy output as without it); one at vocab_size is a 400; sampled tokens at
    a high temperature, with +100 on every padding id, are all tokenizer ids."""
    pad = {str(i): 100 for i in range(N_TOKENS, ref["n_vocab"])}
    st, r = _http(sock, "POST", "/v1/completions",
                  {"prompt": PROMPT, "max_tokens": SERVE_N, "temperature": 0,
                   "ignore_eos": True, "logit_bias": {str(N_TOKENS + 3): 100}})
    got = r["choices"][0]["text"] if st == 200 else r
    check(st == 200 and got == detok.text(ref["completion"]),
          f"{what}: logit_bias +100 on id {N_TOKENS + 3} (past the tokenizer's {N_TOKENS}, "
          f"below vocab_size {ref['n_vocab']}): accepted, no effect ({st}, {got!r})")
    st, r = _http(sock, "POST", "/v1/completions",
                  {"prompt": PROMPT, "max_tokens": 1, "logit_bias": {str(ref["n_vocab"]): 1}})
    check(st == 400 and r.get("error", {}).get("param") == "logit_bias",
          f"{what}: logit_bias key {ref['n_vocab']} (= vocab_size): HTTP {st}")
    st, r = _http(sock, "POST", "/v1/chat/completions",
                  {"messages": CHAT, "max_tokens": 16, "temperature": 2.0, "seed": 3,
                   "ignore_eos": True, "logprobs": True, "top_logprobs": 5, "logit_bias": pad})
    if st != 200:
        check(False, f"{what}: sampled chat with logit_bias on the padding ids: HTTP {st}: {r}")
        return
    content = r["choices"][0]["logprobs"]["content"]
    ids = [detok.ids.get(bytes(e["bytes"]), -1) for e in content]
    top = [detok.ids.get(bytes(t["bytes"]), -1) for e in content for t in e["top_logprobs"]]
    check(len(ids) == 16 and all(0 <= t < N_TOKENS for t in ids + top),
          f"{what}: 16 tokens sampled at temperature 2 with +100 on every padding id are "
          f"tokenizer ids, and so are their top-5 alternatives ({ids})")


def _metrics(sock):
    c = _UnixHTTP(sock)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    vals = {}
    for ln in text.splitlines():
        parts = ln.split()
        if len(parts) == 2 and not ln.startswith("#"):
            vals[parts[0]] = float(parts[1])
    return vals


def _health(sock):
    return _http(sock, "GET", "/health")[1]


def local_pool_checks(sock):
    """The daemon's two KV pools on Gemma 3 (local and global layers): made, local K/V
    freed while a sequence runs (/metrics), and both reattached by the worker that
    replaces a SIGKILLed one (the same greedy tokens, through prefix hits in both)."""
    m = _metrics(sock)
    check(m.get("inferd_kv_local_blocks_capacity", 0) > 0,
          f"gemma3_mm (daemon): a local layers' pool of "
          f"{m.get('inferd_kv_local_blocks_capacity')} blocks")
    prompt = [(PROMPT[i % len(PROMPT)] + 97 * i) % 50000 for i in range(40)]
    short = {"prompt": prompt, "max_tokens": 8, "temperature": 0, "ignore_eos": True}
    st, r1 = _http(sock, "POST", "/v1/completions", short)
    check(st == 200, f"gemma3_mm (daemon): a completion over two pools ({st})")
    done = []
    th = threading.Thread(target=lambda: done.append(
        _http(sock, "POST", "/v1/completions", dict(short, max_tokens=200))))
    th.start()
    seen = 0.0
    while th.is_alive():
        seen = max(seen, _metrics(sock).get("inferd_kv_local_released_bytes", 0.0))
        time.sleep(0.01)
    th.join()
    check(bool(done) and done[0][0] == 200 and seen > 0,
          f"gemma3_mm (daemon): local K/V freed while a 240-token sequence runs "
          f"(inferd_kv_local_released_bytes up to {seen:.0f})")
    pid = _health(sock)["workers"][0]["pid"]
    os.kill(pid, signal.SIGKILL)
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            h = _health(sock)
            if h.get("status") == "ok" and h["workers"][0]["pid"] not in (pid, 0):
                break
        except (OSError, http.client.HTTPException, ValueError):
            pass
        time.sleep(0.05)
    st, r2 = _http(sock, "POST", "/v1/completions", short)
    ok = st == 200 and r2["choices"][0]["text"] == r1["choices"][0]["text"]
    check(ok and r2["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0) > 0,
          f"gemma3_mm (daemon): after a SIGKILL the new worker reattaches both pools: same "
          f"tokens, prefix hits ({st}, usage {r2.get('usage') if isinstance(r2, dict) else r2})")
    check(_metrics(sock).get("inferd_kv_local_blocks_used", -1) == 0,
          "gemma3_mm (daemon): no local block held once idle")


def all_local_checks(sock, hf, detok):
    """Mistral (window 6 on every layer, one pool): the worker returns a sequence's blocks
    before its window to the pool (worker/engine.c, all_local). The greedy tokens of a
    sequence that runs past several released blocks are the oracle's, and /metrics shows
    blocks released while a longer one runs."""
    t0 = time.time()
    prompt = [(PROMPT[i % len(PROMPT)] + 89 * i) % 50000 for i in range(40)]
    req = {"prompt": prompt, "max_tokens": 24, "temperature": 0, "ignore_eos": True}
    want = detok.text(greedy(oracle(hf), prompt, 24))
    st, r = _http(sock, "POST", "/v1/completions", req)
    got = r["choices"][0]["text"] if st == 200 else r
    check(st == 200 and got == want,
          f"mistral (daemon): greedy tokens past released blocks (64 positions, block 16, "
          f"window 6) = the oracle's ({got!r})")
    done = []
    n_long = 80 if os.environ.get("INFERD_TEST_SANITIZED") else 200  # ASan: slower already
    th = threading.Thread(target=lambda: done.append(
        _http(sock, "POST", "/v1/completions", dict(req, max_tokens=n_long))))
    th.start()
    seen = 0.0
    while th.is_alive():
        m = _metrics(sock)
        seen = max(seen, m.get("inferd_kv_local_released_blocks", 0.0))
        time.sleep(0.01)
    th.join()
    check(bool(done) and done[0][0] == 200 and seen > 0,
          f"mistral (daemon): whole blocks released while a {40 + n_long}-token sequence "
          f"runs (inferd_kv_local_released_blocks up to {seen:.0f}); {time.time() - t0:.2f} s")


def serve_test(inferd, root, names, infer=None):
    """Every architecture, from each format it has, served by the daemon (`--model DIR`,
    `--model FILE.gguf`). The daemons start all at once (their start-up overlaps with each
    other and with the oracle), then are checked one by one and stopped together. The Qwen
    3 directory's also checks the generation_config.json defaults and their switch."""
    from tokenizers import Tokenizer
    t0 = time.time()
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu0 = ru.ru_utime + ru.ru_stime
    cases = []
    for name in (n for n in SERVE if n in names):
        hf = os.path.join(root, name)
        cases.append((name, "hf", hf))
        if tiny_models.VARIANTS[name]["gguf"]:
            cases.append((name, "gguf", hf + ".gguf"))
    cfg_file = os.path.join(root, "inferd.json")
    with open(cfg_file, "w") as f:
        json.dump({"generation_config": True}, f)
    extra = {("qwen3", "hf"): ("--config", cfg_file),
             # fresh worker stats for the local-pool gauges (local_pool_checks)
             ("gemma3_mm", "hf"): ("--worker-ping-interval", "0.05"),
             ("mistral", "hf"): ("--worker-ping-interval", "0.05")}
    started = [_spawn_daemon(inferd, path, os.path.join(root, f"serve{i}"),
                             extra.get((name, fmt), ()))
               for i, (name, fmt, path) in enumerate(cases)]
    detok = _Detok()
    chat_text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n"
                        for m in CHAT) + "<|im_start|>assistant\n"
    refs = {}
    try:
        for (name, fmt, path), (p, sock, log) in zip(cases, started):
            if name not in refs:   # the oracle's greedy tokens, on the HF weights
                hf = os.path.join(root, name)
                # the chat prompt as the ChatML template renders it, tokenized here
                chat_ids = Tokenizer.from_file(os.path.join(hf, "tokenizer.json")).encode(
                    chat_text, add_special_tokens=False).ids
                cls = tiny_models.VARIANTS[name]["cls"]
                refs[name] = {"arch": tiny_models.GGUF_ARCH.get(cls, "gemma3"),
                              "n_vocab": N_TOKENS + tiny_models.VARIANTS[name].get("vocab_pad", 0),
                              "completion": GREEDY[name], "chat_prompt": chat_ids,
                              "chat": greedy(oracle(hf), chat_ids, SERVE_N)}
            try:
                if not _wait_ready(p, sock):
                    check(False, f"{name} ({fmt}): the daemon did not start; log {log.name}")
                    continue
                _serve_checks(sock, name, fmt, path, refs[name], detok)
                if infer:
                    infer_models_check(infer, sock, name, fmt, path, refs[name])
                if (name, fmt) == ("qwen3", "hf"):
                    # Qwen 3: its random next-token distributions are flat (Qwen 2's tied
                    # ones are peaked), so sampling settings show in the tokens
                    generation_config_test(p, sock, cfg_file)
                if (name, fmt) == ("gemma3_mm", "hf"):
                    local_pool_checks(sock)
                if (name, fmt) == ("mistral", "hf"):
                    all_local_checks(sock, os.path.join(root, name), detok)
            except (OSError, http.client.HTTPException, ValueError, KeyError, IndexError,
                    TypeError) as e:
                check(False, f"{name} ({fmt}) through the daemon: {e!r}; log {log.name}")
    finally:
        for p, _, _ in started:
            p.terminate()
        for p, _, log in started:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
            log.close()
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"serve: {len(cases)} daemons in {time.time() - t0:.1f} s, "
          f"{ru.ru_utime + ru.ru_stime - cpu0:.1f} s of their CPU", flush=True)


# A model big enough for its weights to dominate a worker's memory: 4 layers of hidden
# 512 and the 50k vocabulary, tied, BF16 (78 MB of safetensors; inferd keeps BF16 in 16 bits).
BIG = dict(cls="LlamaForCausalLM", layers=4, embd=512, heads=8, kv=4, ff=1536, tie=True,
           dtype="BF16", gguf=False, theta=10000.0)


def _peak_rss(cmd):
    """Runs cmd; its exit status, peak RSS in bytes and stderr. Through a fresh, small
    Python: a child's ru_maxrss counts the memory of the process it was forked from (kept
    across exec), and this test's own process holds hundreds of MiB of NumPy arrays."""
    probe = ("import os, subprocess, sys\n"
             "p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)\n"
             "_, st, ru = os.wait4(p.pid, 0)\n"
             "print(os.waitstatus_to_exitcode(st), ru.ru_maxrss)\n")
    p = subprocess.run([sys.executable, "-c", probe, *cmd], capture_output=True, text=True,
                       timeout=300)
    rc, kib = (int(x) for x in p.stdout.split())
    return rc, kib * 1024, p.stderr


def weight_memory_test(worker, root, small):
    """Weights load without a full copy (item 1): safetensors are mmapped and each
    tensor is converted (here: repacked into BF16 panels) and its pages released before
    the next, so a worker's peak RSS grows by about the file's size, not twice it.
    Measured against the same run on a tiny model (the worker's own baseline). Not in a
    sanitized build: ASan's shadow memory and its quarantine of freed blocks are RSS too."""
    if os.environ.get("INFERD_TEST_SANITIZED"):
        print("      (weights without a full copy: not measured in a sanitized build)")
        return
    tokens, _, merges = tiny_models.load_vocab()
    d = os.path.join(root, "llama_big")
    tiny_models.write_hf(d, BIG, tiny_models.make_weights(BIG, len(tokens), 99), tokens, merges)
    size = os.path.getsize(os.path.join(d, "model.safetensors"))
    args = ["--prompt-ids", "1 2 3", "-n", "1", "--ignore-eos"]
    rc0, base, err0 = _peak_rss([worker, "--model", small, *args])
    rc1, big, err1 = _peak_rss([worker, "--model", d, *args])
    grew = big - base
    check(rc0 == 0 and rc1 == 0 and grew < 1.5 * size,
          f"weights without a full copy: peak RSS {big / 2**20:.1f} MiB vs {base / 2**20:.1f} "
          f"MiB on a tiny model, +{grew / 2**20:.1f} MiB for {size / 2**20:.1f} MiB of "
          f"safetensors (limit 1.5x; exits {rc0}, {rc1}: {(err0 + err1).strip()[-300:]})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("worker")
    ap.add_argument("--inferd", help="the daemon binary: also serve a directory through it")
    ap.add_argument("--infer", help="the CLI: also run `infer models` on each served model "
                                    "and `infer inspect` on a directory")
    ap.add_argument("--keep", metavar="DIR", help="write the models here and keep them")
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--full", action="store_true",
                    help="also run the oracle on each GGUF (slow: its vocabulary)")
    a = ap.parse_args()
    if not os.access(a.worker, os.X_OK):
        skip(f"no worker binary at {a.worker}")
    if not os.path.exists(os.path.join(tiny_models.vocab_dir(), tiny_models.VOCAB_GGUF)):
        skip(f"no {tiny_models.VOCAB_GGUF} in {tiny_models.vocab_dir()}")
    root = a.keep or tempfile.mkdtemp(prefix="ifd_tiny_")
    os.makedirs(root, exist_ok=True)
    try:
        names = tiny_models.build(root, a.only)
        for name in names:
            v = tiny_models.VARIANTS[name]
            hf = os.path.join(root, name)
            tok_hf, lg_hf = run_worker(a.worker, hf)
            rows = oracle_rows(hf, tok_hf)
            nv = N_TOKENS
            if v.get("vocab_pad"):
                vocab_pad_checks(name, lg_hf, rows, tok_hf)
                lg_hf, rows = lg_hf[:, :nv], rows[:, :nv]
            # the oracle's greedy tokens among the tokenizer's ids
            GREEDY[name] = [int(t) for t in np.argmax(rows[len(PROMPT) - 1:], axis=1)]
            e = rel_l2(lg_hf, rows)
            check(e <= a.tol, f"{name}: HF directory vs oracle, max rel-L2 {e:.2e}")
            if not v["gguf"]:
                continue
            g = hf + ".gguf"
            tok_g, lg_g = run_worker(a.worker, g)
            # the oracle on the HF weights; --full also runs it on the GGUF itself (its
            # GGUF reader spends seconds on the 50k-token vocabulary)
            ref = oracle_rows(g if a.full else hf, tok_g)
            e = rel_l2(lg_g, ref)
            check(e <= a.tol, f"{name}: GGUF vs oracle ({'GGUF' if a.full else 'HF'} weights), "
                              f"max rel-L2 {e:.2e}")
            permuted = tiny_models.GGUF_ARCH[v["cls"]] == "llama"
            same = tok_hf == tok_g and lg_hf.shape == lg_g.shape
            if same and not permuted:
                check(bool(np.array_equal(lg_hf, lg_g)), f"{name}: HF and GGUF logits identical")
            else:
                e = rel_l2(lg_hf, lg_g) if same else float("inf")
                check(e <= 1e-5, f"{name}: HF and GGUF agree (Q/K permuted), max rel-L2 {e:.2e}")

        if not a.only or "llama" in a.only:
            v = tiny_models.VARIANTS["llama"]
            tokens, types, merges = tiny_models.load_vocab()
            w = tiny_models.make_weights(v, len(tokens), 1234)
            # layout check: HF rows through the interleaved path must be caught
            bad = os.path.join(root, "llama_unpermuted.gguf")
            tiny_models.write_gguf(bad, v, w, tokens, types, merges, permute=False)
            tok_b, lg_b = run_worker(a.worker, bad)
            e = rel_l2(lg_b, oracle_rows(os.path.join(root, "llama"), tok_b))
            check(e > 1e-2, f"llama: unpermuted GGUF (HF layout, interleaved RoPE) is caught, "
                            f"rel-L2 {e:.2e} vs the oracle")
            # sharded vs single file
            sh = os.path.join(root, "llama_sharded")
            tiny_models.write_hf(sh, v, w, tokens, merges, shards=3)
            tok_s, lg_s = run_worker(a.worker, sh)
            tok_1, lg_1 = run_worker(a.worker, os.path.join(root, "llama"))
            check(tok_s == tok_1 and bool(np.array_equal(lg_s, lg_1)),
                  "llama: three shards and one file give identical logits")
            corruption_tests(a.worker, root, "llama")
            weight_memory_test(a.worker, root, os.path.join(root, "llama"))
        if not a.only or "qwen2" in a.only:
            inspect_test(a.worker, os.path.join(root, "qwen2"), a.inferd, a.infer)
        if not a.only or "gemma3_mm" in a.only:
            local_pool_test(a.worker, os.path.join(root, "gemma3_mm"), a.tol)
        if a.inferd:
            serve_test(a.inferd, root, names, a.infer)
    except RuntimeError as e:
        check(False, str(e))
    finally:
        if not a.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(f"{len(failures)} failure(s)" if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
