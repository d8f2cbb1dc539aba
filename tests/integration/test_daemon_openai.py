"""inferd through the official `openai` Python package (label model), over an
httpx Unix-socket transport: chat and completions, streaming and not, stop
strings, seeds, n, logprobs, usage (cached_tokens), vLLM's prompt_logprobs
and completions echo + logprobs (checked against the generation path and
against the NumPy oracle, tests/oracle/), errors as the client's exception
classes, and 64 concurrent streaming clients whose answers must equal their
solo answers. After every test no KV block may be held.

Usage: test_daemon_openai.py INFERD   (run by the venv's python: $INFERD_PYTHON)
"""
import concurrent.futures
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_daemon_util import (SANITIZED, Daemon, model_path, openai_client,  # noqa: E402
                              serve_and_run, skip)

try:
    import httpx
    import openai
except ImportError as e:  # pragma: no cover
    skip("the openai/httpx packages are not installed (%s): run deploy/install-deps.sh" % e)

INFERD = sys.argv[1] if len(sys.argv) > 1 else "inferd"
D = None
C = None
MODEL = "SmolLM2-135M-Instruct.Q4_1"


def chat(content, **kw):
    kw.setdefault("max_tokens", 16)
    kw.setdefault("temperature", 0)
    return C.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": content}],
                                     **kw)


def stream_chat(content, **kw):
    kw.setdefault("max_tokens", 16)
    kw.setdefault("temperature", 0)
    text, finish, n_role, usage = "", None, 0, None
    for ch in C.chat.completions.create(model=MODEL, stream=True,
                                        messages=[{"role": "user", "content": content}], **kw):
        if ch.usage:
            usage = ch.usage
        for c in ch.choices:
            if c.delta.role:
                n_role += 1
            text += c.delta.content or ""
            if c.finish_reason:
                assert finish is None, "two finish_reasons"
                finish = c.finish_reason
    assert n_role == 1, "role must come once, in the first delta"
    return text, finish, usage


def after():
    D.wait_idle()


def test_chat_nonstream_and_stream_agree():
    r = chat("Name three colors.", max_tokens=20)
    assert r.object == "chat.completion" and r.model == MODEL
    msg = r.choices[0].message
    assert msg.role == "assistant" and msg.content, r
    assert r.choices[0].finish_reason in ("stop", "length")
    u = r.usage
    assert u.prompt_tokens > 5 and u.completion_tokens >= 1
    assert u.total_tokens == u.prompt_tokens + u.completion_tokens
    assert u.prompt_tokens_details.cached_tokens >= 0
    text, finish, usage = stream_chat("Name three colors.", max_tokens=20,
                                      stream_options={"include_usage": True})
    assert text == msg.content, (text, msg.content)
    assert finish == r.choices[0].finish_reason
    assert usage.completion_tokens == u.completion_tokens and usage.prompt_tokens == u.prompt_tokens
    after()


def test_completions():
    r = C.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=12,
                             temperature=0)
    assert r.object == "text_completion" and r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 12
    s = C.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=12,
                             temperature=0, stream=True)
    text = "".join(ch.choices[0].text for ch in s if ch.choices)
    assert text == r.choices[0].text, (text, r.choices[0].text)
    e = C.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=12,
                             temperature=0, echo=True)
    assert e.choices[0].text == "Once upon a time" + r.choices[0].text
    # several prompts: choice index = prompt * n + sample
    m = C.completions.create(model=MODEL, prompt=["Once upon a time", "The sky is"],
                             max_tokens=12, temperature=0, n=2)
    assert [c.index for c in m.choices] == [0, 1, 2, 3]
    by = {c.index: c.text for c in m.choices}
    assert by[0] == by[1] == r.choices[0].text and by[2] == by[3], by
    after()


def test_stop_strings():
    base = chat("Write a sentence about the sea.", max_tokens=24).choices[0].message.content
    assert len(base) > 12, base
    # stop on a piece from the middle: the answer ends right before it
    stop = base[8:12]
    cut = base[:base.index(stop)]
    r = chat("Write a sentence about the sea.", max_tokens=24, stop=[stop, "zzzzqq"])
    assert r.choices[0].message.content == cut and r.choices[0].finish_reason == "stop", \
        (r.choices[0].message.content, cut, stop)
    text, finish, _ = stream_chat("Write a sentence about the sea.", max_tokens=24, stop=stop)
    assert text == cut and finish == "stop", (text, cut)
    assert stop not in text
    # a stop string that never appears changes nothing
    r = chat("Write a sentence about the sea.", max_tokens=24, stop="\u00a7\u00a7never")
    assert r.choices[0].message.content == base
    after()


def test_seeds_and_n():
    kw = dict(max_tokens=16, temperature=1.0, top_p=0.95)
    a = chat("Invent a word.", seed=1234, n=3, **kw)
    b = chat("Invent a word.", seed=1234, n=3, **kw)
    ta = [c.message.content for c in a.choices]
    tb = [c.message.content for c in b.choices]
    assert ta == tb, "the same seed must give the same samples"
    assert [c.index for c in a.choices] == [0, 1, 2]
    # choice i samples with seed + i: choice 1 of seed 1234 == choice 0 of seed 1235
    c1 = chat("Invent a word.", seed=1235, **kw)
    assert c1.choices[0].message.content == ta[1], (c1.choices[0].message.content, ta)
    assert a.usage.completion_tokens >= 3 and a.usage.prompt_tokens == b.usage.prompt_tokens
    after()


def test_logprobs():
    r = chat("Say yes.", max_tokens=5, logprobs=True, top_logprobs=3)
    lp = r.choices[0].logprobs.content
    assert 1 <= len(lp) <= 5, lp
    for t in lp:
        assert t.logprob <= 0 and len(t.top_logprobs) == 3 and isinstance(t.bytes, list)
        assert t.top_logprobs[0].logprob >= t.top_logprobs[-1].logprob
    # greedy: the chosen token is the most probable one
    assert abs(lp[0].logprob - lp[0].top_logprobs[0].logprob) < 1e-4
    c = C.completions.create(model=MODEL, prompt="Hello", max_tokens=4, temperature=0,
                             logprobs=2)
    l2 = c.choices[0].logprobs
    assert len(l2.tokens) == 4 and len(l2.token_logprobs) == 4 and len(l2.top_logprobs) == 4
    assert all(len(x) <= 2 for x in l2.top_logprobs) and len(l2.text_offset) == 4
    after()


def test_prefix_cache_cached_tokens():
    long = "Here is some background. " * 20 + "Question: what is two plus two?"
    a = chat(long, max_tokens=4)
    b = chat(long, max_tokens=4)
    assert b.usage.prompt_tokens == a.usage.prompt_tokens > 64
    assert b.usage.prompt_tokens_details.cached_tokens >= 64, b.usage
    assert b.choices[0].message.content == a.choices[0].message.content
    after()


def test_errors_as_client_exceptions():
    try:
        chat("x", max_tokens=-1)
        raise AssertionError("negative max_tokens accepted")
    except openai.BadRequestError as e:
        assert e.status_code == 400 and e.param == "max_tokens", e
    try:
        C.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}])
        raise AssertionError("unknown model accepted")
    except openai.NotFoundError as e:
        assert e.code == "model_not_found" and e.param == "model", e
    try:
        chat("word " * 9000)
        raise AssertionError("over-long prompt accepted")
    except openai.BadRequestError as e:
        assert e.code == "context_length_exceeded", e
    try:
        chat("x", temperature=5)
        raise AssertionError("temperature 5 accepted")
    except openai.BadRequestError as e:
        assert e.param == "temperature", e
    models = C.models.list()
    assert models.data[0].id == MODEL
    assert C.models.retrieve(MODEL).id == MODEL
    try:
        C.models.retrieve("gpt-9")
        raise AssertionError("unknown model retrieved")
    except openai.NotFoundError as e:
        assert e.code == "model_not_found", e
    after()


def completion(body):
    body = dict(body, model=MODEL)
    body.setdefault("temperature", 0)
    return D.json("POST", "/v1/completions", body)


def plp_check(plp, ids, k):
    """vLLM's shape: [null, {"<id>": {logprob, rank, decoded_token}}, ...], the prompt
    token first, then ranks 1..k."""
    assert len(plp) == len(ids) and plp[0] is None, plp[:2]
    for i in range(1, len(ids)):
        d = plp[i]
        own = d[str(ids[i])]
        assert list(d)[0] == str(ids[i]) and own["rank"] >= 1 and own["logprob"] <= 0, d
        assert isinstance(own["decoded_token"], str)
        ranks = sorted(v["rank"] for v in d.values())
        if own["rank"] <= k:  # among the alternatives: listed once
            assert ranks == list(range(1, k + 1)), d
        else:
            assert ranks == list(range(1, k + 1)) + [own["rank"]], d


def test_prompt_logprobs():
    ids = D.json("POST", "/tokenize", {"prompt": "The capital of France is Paris, and the "
                                                 "capital of Italy is Rome. Berlin is the "
                                                 "capital of Germany, Madrid the capital of "
                                                 "Spain, and Lisbon the capital of "
                                                 "Portugal."})["tokens"]
    assert len(ids) > 32, len(ids)
    r = completion({"prompt": ids, "max_tokens": 2, "prompt_logprobs": 3})
    plp = r["choices"][0]["prompt_logprobs"]
    plp_check(plp, ids, 3)
    assert r["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    # position k scores ids[k] with the logits the generation from ids[:k] samples from
    for k in (6, len(ids) - 1):
        g = completion({"prompt": ids[:k], "max_tokens": 1, "logprobs": 5})
        top = g["choices"][0]["logprobs"]["top_logprobs"][0]
        alts = {v["decoded_token"]: v["logprob"] for t, v in plp[k].items() if v["rank"] <= 3}
        for tok, lp in alts.items():
            assert tok in top and abs(top[tok] - lp) < 1e-3, (k, tok, lp, top)
    # again (its blocks are cached now): computed again, the same numbers; with n = 2
    # both choices carry them (the second sample may use the cache)
    r2 = completion({"prompt": ids, "max_tokens": 2, "prompt_logprobs": 3})
    assert r2["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    r2n = completion({"prompt": ids, "max_tokens": 2, "prompt_logprobs": 3, "n": 2})
    for c in r2["choices"] + r2n["choices"]:
        for a, b in zip(plp[1:], c["prompt_logprobs"][1:]):
            assert a.keys() == b.keys()
            assert all(abs(a[t]["logprob"] - b[t]["logprob"]) < 1e-5 for t in a), (a, b)
    r3 = completion({"prompt": ids, "max_tokens": 2})
    assert r3["usage"]["prompt_tokens_details"]["cached_tokens"] >= 16, r3["usage"]
    assert r3["choices"][0]["prompt_logprobs"] is None  # the key, null: vLLM's shape
    # chat (through the openai client): once, at the top level, over the templated prompt
    c = chat("Hi there.", max_tokens=2, extra_body={"prompt_logprobs": 0})
    cp = c.model_extra["prompt_logprobs"]
    assert len(cp) == c.usage.prompt_tokens and cp[0] is None
    assert all(len(d) == 1 and list(d.values())[0]["rank"] >= 1 for d in cp[1:]), cp[:3]
    # limits and refusals (vLLM's max_logprobs 20; none with stream)
    for kw, param in (({"prompt_logprobs": 21}, "prompt_logprobs"),
                      ({"prompt_logprobs": -1}, "prompt_logprobs"),
                      ({"prompt_logprobs": "3"}, "prompt_logprobs"),
                      ({"prompt_logprobs": 2, "stream": True}, "prompt_logprobs")):
        try:
            C.completions.create(model=MODEL, prompt="x", max_tokens=1, extra_body=kw)
            raise AssertionError("accepted: %r" % kw)
        except openai.BadRequestError as e:
            assert e.status_code == 400 and e.param == param, (kw, e)
    after()


def test_echo_with_logprobs():
    prompt = "Once upon a time"
    r = C.completions.create(model=MODEL, prompt=prompt, max_tokens=4, temperature=0, echo=True,
                             logprobs=2)
    ch = r.choices[0]
    lp = ch.logprobs
    n_p = r.usage.prompt_tokens
    assert ch.text.startswith(prompt) and len(lp.tokens) == n_p + 4, (ch.text, lp.tokens)
    assert "".join(lp.tokens[:n_p]) == prompt, lp.tokens
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert all(x <= 0 for x in lp.token_logprobs[1:]) and lp.text_offset[0] == 0
    assert all(len(t) <= 2 for t in lp.top_logprobs[1:])
    plain = C.completions.create(model=MODEL, prompt=prompt, max_tokens=4, temperature=0,
                                 logprobs=2)
    assert ch.text == prompt + plain.choices[0].text
    assert lp.token_logprobs[n_p:] == plain.choices[0].logprobs.token_logprobs
    # vLLM also sets the choice's prompt_logprobs
    ids = D.json("POST", "/tokenize", {"prompt": prompt})["tokens"]
    plp = ch.model_extra["prompt_logprobs"]
    for i in range(1, n_p):
        assert abs(plp[i][str(ids[i])]["logprob"] - lp.token_logprobs[i]) < 1e-6
    # streamed: the prompt and its logprobs first, then the answer, the same numbers
    text, toks, lps = "", [], []
    for k, chunk in enumerate(C.completions.create(model=MODEL, prompt=prompt, max_tokens=4,
                                                   temperature=0, echo=True, logprobs=2,
                                                   stream=True)):
        c = chunk.choices[0]
        if k == 0:
            assert c.text == prompt and len(c.logprobs.tokens) == n_p, c
        text += c.text
        if c.logprobs:
            toks += c.logprobs.tokens
            lps += c.logprobs.token_logprobs
    assert text == ch.text and toks == lp.tokens, (text, toks)
    assert lps[0] is None and all(abs(a - b) < 1e-6 for a, b in zip(lps[1:], lp.token_logprobs[1:]))
    # n = 2, streamed and not: every choice starts with the same prompt logprobs
    two = C.completions.create(model=MODEL, prompt=prompt, max_tokens=2, temperature=0, echo=True,
                               logprobs=1, n=2)
    for c in two.choices:
        assert c.logprobs.token_logprobs[:n_p] == lp.token_logprobs[:n_p], c.logprobs
    first = {}
    for chunk in C.completions.create(model=MODEL, prompt=prompt, max_tokens=2, temperature=0,
                                      echo=True, logprobs=1, n=2, stream=True):
        for c in chunk.choices:
            first.setdefault(c.index, c)
    assert sorted(first) == [0, 1]
    for c in first.values():
        assert c.text == prompt and c.logprobs.token_logprobs[1:] == lp.token_logprobs[1:n_p], c
    # max_tokens 0 (vLLM's scoring form): the prompt alone, with its logprobs
    z = C.completions.create(model=MODEL, prompt=prompt, max_tokens=0, echo=True, logprobs=1)
    zc = z.choices[0]
    assert zc.text == prompt and zc.logprobs.tokens == lp.tokens[:n_p], zc
    assert zc.logprobs.token_logprobs[0] is None and zc.finish_reason == "length"
    assert all(abs(a - b) < 1e-6 for a, b in zip(zc.logprobs.token_logprobs[1:],
                                                  lp.token_logprobs[1:n_p]))
    try:
        C.completions.create(model=MODEL, prompt=prompt, max_tokens=0)
        raise AssertionError("max_tokens 0 without echo accepted")
    except openai.BadRequestError as e:
        assert e.param == "max_tokens", e
    after()


def test_prompt_logprobs_vs_oracle():
    """The prompt logprobs of the exact f32 path against the NumPy oracle (float64),
    on a second daemon with --weights-dtype f32. Not in the sanitizer build (like
    test_oracle*: numbers, not memory, and the oracle's 12 s of CPU)."""
    if os.environ.get("ASAN_OPTIONS") or os.environ.get("TSAN_OPTIONS"):
        print("     (oracle comparison skipped under the sanitizers)")
        return
    try:
        import numpy as np
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                        "oracle"))
        from llama_oracle import LlamaOracle
    except ImportError as e:
        print("     (oracle comparison skipped: %s)" % e)
        return
    ids = D.json("POST", "/tokenize", {"prompt": "The quick brown fox jumps over the lazy "
                                                 "dog. It was a sunny day."})["tokens"]
    got = {}
    # the oracle loads (~12 s of CPU: it dequantizes every weight) while the daemon serves
    oracle = threading.Thread(target=lambda: got.update(logits=LlamaOracle(model_path()).score(ids)))
    oracle.start()
    d2 = Daemon(INFERD, args=["--weights-dtype", "f32"])
    try:
        r = d2.json("POST", "/v1/completions", {"model": MODEL, "prompt": ids, "max_tokens": 1,
                                               "prompt_logprobs": 5})
    finally:
        assert d2.stop() == 0
    plp = r["choices"][0]["prompt_logprobs"]
    oracle.join()
    logits = got["logits"]
    diffs = []
    for i in range(1, len(ids)):
        row = logits[i - 1]
        m = row.max()
        ref = row - (m + np.log(np.exp(row - m).sum()))
        diffs += [abs(v["logprob"] - ref[int(t)]) for t, v in plp[i].items()]
        own, x = plp[i][str(ids[i])], ref[ids[i]]
        assert 1 + (ref > x + 2e-3).sum() <= own["rank"] <= (ref >= x - 2e-3).sum(), (i, own)
        best = [t for t, v in plp[i].items() if v["rank"] == 1][0]
        assert ref[int(best)] > ref.max() - 2e-3, (i, best, int(np.argmax(ref)))
    worst, med = max(diffs), sorted(diffs)[len(diffs) // 2]
    print("     prompt logprobs vs oracle: |diff| max %.2e median %.2e over %d positions"
          % (worst, med, len(ids) - 1))
    assert worst < 2e-2 and med < 3e-3, (worst, med)
    after()


# 64 streams (each prompt twice); 24 of 8 tokens in the sanitized build, where
# the unsanitized 64 take ~100 s and the router code they run is the same.
N_PROMPTS, N_TOKENS = (12, 8) if SANITIZED else (32, 16)
PROMPTS = ["Give me a fact about the number %d." % i for i in range(N_PROMPTS)]


def test_64_concurrent_streams_equal_solo():
    solo = {}
    for p in PROMPTS:
        solo[p] = chat(p, max_tokens=N_TOKENS).choices[0].message.content
    clients = PROMPTS + PROMPTS
    t0 = time.time()
    with concurrent.futures.ThreadPoolExecutor(len(clients)) as ex:
        futs = [ex.submit(stream_chat, p, max_tokens=N_TOKENS) for p in clients]
        results = [f.result() for f in futs]
    dt = time.time() - t0
    bad = [(p, r[0], solo[p]) for p, r in zip(clients, results) if r[0] != solo[p]]
    assert not bad, "%d of %d streams differ from their solo answer, e.g. %r" % (
        len(bad), len(clients), bad[0])
    assert all(r[1] in ("stop", "length") for r in results)
    print("     %d concurrent streams: %.1f s" % (len(clients), dt))
    m = after()
    return m


if __name__ == "__main__":
    sys.exit(serve_and_run(globals(), INFERD))
