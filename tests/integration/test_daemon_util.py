"""Helpers for the inferd daemon integration tests (test_daemon_*.py).

Starts the real `inferd` on a temporary Unix socket with the default model,
talks to it with curl and raw sockets, reads /metrics and /health, and stops
it. Standard library only, so the plain-HTTP tests run without the venv.

A test file defines functions named test_*; run_tests() runs them in order
and prints the closing line "N passed, M failed" that CTest's log shows.
"""
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.dont_write_bytecode = True
import model_paths  # noqa: E402  (tests/model_paths.py)

SKIP = 77
# Deadlines (never waits) are multiplied by $INFERD_TEST_TIMEOUT_SCALE: test.sh sets 3 for
# the sanitized daemon and worker, which run several times slower.
SCALE = float(os.environ.get("INFERD_TEST_TIMEOUT_SCALE") or 1)
# $INFERD_TEST_SANITIZED: the ASan+UBSan build, where tests run their reduced sets.
SANITIZED = bool(os.environ.get("INFERD_TEST_SANITIZED"))


def model_path():
    return model_paths.model_path()


def skip(why):
    print("SKIPPED: " + why, flush=True)
    sys.exit(SKIP)


def require_model():
    if not os.path.isfile(model_path()):
        skip("default model not found at %s (run deploy/fetch-model.sh)" % model_path())


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout=60):
        super().__init__("localhost", timeout=timeout * SCALE)
        self.path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self.path)
        self.sock = s


class Daemon:
    """One inferd process on a temporary socket."""

    def __init__(self, inferd, args=(), env=None, workers=1, wait=True, tmpdir=None):
        self.own_dir = tmpdir is None  # removed by stop()
        self.dir = tmpdir or tempfile.mkdtemp(prefix="inferd-test-")
        self.sock = os.path.join(self.dir, "inferd.sock")
        self.logpath = os.path.join(self.dir, "inferd.log")
        self.inferd = inferd
        cmd = [inferd, "--model", model_path(), "--socket", self.sock,
               "--workers", str(workers), "--kv-budget", "256M"] + list(args)
        if os.environ.get("INFERD_TEST_KV_DTYPE"):  # the KV type's runs (test_daemon_crash_q8_0)
            cmd += ["--kv-dtype", os.environ["INFERD_TEST_KV_DTYPE"]]
        e = dict(os.environ)
        e.pop("NOTIFY_SOCKET", None)
        e.pop("LISTEN_FDS", None)
        if env:
            e.update(env)
        self.log = open(self.logpath, "ab")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=e)
        if wait:
            try:
                self.wait_ready()
            except BaseException:
                # never ready: no caller holds this object to stop it, so kill the
                # daemon here (its workers exit when their socket to it closes)
                self.kill_quietly()
                raise

    def kill_quietly(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.final_log = self.logtext()
        self.log.close()
        if self.own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    # ---- lifecycle -------------------------------------------------------------------------
    def wait_ready(self, timeout=60, status="ok"):
        t0 = time.time()
        timeout *= SCALE
        while time.time() - t0 < timeout:
            if self.proc.poll() is not None:
                raise AssertionError("inferd exited with %s:\n%s" % (self.proc.returncode,
                                                                      self.logtext()))
            try:
                code, body = self.request("GET", "/health")
                if json.loads(body).get("status") == status:
                    return json.loads(body)
            except (OSError, ValueError, http.client.HTTPException):
                pass
            time.sleep(0.05)
        raise AssertionError("inferd not %s after %ss:\n%s" % (status, timeout, self.logtext()))

    def stop(self, sig=signal.SIGTERM, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout * SCALE)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
            raise AssertionError("inferd did not exit after %s:\n%s" % (sig, self.logtext()))
        self.log.close()
        self.final_log = self.logtext()
        if self.own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)
        return rc

    def logtext(self, tail=6000):
        """The log's last `tail` characters (None: all of it, while the daemon runs)."""
        if getattr(self, "final_log", None) is not None:
            return self.final_log
        try:
            with open(self.logpath, "rb") as f:
                text = f.read().decode("utf-8", "replace")
                return text[-tail:] if tail else text
        except OSError:
            return ""

    # ---- HTTP -------------------------------------------------------------------------------
    def request(self, method, path, body=None, headers=None, timeout=120):
        c = UnixHTTPConnection(self.sock, timeout=timeout)
        try:
            h = {"Content-Type": "application/json"} if body is not None else {}
            h.update(headers or {})
            if isinstance(body, (dict, list)):
                body = json.dumps(body)
            c.request(method, path, body=body, headers=h)
            r = c.getresponse()
            data = r.read()
            self.last_headers = dict(r.getheaders())
            return r.status, data
        finally:
            c.close()

    def json(self, method, path, body=None, expect=200, headers=None):
        code, data = self.request(method, path, body, headers)
        assert code == expect, "%s %s: HTTP %d (wanted %d): %s" % (method, path, code, expect,
                                                                   data[:500])
        return json.loads(data)

    def curl(self, *args, expect=None):
        """curl --unix-socket; returns (http_code, body)."""
        cmd = ["curl", "-sS", "--unix-socket", self.sock, "-o", "-", "-w", "\n%{http_code}"]
        cmd += list(args)
        out = subprocess.run(cmd, capture_output=True, timeout=120 * SCALE)
        assert out.returncode == 0, "curl %s failed: %s" % (args, out.stderr)
        body, _, code = out.stdout.rpartition(b"\n")
        code = int(code)
        if expect is not None:
            assert code == expect, "curl %s: HTTP %d (wanted %d): %s" % (args, code, expect,
                                                                         body[:500])
        return code, body

    def metrics(self):
        code, data = self.request("GET", "/metrics")
        assert code == 200
        out = {}
        for line in data.decode().splitlines():
            if not line or line.startswith("#"):
                continue
            k, _, v = line.rpartition(" ")
            out[k] = float(v)
        return out

    def wait_metric(self, name, pred, timeout=10):
        """Poll /metrics until pred(sum of the series starting with name) holds; the
        worker's counters reach /metrics only with its next ping (worker_ping_interval),
        so a fixed sleep races a loaded machine. Returns the sum."""
        t0 = time.time()
        v = None
        while time.time() - t0 < timeout * SCALE:
            v = sum(x for k, x in self.metrics().items() if k.startswith(name))
            if pred(v):
                return v
            time.sleep(0.05)
        raise AssertionError("%s stayed at %s for %.0f s" % (name, v, timeout * SCALE))

    def wait_idle(self, timeout=20):
        """No block held, no sequence running (after every test)."""
        t0 = time.time()
        m = None
        while time.time() - t0 < timeout * SCALE:
            m = self.metrics()
            if (m['inferd_kv_blocks{state="used"}'] == 0 and m["inferd_sequences_running"] == 0
                    and m["inferd_queue_depth"] == 0):
                return m
            time.sleep(0.05)
        raise AssertionError("blocks still held: used=%s running=%s queue=%s" % (
            m['inferd_kv_blocks{state="used"}'], m["inferd_sequences_running"],
            m["inferd_queue_depth"]))

    def worker_pids(self):
        h = json.loads(self.request("GET", "/health")[1])
        return [w["pid"] for w in h["workers"]]

    def raw(self, data, read=True, timeout=10):
        """Sends raw bytes on a fresh connection; returns everything read until EOF."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        s.connect(self.sock)
        try:
            if data:
                s.sendall(data)
            if not read:
                return s
            buf = b""
            while True:
                try:
                    b = s.recv(65536)
                except socket.timeout:
                    break
                if not b:
                    break
                buf += b
            return buf
        finally:
            if read:
                s.close()


def sse_events(raw):
    """data: payloads of an SSE body (bytes) as a list of str."""
    out = []
    for block in re.split(r"\r?\n\r?\n", raw.decode("utf-8")):
        data = [ln[5:].lstrip(" ") for ln in block.splitlines() if ln.startswith("data:")]
        if data:
            out.append("\n".join(data))
    return out


def stream_text(events):
    """Concatenated content of a chat or completions SSE stream, and the finish reasons."""
    text, finish = {}, {}
    for e in events:
        if e == "[DONE]":
            continue
        o = json.loads(e)
        for c in o.get("choices", []):
            i = c["index"]
            if "delta" in c:
                text[i] = text.get(i, "") + (c["delta"].get("content") or "")
            else:
                text[i] = text.get(i, "") + (c.get("text") or "")
            if c.get("finish_reason"):
                finish[i] = c["finish_reason"]
    return text, finish


def openai_client(sock, timeout=120, max_retries=0, max_connections=100):
    """The official openai client over an httpx Unix-socket transport (venv only)."""
    import httpx
    import openai
    http = httpx.Client(transport=httpx.HTTPTransport(uds=sock), timeout=timeout * SCALE,
                        limits=httpx.Limits(max_connections=max_connections))
    return openai.OpenAI(base_url="http://localhost/v1", api_key="unused", http_client=http,
                         max_retries=max_retries)


def serve_and_run(namespace, inferd, args=(), client=True, tmpdir=None, names=None):
    """main() of a test file driving one daemon: starts it with `args` (in tmpdir, which
    the caller made and removes, when given), sets the file's globals D (the Daemon) and,
    with client, C (openai_client), runs its test_* functions (those in names when given),
    stops the daemon (a nonzero exit fails) and prints its log when something failed.
    Returns the exit status for sys.exit."""
    require_model()
    d = Daemon(inferd, args=args, tmpdir=tmpdir)
    namespace["D"] = d
    if client:
        namespace["C"] = openai_client(d.sock, timeout=300)
    try:
        rc = run_tests(namespace, names)
    finally:
        code = d.stop()
        if code != 0:
            print("inferd exited with %d" % code)
            rc = 1
    if rc:
        print("---- daemon log ----\n" + d.logtext())
    return rc


def run_tests(namespace, names=None):
    tests = [(n, f) for n, f in namespace.items() if n.startswith("test_") and callable(f)]
    names = names or [n for n in os.environ.get("INFERD_TEST_ONLY", "").split(",") if n]
    if names:
        tests = [(n, f) for n, f in tests if n in names]
    passed = failed = 0
    for name, fn in tests:
        t0 = time.time()
        try:
            fn()
            passed += 1
            print("ok   %-40s %.1fs" % (name, time.time() - t0), flush=True)
        except Exception:
            failed += 1
            print("FAIL %-40s %.1fs" % (name, time.time() - t0), flush=True)
            traceback.print_exc()
            sys.stdout.flush()
    print("%d passed, %d failed" % (passed, failed), flush=True)
    return 1 if failed else 0
