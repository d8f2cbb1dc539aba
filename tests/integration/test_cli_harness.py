"""test_cli_harness.py — shared pieces of the `infer` CLI tests (not a test itself).

- run(): runs infer with a timeout and returns (rc, stdout, stderr).
- Daemon: starts the real `inferd --model M --socket S --workers 1` on a temporary
  socket, waits for /health, and stops it; raises Skip when the binary cannot serve yet
  (its --help lacks --socket, or /health never comes up within 60 s).
- FakeInferd: a small OpenAI-compatible server on a Unix socket (Python stdlib only)
  that behaves like inferd's API, for the unit-level CLI test.
- Pty: drives a command through a pseudo-terminal (the chat REPL, Ctrl-C).
- http(): one request over a Unix socket, for checks of the daemon's own view.

Only the standard library is used, so the tests run with any python3.
"""
import json
import os
import pty
import re
import select
import shutil
import signal
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.dont_write_bytecode = True
import model_paths  # noqa: E402  (tests/model_paths.py)

SKIP = 77


def _text(content):
    """A message content's text: a string, or its text parts joined (image parts skipped)."""
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if p.get("type") == "text")
    return content


class Skip(Exception):
    pass


class Fail(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Fail(msg)


def main(fn):
    """Runs fn() and maps its outcome to the exit status CTest expects."""
    try:
        fn()
    except Skip as e:
        print(f"SKIPPED: {e}", file=sys.stderr)
        sys.exit(SKIP)
    except Fail as e:
        print(f"FAIL: {e}", file=sys.stderr)
        sys.exit(1)
    print("ok")


def run(argv, input=None, env=None, timeout=120):
    e = dict(os.environ)
    e.pop("INFERD_SOCKET", None)
    e.pop("INFERD_API_KEY", None)
    if env:
        e.update(env)
    p = subprocess.run(argv, input=input, capture_output=True, env=e, timeout=timeout)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def http(sock_path, method, path, body=None, timeout=30):
    """One HTTP/1.1 request over a Unix socket: (status, headers dict, body bytes)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(sock_path)
    data = b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    req = f"{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
    if body is not None:
        req += f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
    s.sendall(req.encode() + b"\r\n" + data)
    buf = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        buf += chunk
    s.close()
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for ln in lines[1:]:
        k, _, v = ln.partition(":")
        headers[k.strip().lower()] = v.strip()
    if headers.get("transfer-encoding", "").lower() == "chunked":
        out = b""
        while rest:
            size_line, _, rest = rest.partition(b"\r\n")
            n = int(size_line.split(b";")[0], 16)
            if n == 0:
                break
            out += rest[:n]
            rest = rest[n + 2:]
        rest = out
    return status, headers, rest


def metrics(sock_path):
    """GET /metrics as {name or name{labels}: value}."""
    st, _, body = http(sock_path, "GET", "/metrics")
    check(st == 200, f"/metrics answered {st}")
    out = {}
    for ln in body.decode().splitlines():
        if not ln or ln.startswith("#"):
            continue
        k, _, v = ln.rpartition(" ")
        try:
            out[k] = float(v)
        except ValueError:
            pass
    return out


def default_model():
    return model_paths.model_path()


class Daemon:
    """The real inferd on a temporary socket. Use as a context manager."""

    def __init__(self, inferd, model=None, extra=(), startup_s=60):
        self.inferd = inferd
        self.model = model or default_model()
        self.extra = list(extra)
        self.startup_s = startup_s
        self.proc = None
        self.dir = None
        self.sock = None
        self.log = None

    def __enter__(self):
        if not os.path.isfile(self.model):
            raise Skip(f"default model not found at {self.model} (run deploy/fetch-model.sh)")
        try:
            h = subprocess.run([self.inferd, "--help"], capture_output=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise Skip(f"inferd not available ({e})")
        if b"--socket" not in h.stdout + h.stderr:
            raise Skip("inferd not available (its --help has no --socket: serving not built yet)")
        self.dir = tempfile.mkdtemp(prefix="infer-cli-")
        self.sock = os.path.join(self.dir, "inferd.sock")
        self.log = open(os.path.join(self.dir, "inferd.log"), "w+")
        env = dict(os.environ)
        env["XDG_RUNTIME_DIR"] = self.dir
        self.proc = subprocess.Popen(
            [self.inferd, "--model", self.model, "--socket", self.sock, "--workers", "1"]
            + self.extra, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        deadline = time.time() + self.startup_s
        while time.time() < deadline:
            if self.proc.poll() is not None:
                self.log.seek(0)
                tail = self.log.read()[-2000:]
                self._cleanup()
                raise Skip(f"inferd not available (it exited with {self.proc.returncode}: "
                           f"{tail.strip()[-400:]})")
            if os.path.exists(self.sock):
                try:
                    st, _, _ = http(self.sock, "GET", "/health", timeout=5)
                    if st == 200:
                        return self
                except OSError:
                    pass
            time.sleep(0.2)
        self.stop()
        raise Skip(f"inferd not available (/health did not answer 200 within {self.startup_s} s)")

    def log_tail(self, n=3000):
        if not self.log:
            return ""
        self.log.flush()
        self.log.seek(0)
        return self.log.read()[-n:]

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._cleanup()

    def _cleanup(self):
        if self.log:
            self.log.close()
            self.log = None
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def __exit__(self, *exc):
        if exc[0] is not None and self.log:
            print("---- inferd log (tail) ----\n" + self.log_tail(), file=sys.stderr)
        self.stop()
        return False

    def wait_idle(self, timeout=30):
        """Waits until the daemon holds no KV blocks for sequences and runs nothing."""
        deadline = time.time() + timeout
        m = {}
        while time.time() < deadline:
            m = metrics(self.sock)
            used = m.get('inferd_kv_blocks{state="used"}', 0)
            running = m.get("inferd_requests_running", 0)
            if used == 0 and running == 0:
                return m
            time.sleep(0.2)
        used_key = 'inferd_kv_blocks{state="used"}'
        raise Fail(f"daemon not idle after {timeout} s: used blocks {m.get(used_key)}, "
                   f"running {m.get('inferd_requests_running')}")


class Pty:
    """A command on a pseudo-terminal (its controlling terminal: Ctrl-C works)."""

    def __init__(self, argv, env=None):
        e = dict(os.environ)
        e.pop("INFERD_SOCKET", None)
        e["TERM"] = "dumb"
        e["HOME"] = tempfile.gettempdir()  # no ~/.editrc surprises
        if env:
            e.update(env)
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            try:
                os.execve(argv[0], argv, e)
            finally:
                os._exit(127)
        self.buf = b""

    def read_until(self, pattern, timeout=60):
        """Reads until the regex (bytes) matches the output since the last match."""
        rx = re.compile(pattern, re.S)
        deadline = time.time() + timeout
        while True:
            m = rx.search(self.buf)
            if m:
                out = self.buf[:m.end()]
                self.buf = self.buf[m.end():]
                return out
            left = deadline - time.time()
            if left <= 0:
                raise Fail(f"timed out waiting for {pattern!r}; got {self.buf[-600:]!r}")
            r, _, _ = select.select([self.fd], [], [], min(left, 0.5))
            if r:
                try:
                    data = os.read(self.fd, 65536)
                except OSError:
                    data = b""
                if not data:
                    raise Fail(f"EOF waiting for {pattern!r}; got {self.buf[-600:]!r}")
                self.buf += data

    def write(self, data):
        os.write(self.fd, data)

    def wait(self, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            # keep draining so the child never blocks on a full pty
            r, _, _ = select.select([self.fd], [], [], 0.1)
            if r:
                try:
                    d = os.read(self.fd, 65536)
                    self.buf += d
                except OSError:
                    pass
            pid, st = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                os.close(self.fd)
                return os.waitstatus_to_exitcode(st)
        os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)
        os.close(self.fd)
        raise Fail("the command on the pty did not exit")


# ---------------------------------------------------------------------------------------------
# FakeInferd: inferd's API shapes, canned behaviour.

FAKE_MODEL = "fake-model"


def _tok_id(word):
    return 10 + (sum(word.encode()) * 31) % 990


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def _send(self, status, obj, extra=None):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status, message, param=None, extra=None):
        self._send(status, {"error": {"message": message, "type": "invalid_request_error",
                                      "param": param, "code": None}}, extra)

    def _chunk(self, data):
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def do_GET(self):
        srv = self.server.fake
        if self.path == "/v1/models":
            self._send(200, {"object": "list", "data": [
                {"id": FAKE_MODEL, "object": "model", "created": 0, "owned_by": "inferd",
                 "root": "/models/fake.gguf", "max_model_len": 2048}]})
        elif self.path == "/health":
            self._send(200, {"status": "ok", "workers": [
                {"slot": 0, "state": "ready", "pid": 4242, "device": "cpu", "running": 0,
                 "waiting": 0, "kv_blocks_in_use": 0, "crashes": 0}]})
        elif self.path == "/metrics":
            with srv.lock:
                c = dict(srv.counters)
            text = (
                '# HELP inferd_info x\n# TYPE inferd_info gauge\n'
                f'inferd_info{{version="9.9.9",model="{FAKE_MODEL}"}} 1\n'
                f'inferd_uptime_seconds {time.time() - srv.started:.3f}\n'
                f'inferd_prompt_tokens_total {c["in"]}\n'
                f'inferd_generation_tokens_total {c["out"]}\n'
                f'inferd_prefix_cache_queries_total {c["in"]}\n'
                f'inferd_prefix_cache_hits_total {c["in"] // 4}\n'
                'inferd_requests_running 0\ninferd_queue_depth 0\n'
                'inferd_kv_blocks_total 1024\n'
                'inferd_kv_blocks{state="free"} 1000\ninferd_kv_blocks{state="used"} 4\n'
                'inferd_kv_blocks{state="cached"} 20\n'
                f'inferd_request_success_total{{finish_reason="stop"}} {c["done"]}\n'
                'inferd_request_success_total{finish_reason="length"} 0\n'
                f'inferd_request_success_total{{finish_reason="abort"}} {c["abort"]}\n'
                'inferd_request_success_total{finish_reason="error"} 0\n'
                'inferd_workers{state="ready"} 1\n'
                'inferd_time_to_first_token_seconds_sum 1.5\n'
                'inferd_time_to_first_token_seconds_count 10\n')
            data = text.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        else:
            self._error(404, f"no route {self.path}")

    def do_POST(self):
        srv = self.server.fake
        n = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(n)
        try:
            body = json.loads(raw)
        except ValueError:
            return self._error(400, "invalid JSON")
        with srv.lock:
            srv.requests.append((self.path, body, dict(self.headers)))
        if self.path == "/tokenize":
            words = body.get("prompt", "").split()
            return self._send(200, {"count": len(words), "max_model_len": 2048,
                                    "tokens": [_tok_id(w) for w in words], "token_strs": None})
        if self.path not in ("/v1/chat/completions", "/v1/completions"):
            return self._error(404, f"no route {self.path}")
        if srv.api_key and self.headers.get("Authorization") != f"Bearer {srv.api_key}":
            return self._error(401, "invalid API key")
        chat = self.path == "/v1/chat/completions"
        model = body.get("model")
        if model is not None and model != FAKE_MODEL:
            return self._error(404, f"The model `{model}` does not exist.", "model")
        if chat:
            text = "\n".join(_text(m.get("content", "")) for m in body.get("messages", []))
            prompt_tokens = len(text.split()) + 3 * len(body.get("messages", []))
            # the cue words act in the newest message only: a history that holds "SLOW"
            # must not make every later turn slow (it cost test_cli_fake 40 s)
            msgs = body.get("messages") or [{}]
            cue = _text(msgs[-1].get("content", "")) or ""
        else:
            p = body.get("prompt", "")
            text = p if isinstance(p, str) else ""
            cue = text
            prompt_tokens = len(p) if isinstance(p, list) else len(p.split())
        if "BUSY" in cue:
            return self._error(503, "the queue is full", extra={"Retry-After": "7"})
        mt = body.get("max_completion_tokens", body.get("max_tokens"))
        if mt is not None and (not isinstance(mt, int) or mt < 1):
            return self._error(400, "max_tokens must be at least 1", "max_tokens")
        if mt is not None and mt > 2048:
            return self._error(400, "This model's maximum context length is 2048 tokens.",
                               "max_tokens")
        slow = "SLOW" in cue
        n_out = mt if mt is not None else 8
        if slow:
            n_out = mt if mt is not None else 200
        elif not body.get("ignore_eos"):
            n_out = min(n_out, 8)
        finish = "length" if (mt is not None and n_out == mt) else "stop"
        toks = [f"tok{i} " for i in range(n_out)]
        if "ECHO" in cue:
            toks = [f"[{w}]" for w in text.split()]
            n_out = len(toks)
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{len(srv.requests):032x}"
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": n_out,
                 "total_tokens": prompt_tokens + n_out,
                 "prompt_tokens_details": {"cached_tokens": 0}}
        obj = "chat.completion" if chat else "text_completion"
        if not body.get("stream"):
            with srv.lock:
                srv.counters["in"] += prompt_tokens
                srv.counters["out"] += n_out
                srv.counters["done"] += 1
            ch = ({"index": 0, "message": {"role": "assistant", "content": "".join(toks)},
                   "finish_reason": finish, "logprobs": None} if chat else
                  {"index": 0, "text": "".join(toks), "finish_reason": finish, "logprobs": None})
            return self._send(200, {"id": rid, "object": obj, "created": 1, "model": FAKE_MODEL,
                                    "choices": [ch], "usage": usage})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        incl = (body.get("stream_options") or {}).get("include_usage")
        base = {"id": rid, "object": obj + ".chunk" if chat else obj, "created": 1,
                "model": FAKE_MODEL}

        def ev(d):
            self._chunk(b"data: " + json.dumps(d).encode() + b"\n\n")

        sent = 0
        try:
            self._chunk(b": ping\n\n")
            if chat:
                ev({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                         "finish_reason": None}], "usage": None})
            for i, t in enumerate(toks):
                if slow:
                    time.sleep(0.1)
                last = i == len(toks) - 1
                if "ERRSTREAM" in cue and i == 2:
                    ev({"error": {"message": "worker crashed", "type": "server_error",
                                  "param": None, "code": None}})
                    self._chunk(b"data: [DONE]\n\n")
                    self._chunk(b"")
                    return
                fin = finish if last else None
                c = ({"index": 0, "delta": {"content": t}, "finish_reason": fin} if chat
                     else {"index": 0, "text": t, "finish_reason": fin})
                ev({**base, "choices": [c], "usage": None})
                sent += 1
            with srv.lock:  # counted before the client can see the end
                srv.counters["in"] += prompt_tokens
                srv.counters["out"] += n_out
                srv.counters["done"] += 1
            if incl:
                ev({**base, "choices": [], "usage": usage})
            self._chunk(b"data: [DONE]\n\n")
            self._chunk(b"")
        except (BrokenPipeError, ConnectionResetError):
            with srv.lock:
                srv.counters["abort"] += 1
                srv.disconnects.append((rid, sent))
            self.close_connection = True


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    allow_reuse_address = True


class _TcpServer(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True


class FakeInferd:
    """Context manager: a fake inferd on a temporary Unix socket (self.sock), or on
    127.0.0.1 (self.url) with tcp=True."""

    def __init__(self, api_key=None, tcp=False):
        self.dir = tempfile.mkdtemp(prefix="infer-fake-")
        self.sock = os.path.join(self.dir, "inferd.sock")
        self.requests = []
        self.disconnects = []
        self.counters = {"in": 0, "out": 0, "done": 0, "abort": 0}
        self.lock = threading.Lock()
        self.started = time.time()
        self.api_key = api_key
        if tcp:
            self.srv = _TcpServer(("127.0.0.1", 0), _Handler)
            self.url = f"http://127.0.0.1:{self.srv.server_address[1]}"
        else:
            self.srv = _Server(self.sock, _Handler)
        self.srv.fake = self
        self.thread = threading.Thread(target=self.srv.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.srv.shutdown()
        self.srv.server_close()
        shutil.rmtree(self.dir, ignore_errors=True)
        return False

    def last(self, path=None):
        with self.lock:
            for p, b, h in reversed(self.requests):
                if path is None or p == path:
                    return b
        return None
