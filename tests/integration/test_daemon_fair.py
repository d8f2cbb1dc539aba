"""Fairness between clients (issue 31, row 10; label model): one client's flood
does not keep another client waiting — neither `n: 64` in one stream nor 64
streams it never reads (docs/reliability.md, "Clients").

Two clients are two uids on the Unix socket (SO_PEERCRED, which the daemon
reads at accept): the test runs as root, and the second client's connections
are opened by a forked child that drops to uid 65534 (nobody) before
connect() and hands the connected sockets back over SCM_RIGHTS — the kernel
keeps the credentials of connect(), so the daemon sees uid 65534 on them.
Not root: skipped, loudly.

The daemon runs one worker with max_seqs 8 and a small KV pool (40 blocks of
16 tokens, 24 in the sanitized build: the flood's eight sequences outgrow it
and are preempted). The flood fills the worker and leaves 56 sequences
queued in the router (with n: 64 the test also waits for the first
preemption: the pool is full). Then the second client sends a short request,
which must complete within 20 s, and a streaming canary (100 tokens, 40
sanitized), whose first token must come within 20 s and whose tokens must
never be more than 2 s apart (every deadline times
$INFERD_TEST_TIMEOUT_SCALE). Before the fix both waited behind the whole
flood (the router's one FIFO queue), and a stream admitted after the flood
was the first preempted whenever the pool ran out (the most recently
admitted).

Usage: test_daemon_fair.py INFERD WORKER   (standard library only)
"""
import http.client
import json
import os
import shutil
import socket
import sys
import tempfile
import threading
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_daemon_util import (SANITIZED, SCALE, UnixHTTPConnection,  # noqa: E402
                              serve_and_run, skip)

INFERD = sys.argv[1] if len(sys.argv) > 1 else "inferd"  # its worker binary is found beside it
D = None

OTHER_UID = 65534  # nobody: the second client
MAX_SEQS = 8
FLOOD = 64          # the first client's sequences
FLOOD_TOKENS = 300  # each: far more than the test lasts (within the pool: max_model_len)
# f16 KV of the default model: 30 layers x 3 heads x 64 x 2 (K, V) x 2 bytes a token
BLOCK_BYTES = 30 * 3 * 64 * 2 * 2 * 16
# The sanitized build's reduced set: a pool the flood outgrows sooner, a shorter canary
POOL_BLOCKS = 24 if SANITIZED else 40
CANARY_TOKENS = 40 if SANITIZED else 100
SHORT_WITHIN = 20.0  # s: the second client's short request is answered
FIRST_WITHIN = 20.0  # s: the canary's first token
MAX_GAP = 2.0        # s: the largest gap between two of the canary's tokens


# ---- connections as another uid ----------------------------------------------------------------

def connect_as(path, uid, n):
    """n connections to the Unix socket at path, made by a child running as uid."""
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    pid = os.fork()
    if pid == 0:  # the child: drop to uid, connect, pass the fds back, exit at once
        code = 1
        try:
            a.close()
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            socks = []
            for _ in range(n):
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect(path)
                socks.append(s)
            socket.send_fds(b, [b"ok"], [s.fileno() for s in socks])
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    b.close()
    try:
        _, fds, _, _ = socket.recv_fds(a, 16, n)
    finally:
        a.close()
        _, status = os.waitpid(pid, 0)
    assert status == 0 and len(fds) == n, ("the uid %d child failed" % uid, status, fds)
    return [socket.socket(fileno=fd) for fd in fds]


class SockHTTPConnection(http.client.HTTPConnection):
    """HTTP over a socket that is already connected (http.client connects only when
    it has none)."""

    def __init__(self, sock, timeout):
        super().__init__("localhost", timeout=timeout)
        sock.settimeout(timeout)
        self.sock = sock


def post(conn, path, body):
    conn.request("POST", path, body=json.dumps(body),
                 headers={"Content-Type": "application/json"})
    return conn.getresponse()


# ---- the second client's requests ------------------------------------------------------------

class Short(threading.Thread):
    """A short non-streaming request: how long until it is answered."""

    def __init__(self, sock):
        super().__init__(daemon=True)
        self.sock, self.secs, self.error = sock, None, None

    def run(self):
        t0 = time.time()
        try:
            c = SockHTTPConnection(self.sock, timeout=(SHORT_WITHIN + 10) * SCALE)
            r = post(c, "/v1/completions", {"prompt": "The capital of France is",
                                            "max_tokens": 8, "temperature": 0})
            data = r.read()
            assert r.status == 200, (r.status, data[:300])
            assert json.loads(data)["choices"][0]["text"], data[:300]
            self.secs = time.time() - t0
        except Exception as e:  # reported by the test
            self.error = "%s: %s" % (type(e).__name__, e)


class Canary(threading.Thread):
    """A streaming request: the arrival time of each of its tokens."""

    def __init__(self, sock, max_tokens=CANARY_TOKENS):
        super().__init__(daemon=True)
        self.sock, self.max_tokens = sock, max_tokens
        self.t0, self.stamps, self.finish, self.error = None, [], None, None

    def run(self):
        self.t0 = time.time()
        try:
            c = SockHTTPConnection(self.sock, timeout=(FIRST_WITHIN + 10) * SCALE)
            r = post(c, "/v1/completions", {"prompt": "Once upon a time", "stream": True,
                                            "max_tokens": self.max_tokens, "temperature": 0,
                                            "ignore_eos": True})
            assert r.status == 200, r.status
            while True:
                line = r.readline()
                if not line:
                    break
                if not line.startswith(b"data:") or line[5:].strip() == b"[DONE]":
                    continue
                for ch in json.loads(line[5:])["choices"]:
                    if ch.get("text"):
                        self.stamps.append(time.time())
                    if ch.get("finish_reason"):
                        self.finish = ch["finish_reason"]
        except Exception as e:
            self.error = "%s: %s" % (type(e).__name__, e)

    def check(self):
        assert not self.error, "the canary failed: %s" % self.error
        assert self.stamps, "the canary got no token"
        first = self.stamps[0] - self.t0
        gaps = [b - a for a, b in zip(self.stamps, self.stamps[1:])]
        worst = max(gaps) if gaps else 0.0
        print("  canary: first token after %.2f s, %d chunks, largest gap %.3f s" %
              (first, len(self.stamps), worst))
        assert first < FIRST_WITHIN * SCALE, "the canary's first token took %.1f s" % first
        assert worst < MAX_GAP * SCALE, "the canary waited %.2f s between two tokens" % worst
        assert self.finish == "length", self.finish


# ---- the flood ---------------------------------------------------------------------------------

def wait_flooded(preempted_after=None):
    """The worker is full and the router holds the rest of the flood (and, with
    preempted_after, the worker has preempted since that count: the pool is full)."""
    t0 = time.time()
    m = None
    while time.time() - t0 < 120 * SCALE:
        m = D.metrics()
        if (m["inferd_sequences_running"] >= MAX_SEQS and m["inferd_queue_depth"] > 0 and
                (preempted_after is None or m["inferd_preemptions_total"] > preempted_after)):
            return m
        time.sleep(0.05)
    raise AssertionError("the flood never filled the worker: running %s, queued %s, "
                         "preemptions %s" % (m["inferd_sequences_running"],
                                             m["inferd_queue_depth"],
                                             m["inferd_preemptions_total"]))


def full_log():
    with open(D.logpath, "rb") as f:
        return f.read().decode("utf-8", "replace")


def second_client_served():
    """The second client's short request and canary, while the flood runs."""
    canary_sock, short_sock = connect_as(D.sock, OTHER_UID, 2)
    canary, short = Canary(canary_sock), Short(short_sock)
    canary.start()
    short.start()
    short.join((SHORT_WITHIN + 15) * SCALE)
    assert not short.error, "the short request failed: %s" % short.error
    assert short.secs is not None and short.secs < SHORT_WITHIN * SCALE, \
        "the other client's short request was not answered within %.0f s (%s)" % (
            SHORT_WITHIN * SCALE, short.secs)
    print("  short request answered in %.2f s" % short.secs)
    assert "200 (uid %d pid" % OTHER_UID in full_log(), "the daemon did not see uid %d" % OTHER_UID
    canary.join((FIRST_WITHIN + 60) * SCALE)
    assert not canary.is_alive(), "the canary did not finish"
    canary.check()
    canary_sock.close()
    short_sock.close()


def drain(conn):
    try:
        r = conn.getresponse()
        while r.read1(65536):
            pass
    except Exception:  # noqa: BLE001 (closed by the test, whatever http.client makes of it)
        pass


def test_n64_does_not_starve_another_client():
    """n: 64 from one client (uid 0, read as it comes) against a short request and a
    canary stream of another (uid 65534), once the flood's sequences fill the pool."""
    before = D.wait_idle()["inferd_preemptions_total"]
    flood = UnixHTTPConnection(D.sock, timeout=300)
    flood.request("POST", "/v1/completions",
                  body=json.dumps({"prompt": "Write a long story about a dragon.", "n": FLOOD,
                                   "stream": True, "max_tokens": FLOOD_TOKENS,
                                   "ignore_eos": True}),
                  headers={"Content-Type": "application/json"})
    reader = threading.Thread(target=drain, args=(flood,), daemon=True)
    reader.start()
    try:
        wait_flooded(preempted_after=before)
        second_client_served()
    finally:
        flood.sock.shutdown(socket.SHUT_RDWR)
        flood.close()
        reader.join(10)
    D.wait_idle(timeout=60)


def test_never_read_streams_do_not_starve_another_client():
    """64 streams one client (uid 0) sends and never reads, against the other's."""
    D.wait_idle()
    socks = []
    body = json.dumps({"prompt": "Tell me about the sea.", "stream": True,
                       "max_tokens": FLOOD_TOKENS, "ignore_eos": True}).encode()
    try:
        for _ in range(FLOOD):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(D.sock)
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                      b"application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            socks.append(s)  # never read
        wait_flooded()
        second_client_served()
    finally:
        for s in socks:
            s.close()
    D.wait_idle(timeout=60)


def main():
    if os.geteuid() != 0:
        skip("test_daemon_fair needs root: the second client is a child that drops to uid %d "
             "before it connects (SO_PEERCRED tells the clients apart)" % OTHER_UID)
    tmp = tempfile.mkdtemp(prefix="inferd-fair-")
    os.chmod(tmp, 0o755)  # uid 65534 reaches the socket in it
    try:
        return serve_and_run(globals(), INFERD,
                             ["--max-seqs", str(MAX_SEQS), "--socket-mode", "0666",
                              "--kv-budget", str(POOL_BLOCKS * BLOCK_BYTES), "--max-queue", "1024",
                              "--worker-ping-interval", "0.2"],
                             client=False, tmpdir=tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
