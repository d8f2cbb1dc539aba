"""Image URLs fetched by the daemon (issue 28, --allow-image-urls; docs/security.md), on the
tiny random-weight Gemma 3 vision model of tests/data/tiny-gemma3-vision. A local http.server
on 127.0.0.1 (a port of its own) serves the committed PNG and the failure cases; the daemon
allows 127.0.0.1 and localhost, image_url_timeout 3 s, max_image_bytes 64K:

- the PNG by URL gives the same greedy answer (tokens and usage) as the same PNG as a data URL,
  and reuses its cached prefix (the same pixels, the same image hash);
- a host not listed, a URL with userinfo: 400 naming messages[0].content[1] before any fetch
  (the server sees no request);
- localhost (listed, but a name resolving to loopback): the SSRF guard's 400, no request;
- a 404, a body that is not an image, a Content-Length over max_image_bytes, a body over it
  without Content-Length: 400 each;
- redirects (image_url_max_redirects, 3 by default): a relative and an absolute Location and a
  chain of 3 give the image (the same answer); a chain of 4, a loop, a Location to a host not
  listed (127.0.0.2), to a listed name resolving to loopback (localhost: the SSRF guard on the
  hop's address), to ftp://, a 302 without Location, a redirect whose body and the image's
  together pass max_image_bytes, a redirect to a server that never answers (one timeout for the
  chain): 400 each naming the reason, the refused hop never fetched; a daemon started with
  --image-url-max-redirects 0 refuses the first redirect (its target never fetched);
- https to a server with a self-signed certificate: 400 (certificates are verified);
- a server that never answers: 400 within the timeout (3 s, well under 10); two such URLs in
  one request: 400 within one timeout (the budget is the request's);
- a client that disconnects while the fetch waits: the fetch is aborted (the server sees its
  connection closed long before the timeout);
- with allow_image_urls unset, a second daemon answers today's 400 (nothing fetched).
Plain HTTP over the Unix socket (no openai package needed); a few seconds in all.

Usage: test_daemon_imgurl.py INFERD   (run by the venv's python: $INFERD_PYTHON)
"""
import base64
import http.server
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_daemon_util import Daemon, run_tests  # noqa: E402

INFERD = sys.argv[1] if len(sys.argv) > 1 else "inferd"
TINY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data",
                    "tiny-gemma3-vision")
with open(os.path.join(TINY, "image0.png"), "rb") as _f:
    PNG = _f.read()
TIMEOUT = 3.0
MAX_BYTES = 64 * 1024
D = None
SRV = None
HITS = []            # paths the server was asked for
CLOSED = {}          # path -> time the client (the daemon) closed a /hang connection


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def send(self, code, body, ctype="image/png", length=True, extra=()):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        if length:
            self.send_header("Content-Length", str(len(body)))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def hang(self):
        """Answers nothing; records when the peer closes (up to 10 s)."""
        self.connection.settimeout(0.05)
        t_end = time.time() + 10
        while time.time() < t_end:
            try:
                if self.connection.recv(1) == b"":
                    CLOSED[self.path] = time.time()
                    return
            except socket.timeout:
                continue
            except OSError:
                CLOSED[self.path] = time.time()
                return

    def redirect(self, location, code=302, body=b""):
        extra = [("Location", location)] if location is not None else []
        self.send(code, body, "text/html", extra=extra)

    def do_GET(self):
        HITS.append(self.path)
        port = self.server.server_address[1]
        if self.path.startswith("/chain/"):  # /chain/N redirects N times, then the PNG
            k = int(self.path.split("/")[2])
            return self.redirect("/chain/%d" % (k - 1), 301 + k % 2) if k else self.send(200, PNG)
        redirects = {
            "/r/rel": "../image0.png",
            "/r/abs": "http://127.0.0.1:%d/image0.png" % port,
            "/r/303": "/image0.png",
            "/r/loop-a": "/r/loop-b",
            "/r/loop-b": "/r/loop-a",
            "/r/other-host": "http://127.0.0.2:%d/image0.png" % port,
            "/r/localhost": "http://localhost:%d/image0.png" % port,
            "/r/ftp": "ftp://127.0.0.1/image0.png",
            "/r/no-location": None,
            "/r/hang": "/hang-after-redirect",
        }
        if self.path in redirects:
            code = 303 if self.path == "/r/303" else 307 if self.path == "/r/abs" else 302
            return self.redirect(redirects[self.path], code)
        if self.path == "/r/fat":  # a body that with the PNG's passes max_image_bytes
            return self.redirect("/image0.png", 302, b"x" * (MAX_BYTES - len(PNG) // 2))
        routes = {
            "/image0.png": lambda: self.send(200, PNG),
            "/missing.png": lambda: self.send(404, b"no", "text/plain"),
            "/redirect.png": lambda: self.send(302, b"", extra=[("Location", "/image0.png")]),
            "/text.png": lambda: self.send(200, b"hello, not an image\n" * 10, "text/plain"),
            "/big.png": lambda: self.send(200, PNG + b"\0" * (MAX_BYTES + 1)),
            "/big-nolen.png": lambda: self.send(200, PNG + b"\0" * (4 * MAX_BYTES),
                                               length=False),
        }
        if self.path.startswith("/hang"):
            return self.hang()
        routes.get(self.path, lambda: self.send(404, b"", "text/plain"))()


def url(path, host="127.0.0.1"):
    return "http://%s:%d%s" % (host, SRV.server_address[1], path)


def data_url():
    return "data:image/png;base64," + base64.b64encode(PNG).decode()


def body(image_url):
    return {"model": "tiny-gemma3-vision", "max_tokens": 6, "temperature": 0, "return_token_ids": True,
            "messages": [{"role": "user", "content": [
                {"type": "text", "text": "What is in this picture?"},
                {"type": "image_url", "image_url": {"url": image_url}}]}]}


def chat(image_url, daemon=None):
    code, data = (daemon or D).request("POST", "/v1/chat/completions", body(image_url))
    return code, json.loads(data)


def refused(image_url, want, daemon=None):
    """POSTs, expects a 400 naming the part and containing want; returns the message."""
    HITS.clear()
    code, r = chat(image_url, daemon)
    assert code == 400, (code, r)
    msg = r["error"]["message"]
    assert r["error"]["param"] == "messages[0].content[1]", r
    assert want in msg, (want, msg)
    print("  400: " + msg)
    return msg


def test_same_answer_as_data_url():
    code, by_data = chat(data_url())
    assert code == 200, by_data
    HITS.clear()
    code, by_url = chat(url("/image0.png"))
    assert code == 200, by_url
    assert HITS == ["/image0.png"], HITS
    a, b = by_data["choices"][0], by_url["choices"][0]
    assert a["token_ids"] == b["token_ids"], (a, b)
    assert a["message"]["content"] == b["message"]["content"]
    for k in ("prompt_tokens", "completion_tokens"):
        assert by_data["usage"][k] == by_url["usage"][k], (by_data["usage"], by_url["usage"])
    # the same pixels, the same hash: the URL's prompt reuses the data URL's cached prefix
    assert by_url["usage"]["prompt_tokens_details"]["cached_tokens"] > 0, by_url["usage"]
    assert by_data["prompt_token_ids"] == by_url["prompt_token_ids"]


def test_host_not_allowed():
    refused(url("/image0.png", host="127.0.0.2"), "'127.0.0.2' is not one this server fetches")
    refused("https://example.com/a.png", "'example.com' is not one this server fetches")
    refused("http://u:p@127.0.0.1/a.png", "credentials")
    assert HITS == [], HITS


def test_ssrf_guard_name_to_loopback():
    refused(url("/image0.png", host="localhost"), "loopback, private or link-local")
    assert HITS == [], HITS


def test_http_errors():
    refused(url("/missing.png"), "HTTP 404")
    refused(url("/text.png"), "not an image")


def test_redirects_followed():
    """Relative (../), absolute, 303 and a chain of exactly 3: the image, the same answer."""
    code, want = chat(url("/image0.png"))
    assert code == 200, want
    for path, hits in (("/redirect.png", ["/redirect.png", "/image0.png"]),
                       ("/r/rel", ["/r/rel", "/image0.png"]),
                       ("/r/abs", ["/r/abs", "/image0.png"]),
                       ("/r/303", ["/r/303", "/image0.png"]),
                       ("/chain/3", ["/chain/3", "/chain/2", "/chain/1", "/chain/0"])):
        HITS.clear()
        code, got = chat(url(path))
        assert code == 200, (path, got)
        assert HITS == hits, (path, HITS)
        assert got["choices"][0]["token_ids"] == want["choices"][0]["token_ids"], path


def test_redirects_refused():
    refused(url("/chain/4"), "more than 3 redirects")
    assert HITS == ["/chain/4", "/chain/3", "/chain/2", "/chain/1"], HITS  # /chain/0 never
    refused(url("/r/loop-a"), "the redirects loop")
    assert HITS == ["/r/loop-a", "/r/loop-b"], HITS
    refused(url("/r/other-host"), "a redirect to host '127.0.0.2' was refused")
    assert HITS == ["/r/other-host"], HITS
    refused(url("/r/localhost"), "the host localhost resolves to")
    assert HITS == ["/r/localhost"], HITS
    refused(url("/r/ftp"), "a redirect was refused")
    refused(url("/r/no-location"), "without a Location")
    refused(url("/r/fat"), "too big (max_image_bytes is %d)" % MAX_BYTES)
    t0 = time.time()
    refused(url("/r/hang"), "image_url_timeout")
    assert time.time() - t0 < TIMEOUT + 1.5, time.time() - t0
    assert HITS == ["/r/hang", "/hang-after-redirect"], HITS


def test_no_redirects_when_zero():
    d = Daemon(INFERD, args=["--threads", "1", "--allow-image-urls", "127.0.0.1",
                             "--image-url-max-redirects", "0"])
    try:
        msg = refused(url("/redirect.png"), "redirects are not followed", daemon=d)
        assert "image_url_max_redirects is 0" in msg, msg
        assert HITS == ["/redirect.png"], HITS  # its target never fetched
    finally:
        assert d.stop() == 0


def test_too_big():
    refused(url("/big.png"), "too big (max_image_bytes is %d)" % MAX_BYTES)
    refused(url("/big-nolen.png"), "too big (max_image_bytes is %d)" % MAX_BYTES)


def test_https_verifies_certificates():
    """An https server with a self-signed certificate: refused (verification is on)."""
    tmp = tempfile.mkdtemp(prefix="inferd-imgurl-")
    try:
        key, crt = os.path.join(tmp, "k.pem"), os.path.join(tmp, "c.pem")
        try:
            subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
                            "-keyout", key, "-out", crt, "-days", "1", "-subj", "/CN=127.0.0.1",
                            "-addext", "subjectAltName=IP:127.0.0.1"],
                           check=True, capture_output=True)
        except (OSError, subprocess.CalledProcessError) as e:
            print("  (openssl cannot make a certificate: %s; https not checked)" % e)
            return
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(crt, key)
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
        srv.daemon_threads = True
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        try:
            refused("https://127.0.0.1:%d/image0.png" % srv.server_address[1], "certificate")
        finally:
            srv.shutdown()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_timeout():
    t0 = time.time()
    refused(url("/hang-timeout"), "image_url_timeout")
    took = time.time() - t0
    assert TIMEOUT - 0.5 < took < TIMEOUT + 3, took


def test_timeout_is_per_request():
    """Two URLs that never answer: one image_url_timeout in all, not one each."""
    b = body(url("/hang-a"))
    b["messages"][0]["content"].append({"type": "image_url",
                                        "image_url": {"url": url("/hang-b")}})
    t0 = time.time()
    code, data = D.request("POST", "/v1/chat/completions", b)
    took = time.time() - t0
    assert code == 400, data
    assert b"image_url_timeout" in data, data
    assert took < TIMEOUT + 1.5, took


def test_disconnect_cancels_fetch():
    req = json.dumps(body(url("/hang-cancel"))).encode()
    s = socket.socket(socket.AF_UNIX)
    s.connect(D.sock)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
              b"\r\nContent-Length: %d\r\n\r\n" % len(req) + req)
    t_end = time.time() + 2
    while "/hang-cancel" not in HITS and time.time() < t_end:
        time.sleep(0.02)
    assert "/hang-cancel" in HITS, HITS
    t0 = time.time()
    s.close()
    while "/hang-cancel" not in CLOSED and time.time() < t0 + TIMEOUT + 2:
        time.sleep(0.02)
    assert "/hang-cancel" in CLOSED, "the fetch was not aborted"
    assert CLOSED["/hang-cancel"] - t0 < TIMEOUT - 1, CLOSED["/hang-cancel"] - t0
    D.wait_idle()


def test_off_by_default():
    d = Daemon(INFERD, args=["--threads", "1"])
    try:
        refused(url("/image0.png"), "not fetched by this server", daemon=d)
        assert HITS == [], HITS
    finally:
        assert d.stop() == 0


def main():
    global D, SRV
    os.environ["INFERD_TEST_MODEL"] = os.path.abspath(TINY)
    SRV = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    SRV.daemon_threads = True
    threading.Thread(target=SRV.serve_forever, daemon=True).start()
    D = Daemon(INFERD, args=["--threads", "1", "--allow-image-urls", "127.0.0.1, localhost",
                             "--image-url-timeout", str(TIMEOUT),
                             "--max-image-bytes", str(MAX_BYTES)])
    try:
        rc = run_tests(globals())
    finally:
        code = D.stop()
        SRV.shutdown()
    if code != 0:
        print("inferd exited with %d" % code)
        rc = 1
    if rc:
        print("---- daemon log ----\n" + D.logtext())
    return rc


if __name__ == "__main__":
    sys.exit(main())
