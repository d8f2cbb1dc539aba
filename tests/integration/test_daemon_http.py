"""inferd over plain HTTP (label model): every endpoint with curl --unix-socket,
the documented error statuses, HTTP limits and timeouts, keep-alive and
pipelining, TCP with an API key, the bounded queue, configuration precedence,
stale sockets, SIGHUP. After every test against the shared daemon, /metrics
must show no KV block held.

Usage: test_daemon_http.py INFERD   (standard library + curl only)
"""
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_daemon_util import (Daemon, model_path, serve_and_run, sse_events,  # noqa: E402
                              stream_text)

INFERD = sys.argv[1] if len(sys.argv) > 1 else "inferd"
D = None
PORT = 0
KEY = "test-key-123"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def err_of(body):
    e = json.loads(body)["error"]
    assert set(e) >= {"message", "type", "param", "code"}, e
    return e


def after():
    D.wait_idle()


# ---- command line and configuration --------------------------------------------------------

def test_help_lists_every_setting():
    out = subprocess.run([INFERD, "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "Usage: inferd" in out.stdout
    cfg = subprocess.run([INFERD, "--print-config"], capture_output=True, text=True)
    assert cfg.returncode == 0, cfg.stderr
    keys = json.loads(cfg.stdout)
    assert len(keys) >= 30
    for k in keys:
        name = k.replace("_", "-")
        assert "--" + name + " " in out.stdout or "--[no-]" + name in out.stdout, \
            "%s missing from --help" % name
    src = os.environ.get("INFERD_SOURCE_DIR")
    if src:  # docs/configuration.md documents every setting
        doc = open(os.path.join(src, "docs", "configuration.md")).read()
        missing = [k for k in keys if "`%s`" % k not in doc]
        assert not missing, "docs/configuration.md lacks %s" % missing
    v = subprocess.run([INFERD, "--version"], capture_output=True, text=True)
    assert v.stdout.startswith("inferd ")


def test_config_file_and_flags():
    d = tempfile.mkdtemp()
    good = os.path.join(d, "good.json")
    with open(good, "w") as f:
        json.dump({"max_queue": 7, "kv_budget": "64M", "header_timeout": "250ms",
                   "workers": 2, "prefix_cache": False, "gpus": []}, f)
    out = subprocess.run([INFERD, "--config", good, "--print-config", "--workers", "3"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    c = json.loads(out.stdout)
    assert c["max_queue"] == 7 and c["kv_budget"] == 64 << 20, c
    assert abs(c["header_timeout"] - 0.25) < 1e-9 and c["prefix_cache"] is False, c
    assert c["workers"] == 3, "flags must override the file"
    bad = os.path.join(d, "bad.json")
    for content, word in [({"max_queeu": 1}, "max_queeu"), ({"max_queue": "x"}, "max_queue"),
                          ({"workers": 1000}, "workers")]:
        with open(bad, "w") as f:
            json.dump(content, f)
        out = subprocess.run([INFERD, "--config", bad, "--print-config"],
                             capture_output=True, text=True)
        assert out.returncode == 2 and word in out.stderr, (content, out.stderr)
    out = subprocess.run([INFERD, "--no-such-flag"], capture_output=True, text=True)
    assert out.returncode == 2 and "--no-such-flag" in out.stderr
    for cap in ("bogus", "0", "-1", "2000000"):  # auto, off or 1..1048576
        out = subprocess.run([INFERD, "--model", model_path(), "--socket", os.path.join(d, "s"),
                              "--prefill-cap", cap], capture_output=True, text=True, timeout=30)
        assert out.returncode == 1 and "prefill_cap '%s'" % cap in out.stderr, out.stderr
    out = subprocess.run([INFERD, "--model", model_path(), "--socket", os.path.join(d, "s"),
                          "--kv-dtype", "q5_0"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 1 and "kv_dtype 'q5_0': expected" in out.stderr, out.stderr
    # q4_0 blocks are CPU only (the CUDA kernels read f16, bf16, q8_0 and fp8): refused
    # with GPUs before any device is touched
    out = subprocess.run([INFERD, "--model", model_path(), "--gpus", "0", "--kv-dtype", "q4_0"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 1 and "kv_dtype 'q4_0' is CPU only" in out.stderr, out.stderr
    out = subprocess.run([INFERD, "--model", model_path(), "--gpus", "0"], capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 1 and "CUDA" in out.stderr, out.stderr
    out = subprocess.run([INFERD, "--model", model_path(), "--socket", os.path.join(d, "s"),
                          "--listen", "0.0.0.0:%d" % free_port()],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 1 and "API key" in out.stderr, out.stderr


# ---- every endpoint with curl ----------------------------------------------------------------

def test_curl_health_models_metrics():
    code, body = D.curl("http://localhost/health", expect=200)
    h = json.loads(body)
    assert h["status"] == "ok" and h["workers"][0]["state"] == "ready", h
    code, body = D.curl("http://localhost/v1/models", expect=200)
    m = json.loads(body)
    assert m["object"] == "list" and m["data"][0]["id"] == "SmolLM2-135M-Instruct.Q4_1", m
    assert m["data"][0]["root"].endswith(".gguf") and m["data"][0]["max_model_len"] == 8192
    assert m["data"][0]["architecture"] == "llama" and m["data"][0]["format"] == "gguf", m
    code, body = D.curl("http://localhost/v1/models/SmolLM2-135M-Instruct.Q4_1", expect=200)
    assert json.loads(body) == m["data"][0], body
    code, body = D.curl("http://localhost/v1/models/SmolLM2-135M-Instruct%2EQ4_1", expect=200)
    code, body = D.curl("http://localhost/v1/models/gpt-9", expect=404)
    e = json.loads(body)["error"]
    assert e["code"] == "model_not_found" and e["param"] == "model" and "gpt-9" in e["message"], e
    D.curl("http://localhost/v1/models/a/b", expect=404)
    D.curl("http://localhost/v1/models/%ff%fe", expect=404)
    D.curl("http://localhost/v1/models/%zz", expect=404)
    for bad in ("x%", "x%4", "%00", "x" * 300):   # short escapes at the end, NUL, too long
        D.curl("http://localhost/v1/models/" + bad, expect=404)
    D.curl("http://localhost/health", expect=200)
    code, body = D.curl("http://localhost/v1/models/x", "-X", "DELETE", expect=405)
    code, body = D.curl("http://localhost/metrics", expect=200)
    text = body.decode()
    for name in ["inferd_http_requests_total", "inferd_queue_depth", "inferd_requests_running",
                 "inferd_prompt_tokens_total", "inferd_generation_tokens_total",
                 "inferd_time_to_first_token_seconds_bucket",
                 "inferd_inter_token_latency_seconds_bucket", 'inferd_kv_blocks{state="free"}',
                 'inferd_kv_blocks{state="used"}', 'inferd_kv_blocks{state="cached"}',
                 "inferd_prefix_cache_hit_ratio", "inferd_worker_restarts_total"]:
        assert name in text, name
    # SmolLM2 has no sliding-window layers: nothing a per-layer release could free
    assert "\ninferd_kv_local_releasable_blocks 0\n" in text
    assert "\ninferd_kv_local_releasable_bytes 0\n" in text
    after()


def test_curl_tokenize_detokenize():
    code, body = D.curl("http://localhost/tokenize", "-d",
                        json.dumps({"prompt": "Hello world", "add_special_tokens": False}),
                        expect=200)
    t = json.loads(body)
    assert t["count"] == len(t["tokens"]) >= 2 and t["max_model_len"] == 8192, t
    code, body = D.curl("http://localhost/detokenize", "-d", json.dumps({"tokens": t["tokens"]}),
                        expect=200)
    assert json.loads(body)["prompt"] == "Hello world"
    code, body = D.curl("http://localhost/tokenize", "-d", json.dumps(
        {"messages": [{"role": "user", "content": "Hi"}], "return_token_strs": True}),
        expect=200)
    t = json.loads(body)
    assert "<|im_start|>" in t["token_strs"] and len(t["token_strs"]) == t["count"], t
    code, body = D.curl("http://localhost/detokenize", "-d", json.dumps({"tokens": [10 ** 6]}),
                        expect=400)
    assert err_of(body)["param"] == "tokens[0]"
    after()


def test_curl_completions():
    req = {"prompt": "The capital of France is", "max_tokens": 6, "temperature": 0}
    code, body = D.curl("http://localhost/v1/completions", "-d", json.dumps(req), expect=200)
    r = json.loads(body)
    assert r["object"] == "text_completion" and r["choices"][0]["finish_reason"] == "length"
    assert r["usage"]["completion_tokens"] == 6 and r["usage"]["prompt_tokens"] >= 5, r
    assert "cached_tokens" in r["usage"]["prompt_tokens_details"]
    req["stream"] = True
    code, body = D.curl("-N", "http://localhost/v1/completions", "-d", json.dumps(req),
                        expect=200)
    ev = sse_events(body)
    assert ev[-1] == "[DONE]", ev
    text, fin = stream_text(ev)
    assert text[0] == r["choices"][0]["text"] and fin[0] == "length", (text, r)
    after()


def test_curl_chat_stream():
    req = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8,
           "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    code, body = D.curl("-N", "http://localhost/v1/chat/completions", "-H",
                        "Content-Type: application/json", "-d", json.dumps(req), expect=200)
    ev = sse_events(body)
    assert ev[-1] == "[DONE]"
    chunks = [json.loads(e) for e in ev[:-1]]
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] >= 1
    fins = [c["choices"][0]["finish_reason"] for c in chunks[:-1]]
    assert all(f is None for f in fins[:-1]) and fins[-1] in ("stop", "length"), fins
    assert all(c["usage"] is None for c in chunks[:-1])
    req["stream"] = False
    del req["stream_options"]
    code, body = D.curl("http://localhost/v1/chat/completions", "-d", json.dumps(req),
                        expect=200)
    r = json.loads(body)
    text, _ = stream_text(ev)
    assert r["choices"][0]["message"]["content"] == text[0], (r, text)
    after()


# ---- errors ------------------------------------------------------------------------------------

def test_bad_inputs():
    cases = [
        ("/v1/chat/completions", b"{not json", 400, None),
        ("/v1/chat/completions", {"messages": "hi"}, 400, "messages"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                  "temperature": "hot"}, 400, "temperature"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                  "max_tokens": -5}, 400, "max_tokens"),
        ("/v1/completions", {"prompt": "x", "n": 0}, 400, "n"),
        ("/v1/completions", {"prompt": "x", "stop": ["a", "b", "c", "d", "e"]}, 400, "stop"),
        ("/v1/completions", {"prompt": [1, 2, 99999999]}, 400, "prompt[2]"),
        ("/v1/completions", {"prompt": "x", "logit_bias": {"99999999": 1}}, 400, "logit_bias"),
        ("/v1/completions", {"model": "gpt-4", "prompt": "x"}, 404, "model"),
        ("/v1/completions", {"prompt": "x", "max_tokens": 100000}, 400, "max_tokens"),
    ]
    for path, body, status, param in cases:
        code, data = D.request("POST", path, body if isinstance(body, bytes) else body)
        assert code == status, (body, code, data)
        e = err_of(data)
        assert e["param"] == param, (body, e)
        if status == 404:
            assert e["code"] == "model_not_found"
    # over-long prompt: 400 context_length_exceeded, decided before any 200
    code, data = D.request("POST", "/v1/completions", {"prompt": "hello " * 9000,
                                                        "stream": True})
    assert code == 400 and err_of(data)["code"] == "context_length_exceeded", data[:300]
    code, data = D.request("POST", "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "hello " * 9000}]})
    e = err_of(data)
    assert code == 400 and e["code"] == "context_length_exceeded" and e["param"] == "messages"
    # unknown route, wrong method
    code, data = D.request("GET", "/v1/nothing")
    assert code == 404
    code, data = D.request("GET", "/v1/chat/completions")
    assert code == 405 and D.last_headers.get("Allow") == "POST", D.last_headers
    code, data = D.request("DELETE", "/health")
    assert code == 405
    after()


def test_body_too_large():
    path = os.path.join(D.dir, "big.json")
    with open(path, "wb") as f:
        f.write(b'{"prompt": "' + b"a" * (10 << 20) + b'"}')
    code, body = D.curl("http://localhost/v1/completions", "-H",
                        "Content-Type: application/json", "--data-binary", "@" + path,
                        expect=413)
    assert err_of(body)["type"] == "invalid_request_error"
    # without Content-Length (chunked): refused while it arrives
    code, body = D.curl("http://localhost/v1/completions", "-H", "Transfer-Encoding: chunked",
                        "--data-binary", "@" + path, expect=413)
    os.unlink(path)
    after()


def test_header_limit_and_malformed():
    big = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n"
    resp = D.raw(big)
    assert resp.startswith(b"HTTP/1.1 431"), resp[:100]
    resp = D.raw(b"BLAH\x00 / HTTP/9.9\r\n\r\n")
    assert resp.startswith(b"HTTP/1.1 400"), resp[:100]
    after()


def test_garbage_never_wedges():
    """Random bytes and mutated bodies (fixed seed): always an answer, never a crash."""
    import random
    rnd = random.Random(7)
    for i in range(30):
        junk = bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 400)))
        if i % 2:
            junk = b"POST /v1/completions HTTP/1.1\r\nContent-Length: 5\r\n" + junk
        resp = D.raw(junk, timeout=5)
        assert resp == b"" or resp.startswith(b"HTTP/1.1 "), resp[:100]
    body = json.dumps({"prompt": "Hi there", "max_tokens": 2, "temperature": 0.5,
                       "stop": ["x"], "n": 1, "logprobs": 1}).encode()
    for _ in range(60):
        b = bytearray(body)
        for _ in range(rnd.randrange(1, 4)):
            k = rnd.randrange(3)
            p = rnd.randrange(len(b))
            if k == 0:
                b[p] = rnd.choice(b'{}[]",:0123456789-.eEtrufalsn \\x')
            elif k == 1:
                del b[p]
            else:
                b.insert(p, rnd.randrange(256))
        code, data = D.request("POST", "/v1/completions", bytes(b))
        assert code in (200, 400, 404), (bytes(b), code, data[:200])
        if code != 200:
            err_of(data)
    D.curl("http://localhost/health", expect=200)
    after()


def test_slowloris():
    """Headers sent a byte at a time never complete: 408 after header_timeout, then close."""
    s = D.raw(b"", read=False, timeout=10)
    t0 = time.time()
    req = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n"
    got = b""
    for i in range(len(req)):
        try:
            s.sendall(req[i:i + 1])
        except OSError:
            break
        time.sleep(0.1)
        s.setblocking(False)
        try:
            got += s.recv(4096)
        except (BlockingIOError, OSError):
            pass
        s.setblocking(True)
        if got:
            break
    s.settimeout(5)
    try:
        while True:
            b = s.recv(4096)
            if not b:
                break
            got += b
    except OSError:
        pass
    s.close()
    assert got.startswith(b"HTTP/1.1 408"), got[:100]
    assert time.time() - t0 < 4, "the header timeout (1 s) was not enforced"
    # a body that stops half way
    got = D.raw(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"p",
                timeout=10)
    assert got.startswith(b"HTTP/1.1 408"), got[:100]
    after()


def test_keepalive_and_pipelining():
    one = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
    body = json.dumps({"prompt": "One two three", "max_tokens": 3, "temperature": 0}).encode()
    post = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body)) + body
    last = b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    resp = D.raw(one + post + one + last, timeout=30)
    assert resp.count(b"HTTP/1.1 200 OK") == 4, resp[:2000]
    i1 = resp.index(b'"status":"ok"')
    i2 = resp.index(b'"text_completion"')
    i3 = resp.index(b'"status":"ok"', i2)
    i4 = resp.index(b'"object":"list"')
    assert i1 < i2 < i3 < i4, "pipelined responses out of order"
    # keep-alive: two requests, one after the other, on one connection
    s = D.raw(b"", read=False)
    for _ in range(2):
        s.sendall(one)
        r = b""
        while b"\r\n\r\n" not in r:
            r += s.recv(65536)
        head, _, rest = r.partition(b"\r\n\r\n")
        n = int([ln.split(b":")[1] for ln in head.split(b"\r\n")
                 if ln.lower().startswith(b"content-length")][0])
        while len(rest) < n:
            rest += s.recv(65536)
        assert head.startswith(b"HTTP/1.1 200") and b"keep-alive" in head, head
        assert json.loads(rest)["status"] == "ok"
    s.close()
    # HTTP/1.0 closes after the response
    resp = D.raw(b"GET /health HTTP/1.0\r\n\r\n")
    assert resp.startswith(b"HTTP/1.1 200") and b"Connection: close" in resp
    after()


def test_tcp_api_key():
    base = "http://127.0.0.1:%d" % PORT

    def tcp(path, *extra):
        out = subprocess.run(["curl", "-sS", "-o", "-", "-w", "\n%{http_code}", base + path]
                             + list(extra), capture_output=True, timeout=60)
        body, _, code = out.stdout.rpartition(b"\n")
        return int(code), body
    code, body = tcp("/v1/models")
    assert code == 401 and err_of(body)["code"] == "invalid_api_key", body
    code, body = tcp("/v1/models", "-H", "Authorization: Bearer wrong")
    assert code == 401
    code, body = tcp("/v1/models", "-H", "Authorization: Bearer " + KEY)
    assert code == 200 and json.loads(body)["data"]
    code, body = tcp("/health")
    assert code == 200
    # /metrics is open, as vLLM's key guards only /v1 routes: Prometheus and the
    # Gateway API endpoint picker scrape it without one (deploy/kubernetes)
    code, body = tcp("/metrics")
    assert code == 200 and b"vllm:num_requests_waiting{" in body, (code, body[:200])
    code, body = tcp("/metrics", "-I")
    assert code == 200, (code, body)
    code, body = tcp("/v1/models")
    assert code == 401, (code, body)
    code, body = tcp("/tokenize", "-d", json.dumps({"prompt": "Hi"}))
    assert code == 401, (code, body)
    code, body = tcp("/v1/completions", "-H", "Authorization: Bearer " + KEY, "-d",
                     json.dumps({"prompt": "Hi", "max_tokens": 2}))
    assert code == 200, body
    # the Unix socket needs no key
    D.curl("http://localhost/v1/models", expect=200)
    after()


def test_max_connections():
    socks = []
    time.sleep(0.3)  # connections of earlier tests finish closing
    try:
        # the shared daemon allows 16; the 17th is answered 503 and closed
        for _ in range(16):
            socks.append(D.raw(b"", read=False))
        time.sleep(0.2)
        resp = D.raw(b"")  # answered 503 and closed at once: nothing to send
        assert resp.startswith(b"HTTP/1.1 503"), resp[:200]
    finally:
        for s in socks:
            s.close()
    time.sleep(0.2)
    D.curl("http://localhost/health", expect=200)
    after()


# ---- separate daemons ----------------------------------------------------------------------------

def test_queue_full_503():
    d = Daemon(INFERD, ["--max-seqs", "1", "--max-queue", "1"])
    try:
        # A runs (the only sequence slot), B waits (the only queue place), C is refused
        a = d.raw(b"", read=False, timeout=60)
        body = json.dumps({"prompt": "Count:", "max_tokens": 300, "ignore_eos": True,
                           "stream": True}).encode()
        a.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
                  % len(body) + body)
        assert a.recv(4096).startswith(b"HTTP/1.1 200")
        res = {}

        def b_req():
            res["b"] = d.request("POST", "/v1/completions", {"prompt": "B", "max_tokens": 2})
        tb = threading.Thread(target=b_req)
        tb.start()
        t0 = time.time()
        while d.metrics()["inferd_queue_depth"] < 1:
            assert time.time() - t0 < 10
            time.sleep(0.02)
        code, data = d.request("POST", "/v1/completions", {"prompt": "C", "max_tokens": 2},
                               headers={"X-Request-Id": "req-c"})
        assert code == 503 and d.last_headers.get("Retry-After") == "1", (code, data)
        assert d.last_headers.get("X-Request-Id") == "req-c"
        a.close()  # the client goes away: A is cancelled, B runs
        tb.join(60)
        assert res["b"][0] == 200, res
        m = d.wait_idle()
        assert m["inferd_queue_rejected_total"] == 1
        assert m['inferd_request_success_total{finish_reason="abort"}'] >= 1
    finally:
        assert d.stop() == 0


def test_stale_and_live_socket():
    tmp = tempfile.mkdtemp()
    path = os.path.join(tmp, "inferd.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.close()  # a socket file nobody listens on: stale
    d = Daemon(INFERD, tmpdir=tmp)
    try:
        assert d.sock == path
        d.curl("http://localhost/health", expect=200)
        out = subprocess.run([INFERD, "--model", model_path(), "--socket", path],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 1 and "another daemon" in out.stderr, out.stderr
        d.curl("http://localhost/health", expect=200)
        assert oct(os.stat(path).st_mode & 0o777) == "0o660"
    finally:
        assert d.stop() == 0
    assert not os.path.exists(path), "the socket file was left behind"


def test_sighup_reload_and_log_reopen():
    tmp = tempfile.mkdtemp()
    conf = os.path.join(tmp, "inferd.json")
    log = os.path.join(tmp, "daemon.log")
    with open(conf, "w") as f:
        json.dump({"max_queue": 5, "log_file": log}, f)
    d = Daemon(INFERD, ["--config", conf], tmpdir=tmp)
    try:
        with open(conf, "w") as f:
            json.dump({"max_queue": 9, "log_file": log, "workers": 1, "log_level": "debug",
                       "block_size": 32}, f)
        os.rename(log, log + ".1")
        d.proc.send_signal(signal.SIGHUP)
        t0 = time.time()
        while not os.path.exists(log) or "max_queue" not in open(log).read():
            assert time.time() - t0 < 10, "no reload logged"
            time.sleep(0.05)
        time.sleep(0.2)
        text = open(log).read()
        assert "'max_queue' changed" in text and "'log_level' changed" in text, text
        assert "'block_size' changed but needs a restart" in text, text
        # The worker's output is relayed through the daemon, so it follows the reopened
        # log, and the worker took the new level (a LOG_LEVEL frame).
        while "log level now debug" not in open(log).read():
            assert time.time() - t0 < 10, "the worker's level change is not in the new log"
            time.sleep(0.05)
        assert "started pid" in open(log + ".1").read()
        d.curl("http://localhost/health", expect=200)
    finally:
        assert d.stop() == 0


def main():
    global PORT
    PORT = free_port()
    return serve_and_run(globals(), INFERD,
                         ["--header-timeout", "1", "--body-timeout", "1", "--max-connections",
                          "16", "--listen", "127.0.0.1:%d" % PORT, "--api-key", KEY],
                         client=False)


if __name__ == "__main__":
    sys.exit(main())
