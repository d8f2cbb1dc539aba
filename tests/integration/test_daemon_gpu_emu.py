"""inferd --gpus on the CUDA kernel emulator (labels emu, model), through the official
`openai` client over an httpx Unix-socket transport.

The GPU workers are inferd-worker-emu: the real worker (serve loop, engine, model code,
worker/backend_cuda.c and the real kernels/cuda sources) linked against the CPU emulator of
tests/gpu/emu instead of the CUDA libraries. The model is random weights in the tiny shape
deploy/shapes/tiny-llama.json with the default model's tokenizer (its weights are not read),
so the emulator's slowness does not matter. Checked:

- without a GPU (the normal worker on this machine), `--gpus 0` exits 1 with one error line
  (the device's, not the CUDA module's: the worker opened libinferd-cuda.so, and sent it as
  ERROR before POOL_SIZE), and so does a worker program that dies, is killed, hangs or writes
  garbage before POOL_SIZE (the POOL step: proto/wire.h);
- a SIGTERM or SIGINT during the POOL step stops the sizing worker (killed and reaped) and
  exits 0 with one line and no socket; a SIGHUP then is ignored;
- `--gpus 0` sizes the KV pool from the emulated device memory in the POOL step, loading the
  weights once (one worker process started, no `--kv-probe`; the log's block count is
  /metrics' inferd_kv_blocks_capacity) and serves a streamed chat completion (and draws
  within vLLM's allowed_token_ids on the device sampler, and vLLM's logprob_token_ids from
  host-sampled rows); the pool's
  segment is (emulated) CUDA VMM memory whose fd the router holds, so a SIGKILLed worker's
  replacement serves the same prompt from the cached prefix with the same tokens;
- exact mode (`--gpu-dtype f32`) gives the CPU daemon's greedy tokens on the same random
  weights (same --weights-seed), up to a near-tie of the CPU's top two logprobs, and the
  same prompt logprobs (vLLM's prompt_logprobs: the prompt rows' logits downloaded beside
  the device-sampled rows); that CPU daemon's serving worker maps no CUDA library
  (/proc/PID/maps: the CUDA backend is the module libinferd-cuda.so, opened only for a GPU,
  worker/cuda_module.h);
- `--spec draft` with a tiny GGUF Llama as its own draft: the POOL step counts the draft
  (fewer blocks), and the greedy text equals `"speculative": false`'s, with proposals
  accepted;
- `--kv-cache-host-bytes` and `--kv-cache-dir` on a GPU worker: blocks copied to the host
  tier and written to disk through host copies; a restarted daemon (with
  `--kv-cache-pin-slots 1`: a ring of one pinned slot) reads the prefix from disk with the
  same tokens;
- `--gpus 0,1`: two workers, each with its own CUDA_VISIBLE_DEVICES and pool device, and a
  repeated prompt is routed to the worker that caches its prefix;
- the pool probe (`inferd-worker --kv-probe`) measures what a warm-up of the engine's largest
  steps and its decode graphs take (worker/kvprobe.h): activations grow and the block count
  shrinks with --max-batched-tokens, and on a small emulated device ($IFD_EMU_DEVICE_MIB,
  where allocations past the device fail and graphs hold memory) a pool sized at 100% of it
  leaves the serving worker room for a step of max_batched_tokens and its decode graphs.

Usage: test_daemon_gpu_emu.py INFERD INFERD_WORKER INFERD_WORKER_EMU
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_daemon_util import Daemon, model_path, require_model, run_tests, skip  # noqa: E402

try:
    import httpx
    import openai
except ImportError as e:  # pragma: no cover
    skip("the openai/httpx packages are not installed (%s): run deploy/install-deps.sh" % e)

if len(sys.argv) < 4:
    skip("usage: test_daemon_gpu_emu.py INFERD INFERD_WORKER INFERD_WORKER_EMU")
INFERD, WORKER, WORKER_EMU = sys.argv[1:4]
SRC = os.environ.get("INFERD_SOURCE_DIR",
                     os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SHAPE = os.path.join(SRC, "deploy", "shapes", "tiny-llama.json")
MODEL = "random-tiny-llama"
SEED = 11
PROMPTS = ["Name three colors.", "Write one sentence about the sea, please."]
require_model()


def client(d):
    http = httpx.Client(transport=httpx.HTTPTransport(uds=d.sock), timeout=120)
    return openai.OpenAI(base_url="http://localhost/v1", api_key="unused", http_client=http,
                         max_retries=0)


def gpu_daemon(gpus="0", dtype="bf16", fraction="0.2", worker=WORKER_EMU, extra=()):
    # few sequences, small steps and a short context: the POOL step's warm-up runs the
    # largest steps and every decode graph's, slow on the emulator (49152-id logits)
    return Daemon(INFERD, args=["--gpus", gpus, "--gpu-dtype", dtype, "--worker-binary",
                                worker, "--random-weights", SHAPE, "--weights-seed",
                                str(SEED), "--gpu-memory-fraction", fraction, "--max-seqs", "4",
                                "--max-model-len", "512", "--max-batched-tokens", "64"]
                  + list(extra))


def wait_log(d, text, timeout=20):
    """The daemon's log once it holds `text` (a worker's lines are relayed after its READY)."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        with open(d.logpath, "rb") as f:
            log = f.read().decode("utf-8", "replace")
        if text in log:
            return log
        time.sleep(0.05)
    raise AssertionError("%r not in the log:\n%s" % (text, d.logtext()))


def greedy(c, prompt, n=10):
    """Greedy completion tokens with the top-2 logprobs at each step."""
    r = c.completions.create(model=MODEL, prompt=prompt, max_tokens=n, temperature=0,
                             logprobs=2)
    lp = r.choices[0].logprobs
    return lp.tokens, lp.top_logprobs


def test_no_gpu_gives_one_line_error():
    dev = subprocess.run([WORKER, "--devices"], capture_output=True, text=True, timeout=60)
    if re.search(r"^cuda:\d", dev.stdout, re.M):
        print("  (a CUDA device is present: the no-GPU check does not apply here)")
        return
    out = subprocess.run([INFERD, "--model", model_path(), "--gpus", "0", "--worker-binary",
                          WORKER, "--socket", "/nonexistent/inferd-gpu-test.sock"],
                         capture_output=True, text=True, timeout=120)
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert out.returncode == 1, (out.returncode, out.stderr)
    assert len(lines) == 1, "wanted one error line, got:\n" + out.stderr
    assert " error: GPU 0: " in lines[0] and ("CUDA" in lines[0]), lines[0]
    # the real worker found and opened this build's CUDA module (every symbol it takes from
    # the worker resolved): what failed is the device, not the module
    assert "CUDA backend module" not in lines[0], lines[0]
    # a bad list is refused before anything starts
    out = subprocess.run([INFERD, "--model", model_path(), "--gpus", "0,x"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 1 and "gpus '0,x'" in out.stderr, out.stderr


def test_pool_step_failures_are_one_line():
    """A worker program that fails before POOL_SIZE: it dies (exits, is killed), hangs past
    worker_start_timeout, or writes garbage on the socket. One line, exit 1, no restart."""
    d = tempfile.mkdtemp(prefix="inferd-poolstep-")
    cases = [("exit 3", [], "GPU 3: %s ended before sizing the KV pool (exit status 3)"),
             ("kill -9 $$", [], "GPU 3: %s ended before sizing the KV pool (killed by signal 9)"),
             ("exec sleep 30", ["--worker-start-timeout", "1"], "GPU 3: loading the weights and "
              "sizing the KV pool took over 1 s"),
             ("printf 'this is not a frame' >&3; exec sleep 30", [],
              "GPU 3: broken frames from %s before sizing the KV pool: ")]
    try:
        for i, (body, extra, want) in enumerate(cases):
            fake = os.path.join(d, "worker%d.sh" % i)
            with open(fake, "w") as f:
                f.write("#!/bin/sh\n" + body + "\n")
            os.chmod(fake, 0o755)
            want = want.replace("%s", fake)
            t0 = time.time()
            out = subprocess.run([INFERD, "--model", model_path(), "--gpus", "3",
                                  "--worker-binary", fake, "--socket", os.path.join(d, "s.sock")]
                                 + extra, capture_output=True, text=True, timeout=60)
            lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
            assert out.returncode == 1 and len(lines) == 1, (body, out.returncode, out.stderr)
            assert " error: " + want in lines[0], (want, lines[0])
            assert time.time() - t0 < 20, "a hung worker must be killed at the timeout"
            assert not os.path.exists(os.path.join(d, "s.sock")), "listening before the pool"
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_signals_while_sizing():
    """SIGTERM or SIGINT during the POOL step (the first worker loading the weights, minutes on
    a GPU) is a clean stop: one line saying the start-up was interrupted, then the sizing
    worker's exit (killed and reaped: its pid gone from /proc as the daemon exits), exit 0, no
    socket. A
    SIGHUP then is ignored (one line). The worker program delays before the real worker."""
    d = tempfile.mkdtemp(prefix="inferd-sizing-")
    try:
        for sig in (signal.SIGTERM, signal.SIGINT):
            pidf = os.path.join(d, "pid-%d" % sig)
            fake = os.path.join(d, "worker-%d.py" % sig)
            with open(fake, "w") as f:  # one process: the delay, then exec (no orphan child)
                f.write("#!%s\nimport os, sys, time\nopen(%r, 'w').write(str(os.getpid()))\n"
                        "time.sleep(30)\nos.execv(%r, [%r] + sys.argv[1:])\n"
                        % (sys.executable, pidf, WORKER_EMU, WORKER_EMU))
            os.chmod(fake, 0o755)
            sock = os.path.join(d, "s.sock")
            logp = os.path.join(d, "log-%d" % sig)
            with open(logp, "w") as log:
                p = subprocess.Popen([INFERD, "--model", model_path(), "--gpus", "0",
                                      "--worker-binary", fake, "--random-weights", SHAPE,
                                      "--socket", sock], stderr=log)
            try:
                t0 = time.time()
                while not os.path.exists(pidf) or not open(pidf).read():
                    assert time.time() - t0 < 20 and p.poll() is None, open(logp).read()
                    time.sleep(0.02)
                wpid = int(open(pidf).read())
                if sig == signal.SIGTERM:
                    p.send_signal(signal.SIGHUP)
                    time.sleep(0.2)
                    assert p.poll() is None, "SIGHUP while sizing ended the daemon"
                p.send_signal(sig)
                rc = p.wait(10)
            finally:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            text = open(logp).read()
            lines = [ln for ln in text.splitlines() if ln.strip() and "random weights:" not in ln]
            want = ["SIGHUP while sizing the KV pool: ignored"] if sig == signal.SIGTERM else []
            want += ["%s: start-up interrupted while sizing the KV pool" % sig.name,
                     "worker 0 (pid %d) exited: killed by signal 9" % wpid]
            assert rc == 0, (sig.name, rc, text)
            assert len(lines) == len(want) and all(w in ln for w, ln in zip(want, lines)), text
            assert not os.path.exists("/proc/%d" % wpid), "worker %d left behind" % wpid
            assert not os.path.exists(sock), "a socket left behind"
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_gpu_stream_and_pool_size():
    # the worker program through a wrapper that notes each start: one load of the weights
    # (the POOL step) means one start, serving, and no `--kv-probe` run before it
    tmp = tempfile.mkdtemp(prefix="inferd-gpu-")
    starts = os.path.join(tmp, "starts")
    wrapper = os.path.join(tmp, "worker.sh")
    with open(wrapper, "w") as f:
        f.write('#!/bin/sh\necho "$*" >> %s\nexec %s "$@"\n' % (starts, WORKER_EMU))
    os.chmod(wrapper, 0o755)
    d = gpu_daemon(worker=wrapper)
    try:
        h = d.json("GET", "/health")
        assert len(h["workers"]) == 1 and "emulator" in h["workers"][0]["device"], h
        log = wait_log(d, "CUDA_VISIBLE_DEVICES=0")
        m = re.search(r"GPU 0 \(.*emulator.*\): .* (\d+) KV blocks fit in 20% of it", log)
        assert m, log
        blocks = int(m.group(1))
        assert blocks > 100, blocks
        with open(starts) as f:
            runs = f.read().splitlines()
        assert len(runs) == 1 and "--serve" in runs[0] and "--kv-probe" not in runs[0], runs
        # the log tells the POOL step's order: sized, pool created, then the worker's READY
        assert log.index("KV blocks fit") < log.index("KV pool %d blocks" % blocks) < \
            log.index("worker 0 (pid"), log
        met = d.metrics()
        assert met["inferd_kv_blocks_capacity"] == blocks, (met["inferd_kv_blocks_capacity"],
                                                            blocks)
        c = client(d)
        text, finish, n_chunks, usage = "", None, 0, None
        for ch in c.chat.completions.create(model=MODEL, stream=True, max_tokens=12,
                                            temperature=0, stream_options={"include_usage": True},
                                            messages=[{"role": "user", "content": PROMPTS[0]}]):
            n_chunks += 1
            if ch.usage:
                usage = ch.usage
            for x in ch.choices:
                text += x.delta.content or ""
                if x.finish_reason:
                    finish = x.finish_reason
        assert finish == "length" and text, (finish, text)
        assert usage.completion_tokens == 12 and usage.prompt_tokens > 5, usage
        assert n_chunks >= 12, n_chunks
        # the same request again: equal text, prefix from the cache
        r = c.chat.completions.create(model=MODEL, max_tokens=12, temperature=0,
                                      messages=[{"role": "user", "content": PROMPTS[0]}])
        assert r.choices[0].message.content == text, (r.choices[0].message.content, text)
        assert r.usage.prompt_tokens_details.cached_tokens > 0, r.usage
        # vLLM's allowed_token_ids on the device sampler: every draw at temperature 1 (two
        # samples) is one of the set's ids
        allowed = [1000, 2000, 3000, 4000]
        r = c.completions.create(model=MODEL, prompt=PROMPTS[1], max_tokens=6, temperature=1,
                                 n=2, seed=5, extra_body={"allowed_token_ids": allowed,
                                                          "return_token_ids": True})
        for ch in r.choices:
            assert set(ch.model_extra["token_ids"]) <= set(allowed), ch.model_extra
        # logprob_token_ids: those rows are sampled on the host (the device gives top k only)
        r = c.completions.create(model=MODEL, prompt=PROMPTS[1], max_tokens=3, temperature=0,
                                 logprobs=0, extra_body={"logprob_token_ids": allowed,
                                                         "return_tokens_as_token_ids": True})
        for t, top in zip(r.choices[0].logprobs.tokens, r.choices[0].logprobs.top_logprobs):
            assert set(top) == {t} | {"token_id:%d" % i for i in allowed}, (t, top)
        d.wait_idle()
        # the KV segment is device memory whose fd the router holds: a worker killed
        # with SIGKILL is replaced, and the new one finds the cached prefix still valid
        wait_log(d, "holding the KV pool's device 0 segment (CUDA VMM fd)")
        old_pid = d.worker_pids()[0]
        os.kill(old_pid, signal.SIGKILL)
        t0 = time.time()
        while time.time() - t0 < 60:
            w = json.loads(d.request("GET", "/health")[1])["workers"][0]  # 503 meanwhile
            if w["state"] == "ready" and w["pid"] not in (0, old_pid):
                break
            time.sleep(0.1)
        else:
            raise AssertionError("the worker did not come back:\n" + d.logtext())
        r = c.chat.completions.create(model=MODEL, max_tokens=12, temperature=0,
                                      messages=[{"role": "user", "content": PROMPTS[0]}])
        assert r.choices[0].message.content == text, (r.choices[0].message.content, text)
        assert r.usage.prompt_tokens_details.cached_tokens > 0, r.usage
        d.wait_idle()
        with open(starts) as f:  # the replacement: a plain HELLO, the pool exists
            assert len(f.read().splitlines()) == 2
    finally:
        assert d.stop() == 0, d.logtext()
        shutil.rmtree(tmp, ignore_errors=True)


def prompt_logprobs(d):
    r = d.json("POST", "/v1/completions", {"prompt": PROMPTS[0], "max_tokens": 2,
                                           "temperature": 0, "prompt_logprobs": 2})
    return r["choices"][0]["prompt_logprobs"]


# libcuda, libcudart, libcublas, libcublasLt, the backend module: ≈ 150 MiB resident once mapped
CUDA_LIBS = re.compile(r"/lib(?:cuda|cudart|cublas|cublasLt|inferd-cuda)\b[^/\s]*\.so[^/\s]*$",
                       re.M)


def cuda_mapped(pid):
    """The CUDA libraries process `pid` maps (from /proc/PID/maps), as a sorted list."""
    with open("/proc/%d/maps" % pid) as f:
        return sorted({os.path.basename(m.group(0)) for m in CUDA_LIBS.finditer(f.read())})


def test_host_and_disk_tiers_across_restart():
    """--kv-cache-host-bytes and --kv-cache-dir on a GPU worker (docs/kvpool.md, "Host tier"):
    the published blocks are copied to the host tier and written to disk through host copies
    (the pool is device memory); a restarted daemon on the directory serves the same prompt
    with its prefix read from disk (cached tokens, disk hits, vLLM's external prefix cache
    hits) and the same greedy tokens."""
    kvdir = tempfile.mkdtemp(prefix="inferd-kv-host-")
    extra = ["--kv-cache-host-bytes", "16M", "--kv-cache-dir", kvdir]
    prompt = " ".join(["the sea is wide and the sky is blue"] * 6)
    try:
        d = gpu_daemon(extra=extra)
        try:
            r1 = client(d).completions.create(model=MODEL, prompt=prompt, max_tokens=8,
                                              temperature=0)
            m = d.metrics()
            n_prompt = r1.usage.prompt_tokens
            assert n_prompt >= 48, n_prompt
            assert m["inferd_kv_host_writes_total"] >= n_prompt // 16, m
            assert m["inferd_kv_host_capacity_bytes"] > 0, m
            assert m["inferd_kv_host_blocks"] >= n_prompt // 16, m
            infer = os.path.join(os.path.dirname(os.path.dirname(INFERD)), "client", "infer")
            st = json.loads(subprocess.run([infer, "status", "--json", "--socket", d.sock],
                                           capture_output=True, text=True, timeout=60).stdout)
            assert st["host_tier"]["blocks"] == m["inferd_kv_host_blocks"], st["host_tier"]
            assert st["host_tier"]["capacity_bytes"] > 0, st["host_tier"]
            out = subprocess.run([infer, "status", "--socket", d.sock], capture_output=True,
                                 text=True, timeout=60).stdout
            assert re.search(r"^host tier +\S+ of \S+ bytes in \d+ blocks", out, re.M), out
        finally:
            d.stop()
        files = [f for f in os.listdir(kvdir) if f.endswith(".kvb")]
        assert len(files) >= n_prompt // 16, files
        # the restart with a ring of one pinned slot (kv_cache_pin_slots, passed to the worker)
        d = gpu_daemon(extra=extra + ["--kv-cache-pin-slots", "1"])
        try:
            r2 = client(d).completions.create(model=MODEL, prompt=prompt, max_tokens=8,
                                              temperature=0)
            m = d.metrics()
            cached = r2.usage.prompt_tokens_details.cached_tokens
            assert cached >= (n_prompt - 1) // 16 * 16, (cached, n_prompt)
            assert m["inferd_kv_disk_hit_blocks_total"] >= n_prompt // 16, m
            assert m["inferd_kv_host_hits_total"] == 0, m  # a new worker: an empty host tier
            assert any(k.startswith("vllm:external_prefix_cache_hits_total") and v >= cached
                       for k, v in m.items()), m
            assert r2.choices[0].text == r1.choices[0].text, (r1.choices[0].text,
                                                              r2.choices[0].text)
            assert "kv tier copies: a ring of 1 pinned slots" in d.logtext(None), d.logtext()
        finally:
            d.stop()
    finally:
        shutil.rmtree(kvdir, ignore_errors=True)


def test_exact_mode_equals_cpu():
    cpu = Daemon(INFERD, args=["--random-weights", SHAPE, "--weights-seed", str(SEED),
                               "--weights-dtype", "f32"])
    try:
        want = [greedy(client(cpu), p) for p in PROMPTS]
        want_plp = prompt_logprobs(cpu)
        for pid in cpu.worker_pids():  # after serving: the CPU path never opened CUDA
            assert cuda_mapped(pid) == [], "CPU worker %d maps %s" % (pid, cuda_mapped(pid))
    finally:
        assert cpu.stop() == 0, cpu.logtext()
    d = gpu_daemon(dtype="f32")
    try:
        assert "exact f32" in d.json("GET", "/health")["workers"][0]["device"]
        got = [greedy(client(d), p) for p in PROMPTS]
        compared = 0
        for (wt, wtop), (gt, _) in zip(want, got):
            for i, (a, b) in enumerate(zip(wt, gt)):
                lps = sorted(wtop[i].values(), reverse=True)
                near_tie = len(lps) > 1 and lps[0] - lps[1] < 1e-3
                if a != b:
                    assert near_tie, "token %d: CPU %r, emulated GPU %r (top-2 %s)" % (
                        i, a, b, wtop[i])
                    break  # the sequences may part after a tie
                compared += 1
        assert compared >= 12, compared
        got_plp = prompt_logprobs(d)
        assert len(got_plp) == len(want_plp) > 2 and got_plp[0] is None
        for w, g in zip(want_plp[1:], got_plp[1:]):
            t = next(iter(w))  # the prompt token, first in both
            assert next(iter(g)) == t and abs(w[t]["logprob"] - g[t]["logprob"]) < 1e-3, (w, g)
        d.wait_idle()
    finally:
        assert d.stop() == 0, d.logtext()


def test_speculative_same_text():
    """Speculative decoding on the (emulated) GPU worker: verification rows sampled on
    the host beside device-sampled ones; greedy and seeded text equal to
    "speculative": false, and proposals were verified (docs/speculative.md)."""
    d = gpu_daemon(extra=["--spec", "ngram", "--worker-ping-interval", "0.1"])
    try:
        c = client(d)
        prompt = "one two three four one two three four one two three four one two"
        for kw in (dict(temperature=0), dict(temperature=0.9, seed=4)):
            texts = [c.completions.create(model=MODEL, prompt=prompt, max_tokens=24,
                                          extra_body={} if on else {"speculative": False},
                                          **kw).choices[0].text for on in (False, True)]
            assert texts[0] == texts[1], (kw, texts)
        d.wait_metric("vllm:spec_decode_num_drafts_total", lambda n: n > 0)  # a verification ran
        d.wait_idle()
    finally:
        assert d.stop() == 0, d.logtext()


def test_draft_model_same_text():
    """--spec draft on the (emulated) GPU worker (docs/speculative.md): the draft loaded on the
    worker's CUDA backend, its private pool a device segment, counted by the POOL step (fewer
    KV blocks than the model alone); a tiny GGUF Llama (tests/oracle/tiny_models.py) as its
    own draft: greedy text equal to "speculative": false's, streamed and not, with proposals
    accepted. With --kv-cache-host-bytes the draft's published blocks reach a host tier of
    its own through the asynchronous copies (docs/speculative.md, "The draft's tiers"), which
    /metrics shows apart from the model's (inferd_draft_kv_host_*)."""
    sys.path.insert(0, os.path.join(SRC, "tests", "oracle"))
    try:
        import tiny_models
        vocab = os.path.join(tiny_models.vocab_dir(), tiny_models.VOCAB_GGUF)
        if not os.path.exists(vocab):  # ../shared/testdata: not ours to commit
            print("  SKIPPED: no %s (the tiny GGUF's vocabulary, ../shared/testdata)" % vocab)
            return
        # head_dim 64 (the CUDA kernels' smallest), 2 layers
        tiny_models.VARIANTS["llama_hd64"] = dict(tiny_models.VARIANTS["llama"], embd=128,
                                                  heads=2, kv=1)
        tmp = tempfile.mkdtemp(prefix="inferd-cuda-draft-")
        tiny_models.build(tmp, ["llama_hd64"])
    except ImportError as e:
        print("  (skipped: %s)" % e)
        return
    gguf_path = os.path.join(tmp, "llama_hd64.gguf")
    args = ["--model", gguf_path, "--gpus", "0", "--worker-binary", WORKER_EMU,
            "--gpu-memory-fraction", "0.2", "--max-seqs", "4", "--max-model-len", "256",
            "--max-batched-tokens", "64", "--worker-ping-interval", "0.1"]
    blocks = []
    try:
        for extra in ([], ["--spec", "draft", "--draft-model", gguf_path,
                           "--kv-cache-host-bytes", "8M"]):
            d = Daemon(INFERD, args=args + extra)
            try:
                log = wait_log(d, "KV blocks fit")
                blocks.append(int(re.search(r"(\d+) KV blocks fit", log).group(1)))
                if not extra:
                    continue
                c = client(d)
                model = c.models.list().data[0].id
                for prompt in PROMPTS:
                    texts = [c.completions.create(model=model, prompt=prompt, max_tokens=16,
                                                  temperature=0,
                                                  extra_body={} if on else {"speculative": False}
                                                  ).choices[0].text for on in (False, True)]
                    assert texts[0] == texts[1], (prompt, texts)
                    chunks = c.completions.create(model=model, prompt=prompt, max_tokens=16,
                                                  temperature=0, stream=True)
                    assert "".join(ch.choices[0].text for ch in chunks) == texts[0], prompt
                d.wait_metric("vllm:spec_decode_num_accepted_tokens_total", lambda n: n > 0)
                d.wait_idle()
                # the draft's blocks copied into its host tier (landed: the worker hands the
                # copies in flight over when idle), counted apart from the model's
                d.wait_metric("inferd_draft_kv_host_writes_total", lambda n: n > 0)
                m = d.metrics()
                assert m["inferd_draft_kv_host_blocks"] == m["inferd_draft_kv_host_writes_total"]
                assert m["inferd_draft_kv_host_capacity_bytes"] > 0, m
                assert m["inferd_draft_kv_host_dropped_total"] == 0, m
                assert m["inferd_kv_host_writes_total"] > 0, m
                print("  draft host tier: %d blocks written, the model's %d" %
                      (m["inferd_draft_kv_host_writes_total"], m["inferd_kv_host_writes_total"]))
            finally:
                assert d.stop() == 0, d.logtext()
        assert len(blocks) == 2 and 0 < blocks[1] < blocks[0], blocks
        print("  KV blocks: %d alone, %d with the draft" % tuple(blocks))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_two_gpus_route_by_prefix():
    d = gpu_daemon(gpus="0,1", fraction="0.18")
    try:
        h = d.json("GET", "/health")
        devs = sorted(w["device"] for w in h["workers"])
        assert len(devs) == 2 and "(GPU 0)" in devs[0] and "(GPU 1)" in devs[1], devs
        wait_log(d, "CUDA_VISIBLE_DEVICES=0, KV pool device 0")
        log = wait_log(d, "CUDA_VISIBLE_DEVICES=1, KV pool device 1")
        per_gpu = [int(x) for x in re.findall(r"GPU [01] \(.*\): .* (\d+) KV blocks fit", log)]
        # two equal emulated devices in the same state after the same load and warm-up
        assert len(per_gpu) == 2 and per_gpu[0] == per_gpu[1], log
        assert d.metrics()["inferd_kv_blocks_capacity"] == 2 * min(per_gpu), per_gpu
        c = client(d)
        long_prompt = " ".join(["The quick brown fox jumps over the lazy dog."] * 6)
        first = c.completions.create(model=MODEL, prompt=long_prompt, max_tokens=4,
                                     temperature=0)
        d.wait_idle()
        for _ in range(3):
            r = c.completions.create(model=MODEL, prompt=long_prompt, max_tokens=4,
                                     temperature=0)
            assert r.choices[0].text == first.choices[0].text
            assert r.usage.prompt_tokens_details.cached_tokens >= 48, r.usage
        d.wait_idle()
    finally:
        assert d.stop() == 0, d.logtext()


# The sizing tests: a 192 MiB emulated device, 4 sequences, contexts up to 512 (batch buckets
# 1, 2, 4 at context buckets 256, 512: six decode graphs), the pool at 100% of the device.
SMALL_DEVICE = {"IFD_EMU_DEVICE_MIB": "192"}
SIZING = ["--gpu-memory-fraction", "1.0", "--max-seqs", "4", "--max-model-len", "512"]
MIB = 1 << 20
PROBE = {}


def test_probe_measures_the_warmup():
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="0", **SMALL_DEVICE)
    out = subprocess.run([WORKER_EMU, "--kv-probe", "--log-level", "warn", "--backend", "cuda",
                          "--model", model_path(), "--random-weights", SHAPE, "--weights-seed",
                          str(SEED), "--max-batched-tokens", "16"] + SIZING,
                         capture_output=True, text=True, timeout=300, env=env)
    j = json.loads(out.stdout.strip().splitlines()[-1])
    assert out.returncode == 0 and j["ok"], (out.returncode, out.stdout, out.stderr)
    assert j["n_graphs"] == 6 and j["total_bytes"] == 192 * MIB, j
    # the logits of 16 rows (model.c's graph reserve: the bucket of min(max_seqs,
    # max_batched_tokens), ifd_model_set_max_seqs) of the tokenizer's 49152 ids alone, not
    # the 256 rows of the largest bucket, and the emulator's charge of 1 MiB + 64 KiB per
    # operation for each graph
    assert 16 * 49152 * 4 < j["activation_bytes"] < 256 * 49152 * 4, j
    assert j["graph_bytes"] > 6 * MIB, j
    used = j["total_bytes"] - j["free_bytes"]
    # cuBLASLt's 32 MiB workspace, the weights and what the warm-up measured are all in use
    assert used >= 32 * MIB + j["weight_bytes"] + j["activation_bytes"] + j["graph_bytes"], j
    left = j["total_bytes"] - used - j["margin_bytes"]
    assert 0 <= left - j["n_blocks"] * j["block_bytes"] < j["block_bytes"], j
    PROBE.update(j)


def test_pool_at_100_percent_of_a_small_device():
    """The pool takes all that the probe leaves of the device; the worker must still run a
    step of max_batched_tokens tokens and record its decode graphs (an allocation past the
    device fails there, as on a GPU). A larger max_batched_tokens than the probe above:
    more activations, fewer blocks."""
    d = Daemon(INFERD, env=SMALL_DEVICE,
               args=["--gpus", "0", "--worker-binary", WORKER_EMU, "--random-weights", SHAPE,
                     "--weights-seed", str(SEED), "--max-batched-tokens", "128"] + SIZING)
    try:
        log = wait_log(d, "CUDA_VISIBLE_DEVICES=0")
        m = re.search(r"GPU 0 \(.*\): .*activations \(([\d.]+) MiB\) and (\d+) decode graphs "
                      r"\(([\d.]+) MiB\) measured.* (\d+) KV blocks fit in 100% of it", log)
        assert m and int(m.group(2)) == 6, log
        if PROBE:
            assert float(m.group(1)) * MIB > PROBE["activation_bytes"] + 0.1 * MIB, (log, PROBE)
            assert int(m.group(4)) < PROBE["n_blocks"], (log, PROBE)
        c = client(d)
        long_prompt = " ".join(["The quick brown fox jumps over the lazy dog."] * 16)
        r = c.completions.create(model=MODEL, prompt=long_prompt, max_tokens=4, temperature=0)
        assert 128 < r.usage.prompt_tokens < 500 and r.usage.completion_tokens == 4, r.usage
        # concurrent decodes: batch buckets up to 4, graph-recorded
        res, errs = [], []

        def one(i):
            try:
                rr = client(d).completions.create(model=MODEL, prompt="Count to %d:" % i,
                                                  max_tokens=6, temperature=0)
                res.append(rr.usage.completion_tokens)
            except Exception as e:  # noqa: BLE001 (reported below)
                errs.append(repr(e))
        th = [threading.Thread(target=one, args=(i,)) for i in range(4)]
        for t in th:
            t.start()
        for t in th:
            t.join(120)
        assert not errs and res == [6] * 4, (errs, res)
        d.wait_idle()
        log = d.logtext()
        for bad in ("recording the decode graph", "cudaMalloc", "out of memory"):
            assert bad not in log, "%r in the log:\n%s" % (bad, log)
    finally:
        assert d.stop() == 0, d.logtext()


if __name__ == "__main__":
    sys.exit(run_tests(globals(), sys.argv[4:]))
