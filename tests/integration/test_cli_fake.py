#!/usr/bin/env python3
"""test_cli_fake.py INFER — every `infer` subcommand that talks to the daemon, against a
fake inferd (test_cli_harness.FakeInferd: inferd's API shapes, canned answers) on a
temporary Unix socket, so the client's own logic is checked without a model:

- prompting: streaming output, every option's JSON field, stdin, --raw, --json,
  --no-stream, $INFERD_SOCKET, --url with --api-key/$INFERD_API_KEY over TCP;
- errors and exit codes: no socket (3, tells how to start inferd), stale socket (3),
  permission denied (3, when we can drop privileges), HTTP 4xx with the server's message
  (4), 401 hint, 503 with Retry-After (5), an error event inside the stream (5);
- models, status (text, --json, --watch);
- the chat REPL on a pseudo-terminal: streaming, /system, /save, /reset, Ctrl-C in the
  middle of an answer (the server sees the disconnect), Ctrl-D; and piped;
- images: `infer --image FILE` (repeatable) and `/image FILE` in a piped chat send data
  URL parts before the text; a missing or non-image file fails before anything is sent;
  --image with --raw is a usage error;
- bench serve (token counts equal the server's usage and its /metrics; unique prompts of
  exact length; a shared --prefix-len; sweep with JSON and SVG; Poisson; chat endpoint;
  failure exit codes) and bench cache.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_cli_harness import FakeInferd, Pty, check, main, run  # noqa: E402

INFER = os.path.abspath(sys.argv[1])
ANSWER8 = "".join(f"tok{i} " for i in range(8))


def test_help():
    for cmd in ([], ["prompt"], ["chat"], ["models"], ["status"], ["bench"], ["bench", "serve"],
                ["bench", "cache"], ["bench", "plot"], ["inspect"], ["tokenize"], ["detokenize"]):
        rc, out, err = run([INFER] + cmd + ["--help"])
        check(rc == 0 and "Usage" in out, f"infer {' '.join(cmd)} --help: rc {rc}, {out[:200]}")
    rc, out, _ = run([INFER, "--help"])
    check("130 interrupted" in out and "3 daemon unreachable" in out, "exit codes not in --help")
    rc, _, err = run([INFER, "modles"])
    check(rc == 2 and "did you mean 'models'" in err, f"typo: rc {rc} {err}")


def test_prompt(f):
    rc, out, err = run([INFER, "--socket", f.sock, "Hello", "world"])
    check(rc == 0, f"prompt rc {rc}: {err}")
    check(out == ANSWER8 + "\n", f"prompt output {out!r}")
    b = f.last("/v1/chat/completions")
    check(b["stream"] is True and b["stream_options"] == {"include_usage": True}, f"body {b}")
    check(b["messages"] == [{"role": "user", "content": "Hello world"}], f"messages {b}")
    check("model" not in b and "temperature" not in b, f"unset fields sent: {b}")

    rc, out, err = run([INFER, "prompt", "--socket", f.sock, "-n", "5", "-t", "0.5", "--top-p",
                        "0.9", "--seed", "42", "-m", "fake-model", "--system", "Be brief.",
                        "--no-cache", "--ignore-eos", "Hi"])
    check(rc == 0 and out == "".join(f"tok{i} " for i in range(5)) + "\n", f"opts: {rc} {out!r}")
    b = f.last()
    want = {"max_completion_tokens": 5, "temperature": 0.5, "top_p": 0.9, "seed": 42,
            "model": "fake-model", "use_cache": False, "ignore_eos": True}
    for k, v in want.items():
        check(b.get(k) == v, f"{k}: {b.get(k)!r} != {v!r}")
    check(b["messages"][0] == {"role": "system", "content": "Be brief."}, f"system: {b}")

    rc, out, err = run([INFER, "-"], input=b"from stdin\nline two", env={"INFERD_SOCKET": f.sock})
    check(rc == 0 and out == ANSWER8 + "\n", f"stdin: {rc} {out!r} {err}")
    check(f.last()["messages"][-1]["content"] == "from stdin\nline two", "stdin content")

    rc, out, err = run([INFER, "--socket", f.sock, "--raw", "-n", "3", "Once upon"])
    check(rc == 0 and out == "tok0 tok1 tok2 \n", f"raw: {rc} {out!r}")
    b = f.last("/v1/completions")
    check(b["prompt"] == "Once upon" and b["max_tokens"] == 3, f"raw body {b}")

    rc, out, err = run([INFER, "--socket", f.sock, "--json", "x"])
    check(rc == 0, f"--json rc {rc}")
    o = json.loads(out)
    check(o["object"] == "chat.completion" and o["choices"][0]["message"]["content"] == ANSWER8,
          f"--json {o}")
    check(f.last()["stream"] is False, "--json must not stream")

    rc, out, err = run([INFER, "--socket", f.sock, "--no-stream", "--stats", "x"])
    check(rc == 0 and out == ANSWER8 + "\n", f"--no-stream {out!r}")
    check("8 generated" in err and "finish stop" in err, f"--stats: {err}")

    rc, out, err = run([INFER, "--socket", f.sock, "ECHO", "ü", "日本"])
    check(rc == 0 and out == "[ECHO][ü][日本]\n", f"utf-8 {out!r}")


def test_errors(f):
    d = tempfile.mkdtemp()
    try:
        missing = os.path.join(d, "nope.sock")
        rc, out, err = run([INFER, "--socket", missing, "hi"])
        check(rc == 3 and f"no inferd at {missing}" in err and "inferd --model" in err
              and "systemctl start inferd" in err, f"missing socket: {rc} {err}")
        rc, out, err = run([INFER, "models"], env={"INFERD_SOCKET": missing})
        check(rc == 3 and missing in err, f"$INFERD_SOCKET not used: {err}")
        # a socket file nobody listens on (a daemon that died)
        stale = os.path.join(d, "stale.sock")
        s = socket.socket(socket.AF_UNIX)
        s.bind(stale)
        s.close()
        rc, out, err = run([INFER, "--socket", stale, "status"])
        check(rc == 3 and "nothing listens" in err, f"stale: {rc} {err}")
        rc, out, err = run([INFER, "--socket", d, "hi"])
        check(rc == 3, f"not a socket: {rc} {err}")
    finally:
        shutil.rmtree(d)

    setpriv = shutil.which("setpriv")
    if os.geteuid() == 0 and setpriv:
        os.chmod(f.dir, 0o711)
        os.chmod(f.sock, 0o660)
        p = subprocess.run([setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", INFER,
                            "--socket", f.sock, "hi"], capture_output=True, timeout=30)
        err = p.stderr.decode()
        check(p.returncode == 3 and "permission denied" in err and "group" in err,
              f"permission: {p.returncode} {err}")
    else:
        print("note: permission-denied case not run (needs root and setpriv)", file=sys.stderr)

    rc, out, err = run([INFER, "--socket", f.sock, "-m", "other", "hi"])
    check(rc == 4 and "HTTP 404" in err and "does not exist" in err, f"404: {rc} {err}")
    rc, out, err = run([INFER, "--socket", f.sock, "-n", "5000", "hi"])
    check(rc == 4 and "maximum context length" in err, f"400: {rc} {err}")
    rc, out, err = run([INFER, "--socket", f.sock, "BUSY"])
    check(rc == 5 and "HTTP 503" in err and "retry after 7" in err, f"503: {rc} {err}")
    rc, out, err = run([INFER, "--socket", f.sock, "ERRSTREAM"])
    check(rc == 5 and "worker crashed" in err and out.startswith("tok0 tok1"), f"err event {err}")
    rc, out, err = run([INFER, "--socket", f.sock, "-t", "3", "hi"])
    check(rc == 2 and "temperature" in err, f"bad temperature: {rc} {err}")
    rc, out, err = run([INFER, "--url", "https://x", "hi"])
    check(rc == 2 and "https" in err, f"https: {rc} {err}")


def test_tcp_key():
    with FakeInferd(api_key="sekrit", tcp=True) as f:
        rc, out, err = run([INFER, "--url", f.url + "/v1", "hi"])
        check(rc == 4 and "HTTP 401" in err and "--api-key" in err, f"401: {rc} {err}")
        rc, out, err = run([INFER, "--url", f.url + "/v1", "--api-key", "sekrit", "hi"])
        check(rc == 0 and out == ANSWER8 + "\n", f"--api-key: {rc} {err}")
        rc, out, err = run([INFER, "--url", f.url, "hi"], env={"INFERD_API_KEY": "sekrit"})
        check(rc == 0, f"$INFERD_API_KEY: {rc} {err}")
        rc, out, err = run([INFER, "models", "--url", f.url])
        check(rc == 0 and "fake-model" in out, f"models over tcp: {rc} {err}")


def test_ops(f):
    rc, out, err = run([INFER, "models", "--socket", f.sock])
    check(rc == 0 and "fake-model" in out and "2048" in out and "/models/fake.gguf" in out,
          f"models: {out}")
    rc, out, err = run([INFER, "models", "--json", "--socket", f.sock])
    check(json.loads(out)["data"][0]["id"] == "fake-model", "models --json")

    rc, out, err = run([INFER, "status", "--socket", f.sock, "--interval", "0.2"])
    check(rc == 0, f"status rc {rc}: {err}")
    for want in ("inferd 9.9.9", "model fake-model", "WORKER", "ready", "4242",
                 "1000 free, 4 used, 20 cached of 1024", "prefix cache", "% hit", "tokens/s",
                 "TTFT mean 150.0 ms"):
        check(want in out, f"status lacks {want!r}:\n{out}")
    rc, out, err = run([INFER, "status", "--json", "--interval", "0", "--socket", f.sock])
    o = json.loads(out)
    check(o["kv_blocks"]["free"] == 1000 and o["health"]["status"] == "ok", f"status json {o}")

    p = subprocess.Popen([INFER, "status", "--watch", "0.2", "--socket", f.sock],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(1.2)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=10)
    check(p.returncode == 0, f"watch rc {p.returncode}: {err}")
    check(out.decode().count("KV blocks") >= 3, f"watch refreshed too little:\n{out.decode()}")


def test_chat(f):
    d = tempfile.mkdtemp()
    try:
        save = os.path.join(d, "conv.json")
        t = Pty([INFER, "chat", "--socket", f.sock, "--system", "Be kind."])
        t.read_until(rb">>> ", 30)
        t.write(b"hello there\r")
        t.read_until(rb"tok7 ", 30)
        t.read_until(rb">>> ", 30)
        b = f.last("/v1/chat/completions")
        check(b["messages"] == [{"role": "system", "content": "Be kind."},
                                {"role": "user", "content": "hello there"}], f"turn 1: {b}")
        t.write(b"/system Be terse.\r")
        t.read_until(rb"system message set.*?>>> ", 30)
        t.write(b"second\r")
        t.read_until(rb"tok7 .*?>>> ", 30)
        b = f.last("/v1/chat/completions")
        check([m["role"] for m in b["messages"]] == ["system", "user", "assistant", "user"]
              and b["messages"][0]["content"] == "Be terse."
              and b["messages"][2]["content"] == ANSWER8, f"turn 2 history: {b}")
        t.write(f"/save {save}\r".encode())
        t.read_until(rb"saved 4 messages.*?>>> ", 30)
        saved = json.load(open(save))
        check(len(saved["messages"]) == 5 and saved["model"] == "fake-model", f"saved {saved}")
        t.write(b"/reset\r")
        t.read_until(rb"cleared.*?>>> ", 30)
        # Ctrl-C in the middle of a slow answer
        n_disc = len(f.disconnects)
        t.write(b"SLOW story\r")
        t.read_until(rb"tok3 ", 30)
        t.write(b"\x03")
        t.read_until(rb"\[stopped\].*?>>> ", 30)
        deadline = time.time() + 10
        while len(f.disconnects) == n_disc and time.time() < deadline:
            time.sleep(0.05)
        check(len(f.disconnects) == n_disc + 1, "the server did not see the disconnect")
        check(f.disconnects[-1][1] < 150, f"the stream was not stopped: {f.disconnects[-1]}")
        t.write(b"after\r")
        t.read_until(rb"tok7 .*?>>> ", 30)
        b = f.last("/v1/chat/completions")
        roles = [m["role"] for m in b["messages"]]
        check(roles == ["system", "user", "assistant", "user"], f"after Ctrl-C: {roles}")
        check(b["messages"][2]["content"].startswith("tok0 tok1 tok2 tok3"),
              "the partial answer was not kept")
        # non-ASCII input through the line editor
        time.sleep(0.2)
        t.write("grüß 日本\r".encode())
        t.read_until(rb"tok7 .*?>>> ", 30)
        b = f.last("/v1/chat/completions")
        check(b["messages"][-1]["content"] == "grüß 日本", f"utf-8 input: {b['messages'][-1]}")
        # Ctrl-C at the prompt clears the line (the first one already); Ctrl-D quits
        time.sleep(0.2)
        t.write(b"half a line\x03")
        t.read_until(rb"\^C.*?>>> ", 30)
        t.write(b"/system\r")
        t.read_until(rb"removed.*?>>> ", 30)
        t.write(b"\x04")
        rc = t.wait(30)
        check(rc == 0, f"chat exit {rc}: {t.buf[-300:]!r}")

        rc, out, err = run([INFER, "chat", "--socket", f.sock], input=b"one\n/reset\ntwo\n")
        check(rc == 0 and out == (ANSWER8 + "\n") * 2, f"piped chat: {rc} {out!r} {err}")
        rc, out, err = run([INFER, "chat", "--socket", f.sock, "--load", save], input=b"more\n")
        b = f.last("/v1/chat/completions")
        check(rc == 0 and len(b["messages"]) == 6, f"--load: {rc} {b}")
    finally:
        shutil.rmtree(d)


def test_images(f):
    import base64
    png = os.path.join(os.environ.get("INFERD_SOURCE_DIR", "."),
                       "tests/data/tiny-gemma3-vision/image0.png")
    data = open(png, "rb").read()
    url = "data:image/png;base64," + base64.b64encode(data).decode()
    part = {"type": "image_url", "image_url": {"url": url}}
    rc, out, err = run([INFER, "--socket", f.sock, "--image", png, "--image", png, "What?"])
    check(rc == 0, f"--image rc {rc}: {err}")
    b = f.last("/v1/chat/completions")
    check(b["messages"] == [{"role": "user", "content": [part, part,
                                                          {"type": "text", "text": "What?"}]}],
          "--image message: %s" % str(b["messages"])[:300])
    n = len(f.requests) if hasattr(f, "requests") else None
    rc, out, err = run([INFER, "--socket", f.sock, "--image", "/nonexistent.png", "x"])
    check(rc == 1 and "nonexistent.png" in err, f"missing image: {rc} {err}")
    cfg = os.path.join(os.path.dirname(png), "config.json")
    rc, out, err = run([INFER, "--socket", f.sock, "--image", cfg, "x"])
    check(rc == 1 and "not an image" in err, f"not an image: {rc} {err}")
    check(n is None or len(f.requests) == n, "a refused image was sent")
    rc, out, err = run([INFER, "--socket", f.sock, "--raw", "--image", png, "x"])
    check(rc == 2 and "--raw" in err, f"--raw --image: {rc} {err}")
    # /image in a chat: the next message carries it, the one after does not
    rc, out, err = run([INFER, "chat", "--socket", f.sock],
                       input=f"/image {png}\nlook\nagain\n".encode())
    check(rc == 0 and "attached" in err, f"/image: {rc} {err}")
    b = f.last("/v1/chat/completions")
    msgs = b["messages"]
    check(msgs[0] == {"role": "user", "content": [part, {"type": "text", "text": "look"}]}
          and msgs[-1] == {"role": "user", "content": "again"},
          "/image history: %s" % str(msgs)[:300])


def test_bench(f):
    d = tempfile.mkdtemp()
    try:
        js = os.path.join(d, "r.json")
        before = dict(f.counters)
        n0 = len(f.requests)
        rc, out, err = run([INFER, "bench", "serve", "--socket", f.sock, "-N", "6", "-c", "2",
                            "--input-len", "16", "--output-len", "5", "--json", js,
                            "--no-progress"], timeout=120)
        check(rc == 0, f"bench serve rc {rc}: {err}\n{out}")
        check("Serving Benchmark Result" in out and "P99 TTFT (ms)" in out, out)
        r = json.load(open(js))
        run0 = r["runs"][0]
        check(run0["completed"] == 6 and run0["failed"] == 0, f"run {run0}")
        check(run0["total_output_tokens"] == 30 and run0["total_input_tokens"] == 96, f"{run0}")
        check(run0["server_generation_tokens"] == 30 and run0["server_prompt_tokens"] == 96,
              f"/metrics cross-check {run0}")
        check(f.counters["out"] - before["out"] == 30 + 5, "server usage (+1 warm-up) differs")
        check(all(q["output_tokens"] == 5 and q["prompt_tokens"] == 16 for q in run0["requests"]),
              "per-request counts")
        bodies = [b for p, b, h in f.requests[n0:] if p == "/v1/completions"]
        check(len(bodies) == 7 and all(b["ignore_eos"] and b["max_tokens"] == 5 and
                                       b["temperature"] == 0 and len(b["prompt"]) == 16
                                       for b in bodies), "request bodies")
        check(len({tuple(b["prompt"]) for b in bodies}) == 7, "prompts are not unique")

        # --prefix-len: the same 6 tokens in front of every prompt, unique windows after.
        n0 = len(f.requests)
        rc, out, err = run([INFER, "bench", "serve", "--socket", f.sock, "-N", "4", "-c", "2",
                            "--input-len", "5", "--prefix-len", "6", "--output-len", "2",
                            "--json", js, "--no-progress"], timeout=120)
        check(rc == 0, f"bench serve --prefix-len rc {rc}: {err}")
        r = json.load(open(js))
        check(r["prefix_len"] == 6 and r["runs"][0]["total_input_tokens"] == 4 * 11,
              f"prefix run {r['prefix_len']} {r['runs'][0]['total_input_tokens']}")
        bodies = [b["prompt"] for p, b, h in f.requests[n0:] if p == "/v1/completions"]
        check(len(bodies) == 5 and all(len(b) == 11 and b[:6] == bodies[0][:6] for b in bodies),
              f"prefix bodies {bodies}")
        check(len({tuple(b[6:]) for b in bodies}) == 5, "windows after the prefix are not unique")
        rc, out, err = run([INFER, "bench", "serve", "--socket", f.sock, "--prefix-len", "4",
                            "--endpoint", "chat"])
        check(rc == 2 and "--prefix-len" in err, f"--prefix-len with chat: {rc} {err}")
        for k in ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms"):
            s = run0[k]
            check(s["n"] > 0 and s["p50"] <= s["p99"] + 1e-9 if "p50" in s else True, k)

        svg = os.path.join(d, "p.svg")
        js2 = os.path.join(d, "s.json")
        rc, out, err = run([INFER, "bench", "serve", "--socket", f.sock, "--sweep", "1,2,4",
                            "-N", "4", "--input-len", "8", "--output-len", "3", "--json", js2,
                            "--plot", svg, "--warmup", "0"], timeout=120)
        check(rc == 0, f"sweep rc {rc}: {err}")
        r = json.load(open(js2))
        check([x["max_concurrency"] for x in r["runs"]] == [1, 2, 4], f"sweep {r['runs']}")
        check("CONC" in out and "OUT TOK/S" in out, "sweep table missing")
        root = ET.parse(svg).getroot()
        check(root.tag.endswith("svg") and len(root.findall(".//{*}polyline")) == 5,
              "plot: not an SVG with 5 lines")
        svg2 = os.path.join(d, "p2.svg")
        rc, out, err = run([INFER, "bench", "plot", js2, svg2])
        lines = [e.get("points") for e in ET.parse(svg2).getroot().findall(".//{*}polyline")]
        check(rc == 0 and lines == [e.get("points") for e in root.findall(".//{*}polyline")],
              f"bench plot from the JSON differs: {rc} {err}")
        rc, out, err = run([INFER, "bench", "plot", svg, svg2])
        check(rc == 2 and "infer bench plot" in err, f"bench plot of a non-JSON: {rc} {err}")

        rc, out, err = run([INFER, "bench", "serve", "--socket", f.sock, "-r", "50", "-N", "5",
                            "--input-len", "4", "--output-len", "2", "--json", "-"], timeout=60)
        check(rc == 0, f"poisson rc {rc}: {err}")
        o = json.loads(out[out.index("{\n"):])
        check(o["runs"][0]["request_rate"] == 50 and o["runs"][0]["completed"] == 5, "poisson")

        rc, out, err = run([INFER, "bench", "serve", "--socket", f.sock, "--endpoint", "chat",
                            "-N", "2", "--output-len", "4", "--input-len", "10"], timeout=60)
        check(rc == 0 and "/v1/chat/completions" in out, f"chat bench {rc}: {err}")

        pf = os.path.join(d, "prompts.txt")
        with open(pf, "w") as fh:
            fh.write("a plain prompt\n{\"prompt\": \"json prompt\", \"max_tokens\": 3}\n")
        rc, out, err = run([INFER, "bench", "serve", "--socket", f.sock, "--prompts", pf, "-N",
                            "2", "--warmup", "0", "--json", js], timeout=60)
        r = json.load(open(js))
        check(rc == 0 and [q["requested_output"] for q in r["runs"][0]["requests"]] == [128, 3],
              f"prompts file: {rc} {err}")

        rc, out, err = run([INFER, "bench", "serve", "--socket", f.sock, "-m", "nope", "-N", "2"])
        check(rc == 4 and "warm-up request failed" in err, f"bad model: {rc} {err}")
        rc, out, err = run([INFER, "bench", "serve", "--socket", f.sock, "-N", "2", "--input-len",
                            "3", "--prompts", "/nonexistent"])
        check(rc == 1, f"missing prompts file: {rc}")

        n0 = len(f.requests)
        rc, out, err = run([INFER, "bench", "cache", "--socket", f.sock, "-n", "8", "--reps", "2",
                            "--json"], timeout=60)
        check(rc == 0, f"bench cache rc {rc}: {err}")
        o = json.loads(out)
        check(o["use_cache_on"]["completion_tokens"] == [8, 8] and
              o["use_cache_off"]["completion_tokens"] == [8, 8] and o["speedup"] > 0, f"{o}")
        flags = [b.get("use_cache") for p, b, h in f.requests[n0:]]
        check(flags == [True, True, True, False, False], f"use_cache sequence {flags}")
        rc, out, err = run([INFER, "bench", "cache", "--socket", f.sock, "-n", "4", "--reps",
                            "1"], timeout=60)
        check(rc == 0 and "speedup:" in out and "use_cache" in out, f"cache text {out}")
    finally:
        shutil.rmtree(d)


def all_tests():
    test_help()
    with FakeInferd() as f:
        test_prompt(f)
        test_errors(f)
        test_ops(f)
        test_chat(f)
        test_images(f)
        test_bench(f)
    test_tcp_key()


if __name__ == "__main__":
    main(all_tests)
