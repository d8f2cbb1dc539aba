#!/usr/bin/env python3
"""test_tiny_models.py — every architecture from both formats, against the NumPy oracle.

tiny_models.py writes tiny random-weight models (llama with llama3 RoPE scaling, tied
llama in F16, Mistral with a sliding window in BF16, Qwen 2 with biases, Qwen 3 with
QK-norm, Gemma 3, and a Gemma 3 multimodal-layout checkpoint in two shards) as Hugging Face
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
    bad or unsupported config.json, an untied model without lm_head, and a directory that
    is no model each fail with exit status != 0 and a one-line message naming the file (and
    tensor);
  * --inspect DIR --json reports format, architecture and source, the chat template from
    tokenizer_config.json and generation_config.json's eos ids among the stop tokens;
  * with --inferd: the daemon serves the Qwen 3 directory (`--model DIR`), applies its
    generation_config.json sampling defaults (not with --no-generation-config): /v1/models lists
    it and a chat completion, rendered with the directory's ChatML template, succeeds.

Exit 0 on success, 1 on a failure, 77 ("SKIPPED: why") without numpy/gguf/tokenizers, the
shared vocabulary or the worker.

    test_tiny_models.py WORKER [--inferd INFERD] [--keep DIR] [--only NAME ...] [--tol 1e-4] [--full]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
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


def run_worker(worker, model, extra=()):
    with tempfile.NamedTemporaryFile(suffix=".npy", delete=False) as f:
        dump = f.name
    cmd = [worker, "--model", model, "--prompt-ids", " ".join(map(str, PROMPT)),
           "-n", str(N_GEN), "--json", "--ignore-eos", "--dump-logits", dump, *extra]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        os.unlink(dump)
        raise RuntimeError(f"{' '.join(cmd[:3])}: exit {p.returncode}: {p.stderr.strip()}")
    out = json.loads([ln for ln in p.stdout.splitlines() if ln.startswith("{")][-1])
    logits = np.load(dump)
    os.unlink(dump)
    return out["tokens"], logits


def rel_l2(a, b):
    """Max over rows of ||a - b|| / ||b||."""
    n = min(len(a), len(b))
    a, b = a[:n].astype(np.float64), b[:n].astype(np.float64)
    return float(np.max(np.linalg.norm(a - b, axis=1) / np.linalg.norm(b, axis=1)))


def oracle_rows(path, tokens):
    m = llama_oracle.LlamaOracle(path)
    return m.score(PROMPT + tokens[:-1])


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
    fails_with(worker, d, [u, "missing"], "missing tensor")

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


def inspect_test(worker, path):
    p = subprocess.run([worker, "--inspect", path, "--json"], capture_output=True, text=True,
                       timeout=120)
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
    p = subprocess.run([worker, "--inspect", path + ".gguf"], capture_output=True, text=True,
                       timeout=120)
    check(p.returncode == 0 and "format:" in p.stdout and "gguf" in p.stdout,
          "--inspect FILE.gguf prints the format")


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


def _start_daemon(inferd, model, root, extra=()):
    """Starts inferd on the directory; returns (process, socket, log) once /v1/models answers."""
    sock = os.path.join(root, "inferd.sock")
    log = open(os.path.join(root, "inferd.log"), "a")
    p = subprocess.Popen([inferd, "--model", model, "--socket", sock, "--kv-budget", "32M",
                          "--workers", "1", *extra], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 120
    while time.time() < deadline and p.poll() is None:
        try:
            st, r = _http(sock, "GET", "/v1/models")
            if st == 200 and r["data"]:
                break
        except (OSError, http.client.HTTPException, ValueError):
            pass
        time.sleep(0.2)
    return p, sock, log


def _stop_daemon(p, log):
    p.terminate()
    try:
        p.wait(30)
    except subprocess.TimeoutExpired:
        p.kill()
    log.close()


# A seeded sampled completion: the same tokens exactly when the sampling parameters are equal.
def _sample(sock, **params):
    st, r = _http(sock, "POST", "/v1/completions",
                  {"prompt": [1, 2, 3, 4], "max_tokens": 12, "ignore_eos": True, "seed": 7,
                   **params})
    if st != 200:
        raise ValueError(f"completion: HTTP {st}: {r}")
    return r["choices"][0]["text"]


def daemon_test(inferd, model, root):
    """inferd --model DIR serves the directory; generation_config.json's sampling defaults
    (temperature 0.7, top_p 0.9, top_k 20) apply to requests that leave them out, unless
    --no-generation-config."""
    plain = None
    p, sock, log = _start_daemon(inferd, model, root)
    try:
        st, r = _http(sock, "GET", "/v1/models")
        m = r["data"][0]
        check(st == 200 and m["id"] == os.path.basename(model) and
              m["root"] == os.path.realpath(model) and m.get("architecture") == "qwen3" and
              m.get("format") == "hf",
              f"daemon: /v1/models lists the directory with architecture and format ({st}, {m})")
        st, r = _http(sock, "POST", "/v1/chat/completions",
                      {"messages": [{"role": "user", "content": "Hello there"}],
                       "max_tokens": 4})
        # ChatML from tokenizer_config.json: <|im_start|> user \n Hello there <|im_end|> \n
        # <|im_start|> assistant \n = 11 tokens with this vocabulary
        ok = st == 200 and r["usage"]["completion_tokens"] >= 1 and \
            r["usage"]["prompt_tokens"] == 11
        check(ok, f"daemon: chat completion from the HF directory ({st}, "
                  f"usage {r.get('usage') if isinstance(r, dict) else r})")
        dflt = _sample(sock)
        model_params = _sample(sock, temperature=0.7, top_p=0.9, top_k=20)
        plain = _sample(sock, temperature=1.0, top_p=1.0, top_k=0)
        check(dflt == model_params and dflt != plain,
              "daemon: generation_config.json's temperature/top_p/top_k are the request "
              f"defaults ({dflt!r} vs the same given {model_params!r}, plain {plain!r})")
        check(_sample(sock, temperature=1.0) == _sample(sock, temperature=1.0, top_p=0.9,
                                                         top_k=20),
              "daemon: a field the request sets wins; the others still default to the model's")
    except (OSError, http.client.HTTPException, ValueError, KeyError, IndexError) as e:
        check(False, f"daemon: {e}; log in {log.name}")
    finally:
        _stop_daemon(p, log)
    p, sock, log = _start_daemon(inferd, model, root, ["--no-generation-config"])
    try:
        check(plain is not None and _sample(sock) == plain,
              "daemon --no-generation-config: requests keep OpenAI's defaults")
    except (OSError, http.client.HTTPException, ValueError, KeyError, IndexError) as e:
        check(False, f"daemon --no-generation-config: {e}; log in {log.name}")
    finally:
        _stop_daemon(p, log)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("worker")
    ap.add_argument("--inferd", help="the daemon binary: also serve a directory through it")
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
            e = rel_l2(lg_hf, oracle_rows(hf, tok_hf))
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
        if not a.only or "qwen2" in a.only:
            inspect_test(a.worker, os.path.join(root, "qwen2"))
        # Qwen 3: its random next-token distributions are flat (Qwen 2's tied ones are
        # peaked), so sampling settings show in the tokens
        if a.inferd and (not a.only or "qwen3" in a.only):
            daemon_test(a.inferd, os.path.join(root, "qwen3"), root)
    except RuntimeError as e:
        check(False, str(e))
    finally:
        if not a.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(f"{len(failures)} failure(s)" if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
