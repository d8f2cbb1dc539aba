"""Browsers, metrics and ops through the real daemon (label model; issue 29 items 3 and 5):
CORS preflights and headers with curl on TCP with an API key and on the Unix socket
(allowed, disallowed and no origin; errors and SSE streams; allowed_origins reloaded by
SIGHUP: a list, "*", none), vLLM's metric families on /metrics read by a strict
Prometheus text parser before and after real requests (openai client), the ORCA
endpoint-load-metrics header, POST /invocations (chat or completion by body shape) and
root_path (the openai client's base_url under the prefix); and, for item 8, structured
outputs, tools with keywords nothing enforces (auto, none), return_token_ids and
allowed_token_ids, and the Responses API (reasoning, a replayed reasoning item, background
and cancel) with the openai client on TCP and curl on TCP and the Unix socket.

Usage: test_daemon_ops.py INFERD   (curl; the venv's openai and httpx)
"""
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_daemon_util import (SCALE, require_model, serve_and_run, sse_events,  # noqa: E402
                              stream_text)

INFERD = sys.argv[1] if len(sys.argv) > 1 else "inferd"
D = None
C = None
PORT = 0
KEY = "ops-key-456"
ORIGIN = "https://app.example.com"
CONF = None  # the --config file SIGHUP re-reads
MODEL = "SmolLM2-135M-Instruct.Q4_1"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def write_conf(origins):
    with open(CONF, "w") as f:
        json.dump({"allowed_origins": origins, "root_path": "/inferd"}, f)


def curl(*args, tcp=True, key=True):
    """curl on TCP (with the key unless key=False) or the Unix socket; returns (code, headers
    as a dict of lower-case names to lists of values, body)."""
    cmd = ["curl", "-sS", "-D", "-", "-o", "-"]
    if tcp:
        base = "http://127.0.0.1:%d" % PORT
        if key:
            cmd += ["-H", "Authorization: Bearer " + KEY]
    else:
        base = "http://localhost"
        cmd += ["--unix-socket", D.sock]
    args = [a.replace("URL", base) for a in args]
    out = subprocess.run(cmd + args, capture_output=True, timeout=120 * SCALE)
    assert out.returncode == 0, "curl %s: %s" % (args, out.stderr)
    head, _, body = out.stdout.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    code = int(lines[0].split()[1])
    hdrs = {}
    for ln in lines[1:]:
        k, _, v = ln.partition(":")
        hdrs.setdefault(k.strip().lower(), []).append(v.strip())
    return code, hdrs, body


def chat_body(stream=False, max_tokens=4):
    return json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "Hi"}],
                       "max_tokens": max_tokens, "temperature": 0, "stream": stream})


def preflight(origin, method="POST", headers="authorization, content-type", tcp=True):
    args = ["-X", "OPTIONS", "URL/v1/chat/completions", "-H", "Origin: " + origin,
            "-H", "Access-Control-Request-Method: " + method]
    if headers:
        args += ["-H", "Access-Control-Request-Headers: " + headers]
    return curl(*args, tcp=tcp, key=False)  # a browser's preflight carries no key


# ---- CORS ------------------------------------------------------------------------------------

def test_cors_preflight():
    for tcp in (True, False):
        code, h, body = preflight(ORIGIN, tcp=tcp)
        assert code == 204 and body == b"", (code, h, body)
        assert h["access-control-allow-origin"] == [ORIGIN], h
        assert "POST" in h["access-control-allow-methods"][0], h
        assert h["access-control-allow-headers"] == ["authorization, content-type"], h
        assert h["access-control-max-age"] == ["600"] and "Origin" in h["vary"], h
        assert "content-length" not in h, h
    # the openai JS SDK's headers, a GET
    code, h, _ = preflight(ORIGIN, "GET", "authorization, x-stainless-os, x-stainless-lang")
    assert code == 204 and h["access-control-allow-headers"][0].endswith("x-stainless-lang"), h
    for origin, method, hdrs, word in [
            ("https://evil.example.com", "POST", "content-type", "evil.example.com"),
            (ORIGIN, "PUT", "content-type", "'PUT'"),
            (ORIGIN, "POST", "content-type, x-secret", "'x-secret'")]:
        code, h, body = preflight(origin, method, hdrs)
        assert code == 403 and "access-control-allow-origin" not in h, (origin, code, h)
        e = json.loads(body)["error"]
        assert word in e["message"] and e["code"] == "cors_not_allowed", e
    # OPTIONS without Origin is no preflight: routed as any request (a key on TCP)
    code, h, _ = curl("-X", "OPTIONS", "URL/v1/chat/completions", key=False)
    assert code == 401, code
    code, h, _ = curl("-X", "OPTIONS", "URL/v1/chat/completions")
    assert code == 405 and "POST" in h["allow"][0], (code, h)


def test_cors_actual_requests():
    origin = ["-H", "Origin: " + ORIGIN]
    code, h, body = curl("URL/v1/chat/completions", "-H", "Content-Type: application/json",
                         "-d", chat_body(), *origin)
    assert code == 200 and h["access-control-allow-origin"] == [ORIGIN], (code, h)
    assert "X-Request-Id" in h["access-control-expose-headers"][0], h
    assert "Origin" in h["vary"], h
    # errors: a wrong key (401), an unknown route (404), a bad body (400)
    code, h, _ = curl("URL/v1/chat/completions", "-H", "Authorization: Bearer wrong", "-d", "{}",
                      *origin, key=False)
    assert code == 401 and h["access-control-allow-origin"] == [ORIGIN], (code, h)
    code, h, _ = curl("URL/nowhere", *origin)
    assert code == 404 and h["access-control-allow-origin"] == [ORIGIN], (code, h)
    code, h, _ = curl("URL/v1/chat/completions", "-d", '{"messages": 3}', *origin)
    assert code == 400 and h["access-control-allow-origin"] == [ORIGIN], (code, h)
    # an SSE stream, on both transports
    for tcp in (True, False):
        code, h, body = curl("-N", "URL/v1/chat/completions", "-H",
                             "Content-Type: application/json", "-d", chat_body(True), *origin,
                             tcp=tcp)
        assert code == 200 and h["content-type"][0].startswith("text/event-stream"), (code, h)
        assert h["access-control-allow-origin"] == [ORIGIN], h
        assert sse_events(body)[-1] == "[DONE]", body[-200:]
    # another origin, or none: no CORS header (the answer still varies by origin)
    code, h, _ = curl("URL/v1/models", "-H", "Origin: https://evil.example.com")
    assert code == 200 and "access-control-allow-origin" not in h and "Origin" in h["vary"], h
    code, h, _ = curl("URL/v1/models")
    assert code == 200 and "access-control-allow-origin" not in h, h


def reload_until(origins, check):
    write_conf(origins)
    D.proc.send_signal(signal.SIGHUP)
    t0 = time.time()
    while time.time() - t0 < 10 * SCALE:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError("allowed_origins=%r not applied after SIGHUP:\n%s" % (origins,
                                                                              D.logtext()))


def test_cors_reload_any_and_none():
    try:
        def star():
            code, h, _ = preflight("https://other.example")
            return code == 204 and h["access-control-allow-origin"] == ["*"]
        reload_until("*", star)
        code, h, _ = curl("URL/v1/models", "-H", "Origin: https://x.example")
        assert h["access-control-allow-origin"] == ["*"] and "vary" not in h, h

        def none():
            return preflight(ORIGIN)[0] == 403
        reload_until("", none)
        code, h, body = preflight(ORIGIN)
        assert "allowed_origins is not set" in json.loads(body)["error"]["message"], body
        code, h, _ = curl("URL/v1/models", "-H", "Origin: " + ORIGIN)
        assert code == 200 and not any(k.startswith("access-control") or k == "vary"
                                       for k in h), h
        # a bad list is refused, the settings kept
        write_conf("app.example.com")
        D.proc.send_signal(signal.SIGHUP)
        t0 = time.time()
        while "allowed_origins: 'app.example.com'" not in D.logtext():
            assert time.time() - t0 < 10 * SCALE, D.logtext()
            time.sleep(0.05)
        assert preflight(ORIGIN)[0] == 403
    finally:
        reload_until(ORIGIN, lambda: preflight(ORIGIN)[0] == 204)


def test_cors_bad_setting_refused():
    for bad, word in [("https://a.example/path", "https://a.example/path"),
                      ("*, https://a.example", "'*'")]:
        out = subprocess.run([INFERD, "--model", "/nonexistent", "--allowed-origins", bad],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode != 0 and word in out.stderr, (bad, out.stderr)
    out = subprocess.run([INFERD, "--model", "/nonexistent", "--root-path", "inferd/"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode != 0 and "root_path 'inferd/'" in out.stderr, out.stderr


# ---- /metrics --------------------------------------------------------------------------------

LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"(,|$)')
SAMPLE_RE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^\n]*\})? (\S+)$')


def parse_prometheus(text):
    """A strict reader of the text format 0.0.4: every sample belongs to the family the last
    # TYPE declared (histograms: _bucket/_sum/_count), one HELP and TYPE per family, labels
    well escaped, values floats; histogram buckets ascending in le, cumulative, ending at
    +Inf equal to _count. Returns {family: {"type", "samples": [(name, labels, value)]}}."""
    fams, cur = {}, None
    assert text.endswith("\n")
    for ln in text.split("\n")[:-1]:
        if ln.startswith("# HELP "):
            name = ln.split(" ", 3)[2]
            assert name not in fams, "family %s twice" % name
            fams[name] = {"type": None, "samples": []}
            cur = name
            continue
        if ln.startswith("# TYPE "):
            _, _, name, typ = ln.split(" ")
            assert name == cur and fams[name]["type"] is None, ln
            assert typ in ("counter", "gauge", "histogram"), ln
            fams[name]["type"] = typ
            continue
        assert not ln.startswith("#") and ln, "stray line %r" % ln
        m = SAMPLE_RE.match(ln)
        assert m, "bad sample line %r" % ln
        name, lab, val = m.group(1), m.group(2) or "", m.group(3)
        labels = {}
        if lab:
            inner = lab[1:-1]
            pos = 0
            while pos < len(inner):
                lm = LABEL_RE.match(inner, pos)
                assert lm, "bad labels in %r" % ln
                assert lm.group(1) not in labels, ln
                labels[lm.group(1)] = lm.group(2)
                pos = lm.end()
        v = float(val)
        typ = fams[cur]["type"]
        if typ == "histogram":
            assert name in (cur + "_bucket", cur + "_sum", cur + "_count"), ln
        else:
            assert name == cur, ln
        fams[cur]["samples"].append((name, labels, v))
    for name, f in fams.items():
        if f["type"] != "histogram":
            continue
        b = [(s[1]["le"], s[2]) for s in f["samples"] if s[0].endswith("_bucket")]
        assert b and b[-1][0] == "+Inf", name
        les = [float(x[0]) for x in b]
        assert les == sorted(les) and len(set(les)) == len(les), name
        assert all(b[i][1] <= b[i + 1][1] for i in range(len(b) - 1)), name
        count = [s[2] for s in f["samples"] if s[0] == name + "_count"]
        assert count == [b[-1][1]], name
    return fams


def scrape():
    code, _, body = curl("URL/metrics", key=False)  # /metrics needs no key
    assert code == 200
    return parse_prometheus(body.decode())


def hist(f, name):
    """(buckets as [(le text, cumulative)], sum, count) of a histogram with model_name."""
    s = f[name]["samples"]
    assert all(x[1]["model_name"] == MODEL for x in s), name
    b = [(x[1]["le"], x[2]) for x in s if x[0] == name + "_bucket"]
    return b, [x[2] for x in s if x[0] == name + "_sum"][0], \
        [x[2] for x in s if x[0] == name + "_count"][0]


def value(f, name, **labels):
    for n, lab, v in f[name]["samples"]:
        if n == name and all(lab.get(k) == w for k, w in labels.items()):
            return v
    raise AssertionError("%s%s absent" % (name, labels))


VLLM_TTFT = ["0.001", "0.005", "0.01", "0.02", "0.04", "0.06", "0.08", "0.1", "0.25", "0.5",
             "0.75", "1.0", "2.5", "5.0", "7.5", "10.0", "20.0", "40.0", "80.0", "160.0",
             "640.0", "2560.0", "+Inf"]
VLLM_ITL = ["0.01", "0.025", "0.05", "0.075", "0.1", "0.15", "0.2", "0.3", "0.4", "0.5", "0.75",
            "1.0", "2.5", "5.0", "7.5", "10.0", "20.0", "40.0", "80.0", "+Inf"]
VLLM_LATENCY = ["0.3", "0.5", "0.8", "1.0", "1.5", "2.0", "2.5", "5.0", "10.0", "15.0", "20.0",
                "30.0", "40.0", "50.0", "60.0", "120.0", "240.0", "480.0", "960.0", "1920.0",
                "7680.0", "+Inf"]
# build_1_2_5_buckets(8192): the model's max_model_len
VLLM_TOKENS = ["1.0", "2.0", "5.0", "10.0", "20.0", "50.0", "100.0", "200.0", "500.0", "1000.0",
               "2000.0", "5000.0", "+Inf"]


# Every series vLLM's Grafana dashboard queries (examples/online_serving/prometheus_grafana/
# grafana.json), but vllm:num_requests_swapped and vllm:cpu_cache_usage_perc, which vLLM's V1
# engine no longer exports either (inferd never swaps to a CPU cache)
DASHBOARD = ["vllm:e2e_request_latency_seconds", "vllm:prompt_tokens_total",
             "vllm:generation_tokens_total", "vllm:time_per_output_token_seconds",
             "vllm:num_requests_running", "vllm:num_requests_waiting",
             "vllm:time_to_first_token_seconds", "vllm:gpu_cache_usage_perc",
             "vllm:request_prompt_tokens", "vllm:request_generation_tokens",
             "vllm:request_success_total", "vllm:request_queue_time_seconds",
             "vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds",
             "vllm:request_max_num_generation_tokens"]


def test_metrics_vllm_families():
    before = scrape()
    for name in DASHBOARD:
        assert name in before and all(x[1].get("model_name") == MODEL
                                      for x in before[name]["samples"]), name
    for name, les in [("vllm:time_to_first_token_seconds", VLLM_TTFT),
                      ("vllm:inter_token_latency_seconds", VLLM_ITL),
                      ("vllm:time_per_output_token_seconds", VLLM_ITL),
                      ("vllm:request_time_per_output_token_seconds", VLLM_ITL),
                      ("vllm:e2e_request_latency_seconds", VLLM_LATENCY),
                      ("vllm:request_queue_time_seconds", VLLM_LATENCY),
                      ("vllm:request_prefill_time_seconds", VLLM_LATENCY),
                      ("vllm:request_decode_time_seconds", VLLM_LATENCY),
                      ("vllm:request_inference_time_seconds", VLLM_LATENCY),
                      ("vllm:request_prompt_tokens", VLLM_TOKENS),
                      ("vllm:request_generation_tokens", VLLM_TOKENS),
                      ("vllm:request_params_max_tokens", VLLM_TOKENS),
                      ("vllm:request_max_num_generation_tokens", VLLM_TOKENS),
                      ("vllm:request_params_n", ["1.0", "2.0", "5.0", "10.0", "20.0", "+Inf"])]:
        assert before[name]["type"] == "histogram", name
        assert [b[0] for b in hist(before, name)[0]] == les, (name, hist(before, name)[0])
    # real requests: chat n=2 (max_tokens 6, temperature 1: every choice runs to length
    # unless it stops), a completion with n=1, a stream
    prompt_tok = gen_tok = choices = length = stop = itl = 0
    reqs = []
    r = C.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Count"}],
                                  n=2, max_tokens=6, temperature=1.0, seed=7)
    reqs.append((2, 6, r.usage.prompt_tokens // 1, [c.finish_reason for c in r.choices]))
    r2 = C.completions.create(model=MODEL, prompt="One, two,", max_tokens=5, temperature=0)
    reqs.append((1, 5, r2.usage.prompt_tokens, [c.finish_reason for c in r2.choices]))
    usage = [r.usage, r2.usage]
    s = C.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}],
                                  max_tokens=3, temperature=0, stream=True,
                                  stream_options={"include_usage": True})
    fin = []
    for ev in s:
        if ev.choices and ev.choices[0].finish_reason:
            fin.append(ev.choices[0].finish_reason)
        if ev.usage:
            usage.append(ev.usage)
    reqs.append((1, 3, usage[-1].prompt_tokens, fin))
    D.wait_idle()
    after_ = scrape()
    for (n, mt, pt, fins), u in zip(reqs, usage):
        choices += n
        prompt_tok += pt * n  # each choice's sequence has the prompt
        gen_tok += u.completion_tokens
        length += fins.count("length")
        stop += fins.count("stop")
    # per-choice tokens minus one gap each: the inter-token latencies observed
    itl = gen_tok - choices

    def delta(name):
        b0, s0, c0 = hist(before, name)
        b1, s1, c1 = hist(after_, name)
        return s1 - s0, c1 - c0

    assert delta("vllm:request_prompt_tokens") == (prompt_tok, choices), \
        (delta("vllm:request_prompt_tokens"), prompt_tok, choices)
    assert delta("vllm:request_generation_tokens") == (gen_tok, choices)
    assert delta("vllm:request_params_max_tokens") == (2 * 6 + 5 + 3, choices)
    assert delta("vllm:request_params_n") == (2 + 1 + 1, 3)
    assert delta("vllm:request_max_num_generation_tokens")[1] == 3
    assert delta("vllm:time_to_first_token_seconds")[1] == 3
    assert delta("vllm:inter_token_latency_seconds")[1] == itl
    assert delta("vllm:time_per_output_token_seconds") == delta("vllm:inter_token_latency_seconds")
    for name in ("vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds",
                 "vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds",
                 "vllm:request_inference_time_seconds"):
        d_sum, d_count = delta(name)
        assert d_count == choices and d_sum >= 0, (name, d_sum, d_count)
    # inference = prefill + decode for every sequence, so the sums agree
    inf = delta("vllm:request_inference_time_seconds")[0]
    pd = delta("vllm:request_prefill_time_seconds")[0] + delta("vllm:request_decode_time_seconds")[0]
    assert math.isclose(inf, pd, rel_tol=1e-3, abs_tol=1e-4), (inf, pd)
    e2e = delta("vllm:e2e_request_latency_seconds")[0]
    assert e2e >= inf - 1e-4, (e2e, inf)
    for reason, want in (("length", length), ("stop", stop)):
        d = value(after_, "vllm:request_success_total", finished_reason=reason) - \
            value(before, "vllm:request_success_total", finished_reason=reason)
        assert d == want, (reason, d, want)
    d = value(after_, "vllm:generation_tokens_total") - value(before, "vllm:generation_tokens_total")
    assert d == gen_tok, (d, gen_tok)
    # tokens per engine step, from the workers' STATS (every 0.1 s here): every step in one
    # bucket, the sum at least the generated tokens
    steps = [b[0] for b in hist(after_, "vllm:iteration_tokens_total")[0]]
    assert steps == ["1.0", "8.0", "16.0", "32.0", "64.0", "128.0", "256.0", "512.0", "1024.0",
                     "2048.0", "4096.0", "8096.0", "+Inf"], steps
    t0 = time.time()
    while True:
        f = scrape()
        _, s1, c1 = hist(f, "vllm:iteration_tokens_total")
        _, s0, c0 = hist(before, "vllm:iteration_tokens_total")
        if s1 - s0 >= gen_tok or time.time() - t0 > 10 * SCALE:
            break
        time.sleep(0.1)
    assert c1 == value(f, "inferd_engine_steps_total") and c1 > c0, (c1, c0)
    assert s1 - s0 >= gen_tok, (s1 - s0, gen_tok)


# ---- ORCA load report ------------------------------------------------------------------------

ORCA_TEXT = re.compile(r"^TEXT named_metrics\.kv_cache_usage_perc=(\d+(\.\d+)?(e-\d+)?), "
                       r"named_metrics\.num_requests_waiting=(\d+\.\d+)$")


def test_orca_load_report():
    for fmt in ("text", "TEXT"):
        code, h, _ = curl("URL/v1/chat/completions", "-H", "Content-Type: application/json",
                          "-H", "endpoint-load-metrics-format: " + fmt, "-d", chat_body())
        assert code == 200 and ORCA_TEXT.match(h["endpoint-load-metrics"][0]), h
    code, h, _ = curl("URL/v1/completions", "-H", "endpoint-load-metrics-format: json", "-d",
                      json.dumps({"model": MODEL, "prompt": "a", "max_tokens": 2}), tcp=False)
    v = h["endpoint-load-metrics"][0]
    assert code == 200 and v.startswith("JSON "), h
    nm = json.loads(v[5:])["named_metrics"]
    assert set(nm) == {"kv_cache_usage_perc", "num_requests_waiting"}, nm
    assert 0 <= nm["kv_cache_usage_perc"] <= 1 and nm["num_requests_waiting"] >= 0, nm
    # not asked, or a format vLLM does not know: no header
    code, h, _ = curl("URL/v1/chat/completions", "-d", chat_body())
    assert "endpoint-load-metrics" not in h
    code, h, _ = curl("URL/v1/chat/completions", "-H", "endpoint-load-metrics-format: bin",
                      "-d", chat_body())
    assert code == 200 and "endpoint-load-metrics" not in h
    # through the openai client, streamed
    raw = C.chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=2,
        extra_headers={"endpoint-load-metrics-format": "text"})
    assert ORCA_TEXT.match(raw.headers["endpoint-load-metrics"]), raw.headers
    assert raw.parse().choices[0].message.content is not None
    code, h, body = curl("-N", "URL/v1/chat/completions", "-H",
                         "endpoint-load-metrics-format: json", "-d", chat_body(True))
    assert code == 200 and h["endpoint-load-metrics"][0].startswith("JSON {"), h


# ---- /invocations and root_path --------------------------------------------------------------

def test_invocations():
    for tcp in (True, False):
        code, _, body = curl("URL/invocations", "-H", "Content-Type: application/json", "-d",
                             chat_body(), tcp=tcp)
        o = json.loads(body)
        assert code == 200 and o["object"] == "chat.completion", body
        code, _, body = curl("URL/invocations", "-d", json.dumps(
            {"model": MODEL, "prompt": "Once", "max_tokens": 3}), tcp=tcp)
        o = json.loads(body)
        assert code == 200 and o["object"] == "text_completion" and o["choices"][0]["text"], body
    # both keys: chat first (vLLM's order)
    code, _, body = curl("URL/invocations", "-d", json.dumps(
        {"model": MODEL, "prompt": "x", "messages": [{"role": "user", "content": "Hi"}],
         "max_tokens": 2}))
    assert code == 200 and json.loads(body)["object"] == "chat.completion", body
    code, _, body = curl("URL/invocations", "-d", json.dumps({"model": MODEL, "input": "x"}))
    e = json.loads(body)["error"]
    assert code == 400 and "'messages'" in e["message"] and "'prompt'" in e["message"], body
    code, _, body = curl("URL/invocations", "-d", "{not json")
    assert code == 400 and "JSON" in json.loads(body)["error"]["message"], body
    code, _, _ = curl("URL/invocations", "-d", chat_body(), key=False)
    assert code == 401, code  # generates: guarded by the key like /v1
    code, _, body = curl("-N", "URL/invocations", "-d", chat_body(True))
    assert code == 200 and sse_events(body)[-1] == "[DONE]", body[-200:]
    code, _, _ = curl("URL/invocations")
    assert code == 405, code


def test_root_path():
    for path, want in [("/inferd/v1/models", 200), ("/v1/models", 200), ("/inferd/health", 200),
                       ("/inferd/ping", 200), ("/inferdx/v1/models", 404), ("/inferd", 404),
                       ("/inferd/", 404), ("/inferd/inferd/v1/models", 404)]:
        code, _, body = curl("URL" + path)
        assert code == want, (path, code, body[:200])
    code, _, body = curl("URL/inferd/v1/models/" + MODEL, tcp=False)
    assert code == 200 and json.loads(body)["id"] == MODEL, body
    code, _, body = curl("URL/inferd/invocations", "-d", chat_body())
    assert code == 200 and json.loads(body)["object"] == "chat.completion", body
    # the openai client behind a proxy's prefix, on TCP with the key
    import openai
    c = openai.OpenAI(base_url="http://127.0.0.1:%d/inferd/v1" % PORT, api_key=KEY,
                      max_retries=0, timeout=120 * SCALE)
    r = c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}],
                                  max_tokens=3, temperature=0)
    assert r.choices[0].finish_reason in ("length", "stop"), r
    text = "".join(ev.choices[0].text for ev in c.completions.create(
        model=MODEL, prompt="One, two,", max_tokens=3, stream=True) if ev.choices)
    assert text, text
    assert [m.id for m in c.models.list()] == [MODEL]
    # /invocations through the client's generic post, parsed as the typed objects
    from openai.types import Completion
    from openai.types.chat import ChatCompletion
    root = openai.OpenAI(base_url="http://127.0.0.1:%d/inferd" % PORT, api_key=KEY,
                         max_retries=0, timeout=120 * SCALE)
    chat = root.post("/invocations", cast_to=ChatCompletion, body={
        "model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3})
    assert chat.object == "chat.completion" and chat.usage.completion_tokens >= 1, chat
    comp = root.post("/invocations", cast_to=Completion,
                     body={"model": MODEL, "prompt": "One,", "max_tokens": 3})
    assert comp.object == "text_completion" and comp.choices[0].text, comp
    try:
        root.post("/invocations", cast_to=ChatCompletion, body={"model": MODEL})
        raise AssertionError("no 400")
    except openai.BadRequestError as e:
        assert e.status_code == 400 and "'prompt'" in str(e), e


# ---- item 8: structured outputs and token-level extensions on TCP ---------------------------

# the schema kinds of issue 29's last session: a 20-digit bound, an anchor, a NUL in a pattern
WIDE_SCHEMA = {
    "type": "object", "additionalProperties": False, "required": ["n", "t"],
    "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 18446744073709551615},
                   "t": {"$ref": "#tag"}},
    "$defs": {"t": {"$anchor": "tag", "type": "string", "pattern": "^[^\u0000]{1,8}$"}}}


def test_tcp_structured_and_token_extensions():
    """The openai client on TCP with the key (and curl on TCP and the Unix socket): a JSON
    Schema answer validates with jsonschema; tools with keywords nothing enforces are shown,
    never refused, under tool_choice auto and none; return_token_ids' ids come back."""
    import jsonschema
    import openai
    c = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % PORT, api_key=KEY, max_retries=0,
                      timeout=120 * SCALE)
    r = c.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Give a number and a tag."}],
        max_tokens=60, temperature=1.0, seed=4,
        response_format={"type": "json_schema",
                         "json_schema": {"name": "w", "schema": WIDE_SCHEMA}})
    if r.choices[0].finish_reason == "stop":
        jsonschema.validate(json.loads(r.choices[0].message.content), WIDE_SCHEMA)
    odd = {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "x-vendor": {"a": 1}, "unevaluatedProperties": False,
        "properties": {"a": {"$ref": "http://example.com/remote.json"},
                       "b": {"type": "array", "uniqueItems": True}}}}}
    for choice in ("auto", "none"):
        r = c.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=4,
            temperature=1.0, seed=5, tools=[odd], tool_choice=choice,
            extra_body={"return_token_ids": True, "allowed_token_ids": list(range(100, 140))})
        ids = r.model_extra.get("prompt_token_ids") or []
        out = r.choices[0].model_extra.get("token_ids") or []
        assert ids and out and all(100 <= t < 140 for t in out), r
    # the Responses API: reasoning accepted, a replayed reasoning item, background + cancel
    rr = c.responses.create(model=MODEL, max_output_tokens=4, reasoning={"effort": "low"},
                            input=[{"role": "user", "content": "Pick a number."},
                                   {"type": "reasoning", "id": "rs_1", "summary": [],
                                    "content": [{"type": "reasoning_text", "text": "7"}]},
                                   {"role": "user", "content": "Another?"}])
    assert rr.status in ("completed", "incomplete"), rr
    code, _, out = curl("-X", "POST", "URL/v1/responses", "-H", "Content-Type: application/json",
                        "-d", json.dumps({"model": MODEL, "input": "Count to fifty.",
                                          "background": True, "max_output_tokens": 200}))
    bg = json.loads(out)
    assert code == 200 and bg["background"] is True, out
    code, _, out = curl("-X", "POST", "URL/v1/responses/%s/cancel" % bg["id"])
    assert code == 200 and json.loads(out)["status"] in ("cancelled", "completed",
                                                          "incomplete"), out
    for tcp in (True, False):
        body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "Hi"}],
                           "max_tokens": 30, "temperature": 0, "tools": [odd],
                           "return_token_ids": True,
                           "structured_outputs": {"json": WIDE_SCHEMA}})
        code, _, out = curl("URL/v1/chat/completions", "-H", "Content-Type: application/json",
                            "-d", body, tcp=tcp)
        o = json.loads(out)
        assert code == 200 and o["prompt_token_ids"] and o["choices"][0]["token_ids"], out
        if o["choices"][0]["finish_reason"] == "stop":
            jsonschema.validate(json.loads(o["choices"][0]["message"]["content"]), WIDE_SCHEMA)


def main():
    global PORT, CONF
    require_model()
    PORT = free_port()
    tmp = tempfile.mkdtemp(prefix="inferd-ops-")
    CONF = os.path.join(tmp, "inferd.json")
    write_conf(ORIGIN)
    try:
        return serve_and_run(globals(), INFERD,
                             ["--config", CONF, "--listen", "127.0.0.1:%d" % PORT,
                              "--api-key", KEY, "--worker-ping-interval", "0.1"])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
