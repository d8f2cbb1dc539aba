"""Speculative decoding through the daemon (label model; docs/speculative.md), with
the official openai client over the Unix socket and raw HTTP: a daemon started with
`--spec ngram` gives, greedy and seeded, streamed and not, one request or eight at
once, under a JSON Schema or with stop strings, exactly the text of the same requests
with `"speculative": false`, and its /metrics shows vLLM's spec_decode counters with
proposals accepted on an input-grounded prompt; bad `speculative` values get a 400 naming the field; a worker
SIGKILLed mid-stream with speculation on resumes to the undisturbed text; `infer
status` shows the method and the acceptance. A second daemon with `--spec draft
--draft-model` (the model as its own draft) gives the same text too, with nearly every
proposal accepted, also across a SIGKILLed worker; a draft model with another tokenizer
(Gemma 3 270M's) stops the start with a message saying so, as does draft_step_tokens
without a draft model. The draft daemon runs with a draft share of 16 tokens a step
(draft_step_tokens, the workers' --draft-step-tokens): the same text all the same.

Usage: test_daemon_spec.py INFERD WORKER   (the venv's python: $INFERD_PYTHON)
"""
import json
import os
import signal
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from spec_prompts import PROMPTS  # noqa: E402
from test_daemon_util import (SANITIZED, SCALE, Daemon, model_path, openai_client,  # noqa: E402
                              serve_and_run, skip)
import model_paths  # noqa: E402

try:
    import httpx  # noqa: F401
    import openai
except ImportError as e:
    skip("the openai/httpx packages are not installed (%s): run deploy/install-deps.sh" % e)

INFERD = sys.argv[1] if len(sys.argv) > 1 else "inferd"
MODEL = "SmolLM2-135M-Instruct.Q4_1"
# 24 tokens sanitized (CI's ASan run, 2026-12-06: its longest test at 48): proposals, acceptance,
# rollback and the same text all happen within the first 24 tokens of every prompt here
TOKENS = 24 if SANITIZED else 96
# The sanitized build (CI's ASan run) takes the first prompt, case or request count of each
# set below: every path of each test, sanitized, in CI's time; the normal build all of them.
FEW = 1 if SANITIZED else None
SPEC_ARGS = ["--spec", "ngram", "--spec-tokens", "4", "--spec-ngram-max", "3",
             "--worker-ping-interval", "0.1"]
D = C = None


def draft_args():
    """The draft model daemon's settings: the model as its own draft, fed at most 16
    tokens a step (a share below the step budget: the draft lags on long prompts and
    proposes later, never another token)."""
    return ["--spec", "draft", "--draft-model", model_path(), "--spec-tokens", "4",
            "--draft-step-tokens", "16", "--worker-ping-interval", "0.1"]


def chat(messages, spec=None, stream=False, client=None, **kw):
    """The text of one chat completion; spec None: the daemon's setting."""
    body = dict(model=MODEL, messages=messages, max_tokens=TOKENS, temperature=0)
    body.update(kw)
    if spec is not None:
        body["extra_body"] = {"speculative": spec}
    c = client or C
    if not stream:
        r = c.chat.completions.create(**body)
        return r.choices[0].message.content, r.choices[0].finish_reason, r.usage.completion_tokens
    text, finish, n = "", None, 0
    for ch in c.chat.completions.create(stream=True, **body):
        for choice in ch.choices:
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
            n += 1
    return text, finish, None


def spec_metrics():
    """vLLM's spec_decode counters, once the worker's stats have caught up (pings every
    0.1 s)."""
    time.sleep(0.5)
    m = D.metrics()
    pick = {k.split("{")[0]: v for k, v in m.items() if k.startswith("vllm:spec_decode_num_")
            and "per_pos" not in k}
    pos0 = [v for k, v in m.items() if "per_pos" in k and 'position="0"' in k]
    # the draft pool's tier families come with a draft model only
    assert not [k for k in m if k.startswith("inferd_draft_kv_")], m
    return pick, pos0[0] if pos0 else None


def test_greedy_same_text_every_way():
    for name, (msgs, kind) in list(PROMPTS.items())[:FEW]:
        off = chat(msgs, spec=False)
        on = chat(msgs)  # the daemon's --spec ngram
        on_stream = chat(msgs, stream=True)
        on_k8 = chat(msgs, spec={"method": "ngram", "num_speculative_tokens": 8,
                                 "prompt_lookup_min": 2, "prompt_lookup_max": 5})
        assert on[:2] == off[:2], (name, off, on)
        assert on[2] == off[2], (name, off[2], on[2])  # usage unchanged
        assert on_stream[:2] == off[:2], (name, off, on_stream)
        assert on_k8[:2] == off[:2], (name, off, on_k8)
        print("     %-15s (%s): %d tokens, same text" % (name, kind, off[2]))
    c, pos0 = spec_metrics()
    print("     metrics:", c, "position 0:", pos0)
    assert c["vllm:spec_decode_num_drafts_total"] > 0, c
    assert 0 < c["vllm:spec_decode_num_accepted_tokens_total"] <= \
        c["vllm:spec_decode_num_draft_tokens_total"], c
    assert pos0 and pos0 > 0
    # infer status shows the acceptance (text and --json), from the same counters
    infer = os.path.join(os.path.dirname(os.path.abspath(INFERD)), "..", "client", "infer")
    if os.path.exists(infer):
        st = subprocess.run([infer, "status", "--socket", D.sock, "--interval", "0"],
                            capture_output=True, text=True, timeout=60)
        assert st.returncode == 0 and "proposed tokens accepted" in st.stdout, st
        assert "speculative   ngram:" in st.stdout, st.stdout
        js = subprocess.run([infer, "status", "--json", "--socket", D.sock, "--interval", "0"],
                            capture_output=True, text=True, timeout=60)
        sp = json.loads(js.stdout)["speculative"]
        assert sp["proposed_tokens"] > 0 and 0 < sp["acceptance_rate"] <= 1, sp
        assert sp["method"] == "ngram", sp


def test_seeded_same_text():
    for name in ("rewrite_code", "open_chat")[:FEW]:
        msgs = PROMPTS[name][0]
        off = chat(msgs, spec=False, temperature=0.8, seed=11, top_p=0.95)
        on = chat(msgs, stream=True, temperature=0.8, seed=11, top_p=0.95)
        assert on[:2] == off[:2], (name, off, on)


def drafts():
    time.sleep(0.5)  # the worker's counters reach /metrics with its next ping (0.1 s)
    return sum(v for k, v in D.metrics().items()
               if k.startswith("vllm:spec_decode_num_draft_tokens_total"))


def test_structured_and_stop_same_text():
    """A JSON Schema (every proposed token meets the grammar mask: one it forbids cannot
    equal the sample) and stop strings (matched on the unchanged token stream) give the
    text of speculative: false, and proposals were verified under the grammar."""
    schema = {"type": "object", "properties": {
        "invoice_number": {"type": "string"}, "date": {"type": "string"},
        "customer": {"type": "string"}, "total_due": {"type": "string"}},
        "required": ["invoice_number", "date", "customer", "total_due"],
        "additionalProperties": False}
    rf = {"type": "json_schema", "json_schema": {"name": "invoice", "schema": schema}}
    msgs = PROMPTS["extract_fields"][0]
    before = drafts()
    for temp in (0, 0.7)[:FEW]:
        off = chat(msgs, spec=False, response_format=rf, temperature=temp, seed=3)
        on = chat(msgs, stream=True, response_format=rf, temperature=temp, seed=3)
        assert on[:2] == off[:2], (temp, off, on)
        if off[1] == "stop":
            json.loads(off[0])  # a complete object parses
    assert drafts() > before, "no proposal was verified under the grammar"
    code = PROMPTS["rewrite_code"][0]
    for stop in (["self.items"], ["\n\n"], ["def "])[:FEW]:
        off = chat(code, spec=False, stop=stop)
        on = chat(code, stream=True, stop=stop)
        assert on[:2] == off[:2], (stop, off, on)


def test_completions_and_responses_same_text():
    """/v1/completions and /v1/responses carry the field too (raw HTTP)."""
    code = PROMPTS["rewrite_code"][0][0]["content"]
    outs = []
    for spec in (False, None, {"num_speculative_tokens": 6}):
        body = {"prompt": code + "\n\n# The same file:\n", "max_tokens": TOKENS,
                "temperature": 0}
        if spec is not None:
            body["speculative"] = spec
        outs.append(D.json("POST", "/v1/completions", body)["choices"][0]["text"])
    assert outs[0] == outs[1] == outs[2], outs

    def responses(spec):
        body = {"model": MODEL, "input": code, "max_output_tokens": TOKENS, "temperature": 0}
        if spec is not None:
            body["speculative"] = spec
        r = D.json("POST", "/v1/responses", body)
        return "".join(c.get("text", "") for it in r["output"] if it["type"] == "message"
                       for c in it["content"])
    assert responses(False) == responses(None)
    for path, body in (("/v1/completions", {"prompt": "x"}),
                       ("/v1/responses", {"model": MODEL, "input": "x"})):
        body["speculative"] = {"method": "draft"}
        err = D.json("POST", path, body, expect=400)["error"]
        assert err["param"] == "speculative.method", (path, err)  # parsed, not ignored


def test_eight_at_once_same_text():
    n = 4 if SANITIZED else 8
    names = list(PROMPTS) * 3
    ref = [chat(PROMPTS[nm][0], spec=False, temperature=0.7 if i % 2 else 0, seed=i)
           for i, nm in enumerate(names[:n])]
    out = [None] * n

    def one(i):
        out[i] = chat(PROMPTS[names[i]][0], stream=True, temperature=0.7 if i % 2 else 0,
                      seed=i, client=openai_client(D.sock, timeout=300))
    ts = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(600)
    for i in range(n):
        assert out[i] is not None and out[i][:2] == ref[i][:2], (i, ref[i], out[i])
    D.wait_idle()


def test_bad_speculative_is_400():
    bad = [("yes", "speculative"),
           (3, "speculative"),
           ({"num_speculative_tokens": 0}, "speculative.num_speculative_tokens"),
           ({"num_speculative_tokens": 17}, "speculative.num_speculative_tokens"),
           ({"method": "eagle"}, "speculative.method"),
           ({"prompt_lookup_min": 4, "prompt_lookup_max": 2}, "speculative.prompt_lookup_min"),
           ({"draft_model": "x"}, "speculative.draft_model")]
    for v, param in bad:
        try:
            C.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}],
                                      max_tokens=4, extra_body={"speculative": v})
            raise AssertionError("accepted %r" % (v,))
        except openai.BadRequestError as e:
            assert e.body["param"] == param, (v, e.body)
    # the daemon still serves
    assert chat(PROMPTS["open_chat"][0], spec=True, max_tokens=4)[0]


def killed_worker_resumes(args):
    """Two workers with speculation on; worker 0 SIGKILLed while four streams run: each
    stream resumes elsewhere and ends with the text of an undisturbed run."""
    d = Daemon(INFERD, args + ["--restart-backoff", "0.2", "--threads", "1"], workers=2)
    try:
        client = openai_client(d.sock, timeout=300)
        msgs = PROMPTS["rewrite_code"][0]
        kws = [dict(temperature=0), dict(temperature=0.8, seed=5)] * 2
        ref = [chat(msgs, client=client, **kw) for kw in kws[:2]]
        got = [None] * 4
        started = [0] * 4

        def one(i):
            text = ""
            for ch in openai_client(d.sock, timeout=300).chat.completions.create(
                    model=MODEL, messages=msgs, max_tokens=TOKENS, stream=True, **kws[i]):
                for choice in ch.choices:
                    text += choice.delta.content or ""
                    started[i] += 1
            got[i] = text
        ts = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(4)]
        for t in ts:
            t.start()
        t0 = time.time()
        while min(started) < 4:
            assert time.time() - t0 < 120, "streams did not start"
            time.sleep(0.01)
        os.kill(d.worker_pids()[0], signal.SIGKILL)
        for t in ts:
            t.join(300)
        for i in range(4):
            assert got[i] == ref[i % 2][0], (i, ref[i % 2][0], got[i])
        log = d.logtext(tail=None)  # the kill's line is followed by the restart's and more
        assert "killed by signal 9" in log, log[-3000:]
    finally:
        assert d.stop() == 0


def test_killed_worker_resumes_same_text():
    killed_worker_resumes(SPEC_ARGS)


def test_draft_model_same_text():
    """--spec draft with the model as its own draft: greedy and seeded text equal to
    "speculative": false's, streamed or not, nearly every proposal accepted (the draft's
    greedy token is the model's own); a request may still pick ngram or off; infer
    status names the method. The worker took the draft share (its log says so). With
    --kv-cache-dir the draft's published blocks get files of their own fingerprint beside
    the model's (docs/speculative.md, "The draft's disk tier")."""
    kvdir = tempfile.mkdtemp(prefix="inferd-draft-tiers-")
    d = Daemon(INFERD, draft_args() + ["--kv-cache-dir", kvdir])

    def counters():
        time.sleep(0.5)  # the worker's counters reach /metrics with its next ping (0.1 s)
        return {k.split("{")[0]: v for k, v in d.metrics().items()
                if k.startswith("vllm:spec_decode_num_") and "per_pos" not in k}
    try:
        # the daemon's draft_step_tokens reached the worker's proposer
        assert "draft model: 16 catch-up tokens a step at most" in d.logtext(tail=None), \
            d.logtext()
        client = openai_client(d.sock, timeout=300)
        before = counters()
        # greedy draft proposals only
        for name, (msgs, kind) in list(PROMPTS.items())[:FEW]:
            off = chat(msgs, spec=False, client=client)
            on = chat(msgs, client=client)
            on_stream = None if SANITIZED else chat(msgs, stream=True, client=client)
            on_obj = chat(msgs, spec={"method": "draft_model", "num_speculative_tokens": 6},
                          stream=SANITIZED, client=client)
            for got in (on, on_obj) if SANITIZED else (on, on_stream, on_obj):
                assert got[:2] == off[:2], (name, off, got)
            assert on[2] == off[2], (name, off[2], on[2])  # usage unchanged
            print("     %-15s (%s): %d tokens, same text with the draft" % (name, kind, off[2]))
        c = {k: v - before.get(k, 0) for k, v in counters().items()}
        print("     draft metrics (greedy):", c)
        proposed = c["vllm:spec_decode_num_draft_tokens_total"]
        accepted = c["vllm:spec_decode_num_accepted_tokens_total"]
        # every greedy proposal of the model itself stands but those past a stop (EOS)
        assert proposed > 0 and accepted >= 0.95 * proposed, c
        # the draft's own disk tier in /metrics (its pool is the worker's: the counters
        # come in the worker's STATS), apart from the model's: once the writes settled,
        # the two write counters add up to the directory's block files
        d.wait_metric("inferd_draft_kv_disk_writes_total", lambda n: n > 0)
        writes, last = None, None
        for _ in range(int(100 * SCALE)):
            m = d.metrics()
            now = (m["inferd_kv_disk_writes_total"], m["inferd_draft_kv_disk_writes_total"])
            if now == last:
                writes = now
                break
            last = now
            time.sleep(0.3)
        assert writes and writes[0] > 0 and writes[1] > 0, (last, m)
        files = [f for f in os.listdir(kvdir) if f.endswith(".kvb")]
        assert len(files) == sum(writes), (len(files), writes)
        assert m["inferd_draft_kv_disk_dropped_total"] == 0, m
        assert m["inferd_draft_kv_disk_capacity_bytes"] == m["inferd_kv_disk_capacity_bytes"] > 0
        print("     draft tier metrics: %d draft blocks written, %d model blocks" %
              (writes[1], writes[0]))
        if SANITIZED:  # a request's own method and sampled requests: the normal build
            return
        msgs = PROMPTS["open_chat"][0]
        assert chat(msgs, spec={"method": "ngram"}, client=client)[:2] == \
            chat(msgs, spec=False, client=client)[:2]
        seeded_off = chat(msgs, spec=False, temperature=0.8, seed=11, client=client)
        seeded_on = chat(msgs, stream=True, temperature=0.8, seed=11, client=client)
        assert seeded_on[:2] == seeded_off[:2], (seeded_off, seeded_on)
        infer = os.path.join(os.path.dirname(os.path.abspath(INFERD)), "..", "client", "infer")
        if os.path.exists(infer):
            st = subprocess.run([infer, "status", "--socket", d.sock, "--interval", "0"],
                                capture_output=True, text=True, timeout=60)
            assert st.returncode == 0 and "speculative   draft:" in st.stdout, st.stdout
    finally:
        assert d.stop() == 0  # the tiers write what is queued before the worker exits
        fps = {f.split("-")[0] for f in os.listdir(kvdir) if f.endswith(".kvb")}
        shutil.rmtree(kvdir, ignore_errors=True)
    # the model's and the draft's (the model drafting for itself: the same geometry, another key)
    assert len(fps) == 2, fps


def test_draft_killed_worker_resumes_same_text():
    killed_worker_resumes(draft_args())


def test_draft_other_tokenizer_refused():
    """A draft model with another tokenizer: the start fails at the first try (a restart
    cannot fix it: no quick restarts), the daemon exits 1, the log says why."""
    gemma = model_paths.model_path("gemma3")
    if not os.path.isfile(gemma):
        print("     skipped: %s not found (deploy/fetch-model.sh gemma3)" % gemma)
        return
    d = Daemon(INFERD, ["--spec", "draft", "--draft-model", gemma], wait=False)
    try:
        d.wait_ready(timeout=120)
        ready = True
    except AssertionError:
        ready = False
    rc = d.proc.wait(60 * SCALE) if not ready else None
    log = d.logtext(tail=None)
    d.kill_quietly()
    assert not ready, "a daemon with Gemma 3 as SmolLM2's draft started"
    assert "needs the same tokenizer" in log, log[-3000:]
    assert rc == 1 and "no worker could be started" in log, (rc, log[-3000:])
    assert log.count("started pid") == 1, log[-3000:]  # not restarted


def test_draft_step_tokens_without_draft_model_refused():
    """draft_step_tokens without draft_model: the start stops at the settings (no worker
    started), exit 1, the log names the setting."""
    d = Daemon(INFERD, ["--draft-step-tokens", "8"], wait=False)
    try:
        rc = d.proc.wait(30 * SCALE)
    finally:
        log = d.logtext(tail=None)
        d.kill_quietly()
    assert rc == 1, (rc, log[-3000:])
    assert "draft_step_tokens 8 needs a draft model" in log, log[-3000:]
    assert "started pid" not in log, log[-3000:]


def test_draft_without_draft_model_is_400():
    """The ngram daemon has no draft model: a request asking for one is a 400."""
    for m in ("draft_model", "draft"):
        try:
            C.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}],
                                      max_tokens=4, extra_body={"speculative": {"method": m}})
            raise AssertionError("accepted method %s" % m)
        except openai.BadRequestError as e:
            assert e.body["param"] == "speculative.method", e.body
            assert "no draft model" in e.body["message"], e.body


# CI's ASan run (SANITIZED) leaves both SIGKILL cases to the normal build, for their time
# (two sanitized workers each running the model twice; the ngram one took 37 s of CI's
# 160 s here): the router's resume path runs sanitized in test_daemon_crash's
# test_sigkill_worker_mid_stream (greedy, seeded and constrained streams resumed on the
# other worker), a resumed request is an ordinary ADD to the worker, whose ngram proposer
# runs sanitized in every other case here, the draft's rollback in test_spec_draft.
SANITIZED_SKIP = ("test_killed_worker_resumes_same_text",
                  "test_draft_killed_worker_resumes_same_text")


def main():
    if SANITIZED:
        print("sanitized build: skipping %s (run in the normal build)" %
              ", ".join(SANITIZED_SKIP))
    names = sys.argv[3:] or [n for n in list(globals()) if n.startswith("test_")]
    names = [n for n in names if not (SANITIZED and n in SANITIZED_SKIP)]
    return serve_and_run(globals(), INFERD, SPEC_ARGS, names=names)


if __name__ == "__main__":
    sys.exit(main())
