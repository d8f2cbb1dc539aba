"""vLLM's token-level extensions through the real daemon (label model), with the official
`openai` client (extra_body, the fields a vLLM client reads as extras) and curl over the
Unix socket:

- return_token_ids: chat's top-level prompt_token_ids (the /tokenize of the same messages)
  and each choice's token_ids (as many as usage's completion_tokens; their /detokenize is
  the text), streamed too (the chunks' token_ids concatenate to the non-streamed ones, the
  prompt's come once); completions put prompt_token_ids in each choice;
- return_tokens_as_token_ids: logprobs' tokens (and alternatives) are "token_id:N", N the
  returned token_ids;
- logprob_token_ids: each token's top_logprobs are the sampled token then the ids asked for
  (vLLM's dict), their logprobs those a top-20 run gives them (chat; completions streamed);
- allowed_token_ids: at temperature 1 every sampled id is in the set (chat and
  completions, n > 1, streamed), greedy picks within it; ids outside the vocabulary are a
  400 naming each; [] is a 400;
- prompt_logprobs: null when not asked (chat at the top, completions in each choice);
  completions with logprobs 0 give top_logprobs as one-entry {token: logprob} dicts;
- /tokenize's token_strs are vocabulary pieces ("Ġworld"), not decoded text;
- a custom message role reaches the chat template;
- a logit_bias refusal names every bad key (keys, then ids past the vocabulary);
- --max-logprobs lowers the cap of top_logprobs, logprobs and prompt_logprobs (400 naming
  the field);
- a streamed chunk with the whole vocabulary's alternatives is written on the router's
  thread pool: held there (the INFERD_TEST_CHUNK_GATE hook), another client's stream runs
  to its end; the streamed logprobs equal the non-streamed ones (chat, completions echo);
  the chunks waiting behind it are bounded by output_buffer_bytes.
After every test no KV block may be held.

Usage: test_daemon_tokens.py INFERD   (run by the venv's python: $INFERD_PYTHON)
"""
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_daemon_util import (SANITIZED, SCALE, Daemon, UnixHTTPConnection,  # noqa: E402
                              serve_and_run, skip)

try:
    import openai
except ImportError as e:  # pragma: no cover
    skip("the openai/httpx packages are not installed (%s): run deploy/install-deps.sh" % e)

INFERD = sys.argv[1] if len(sys.argv) > 1 else "inferd"
D = None
C = None
MODEL = "SmolLM2-135M-Instruct.Q4_1"
MSGS = [{"role": "user", "content": "Name three colors."}]


def extra(obj, name):
    """A field the openai package does not declare (vLLM's extras)."""
    return (obj.model_extra or {}).get(name)


def detok(ids):
    return D.json("POST", "/detokenize", {"tokens": ids})["prompt"]


def detok_on(d, ids):
    return d.json("POST", "/detokenize", {"tokens": ids})["prompt"]


def tok(text):
    return D.json("POST", "/tokenize", {"prompt": text, "add_special_tokens": False})["tokens"]


def test_chat_return_token_ids():
    r = C.chat.completions.create(model=MODEL, messages=MSGS, max_tokens=12, temperature=0,
                                  extra_body={"return_token_ids": True})
    want_prompt = D.json("POST", "/tokenize", {"messages": MSGS})["tokens"]
    assert extra(r, "prompt_token_ids") == want_prompt, (extra(r, "prompt_token_ids"),
                                                         want_prompt)
    ids = extra(r.choices[0], "token_ids")
    assert len(ids) == r.usage.completion_tokens, (ids, r.usage)
    if r.choices[0].finish_reason == "length":
        assert detok(ids) == r.choices[0].message.content, (detok(ids), r.choices[0])
    # streamed: each chunk's ids, the prompt's once (the first chunk)
    got, prompts = [], []
    for k, ch in enumerate(C.chat.completions.create(model=MODEL, messages=MSGS, max_tokens=12,
                                                     temperature=0, stream=True,
                                                     extra_body={"return_token_ids": True})):
        if extra(ch, "prompt_token_ids") is not None:
            assert k == 0 and ch.choices[0].delta.role == "assistant", (k, ch)  # vLLM's first
            prompts.append(extra(ch, "prompt_token_ids"))
        for c in ch.choices:
            got += extra(c, "token_ids") or []
    assert prompts == [want_prompt], prompts
    assert got == ids, (got, ids)
    # not asked: no such keys
    raw = D.json("POST", "/v1/chat/completions", {"model": MODEL, "messages": MSGS,
                                                  "max_tokens": 2})
    assert "prompt_token_ids" not in raw and "token_ids" not in raw["choices"][0], raw
    D.wait_idle()


def test_completions_return_token_ids():
    prompts = ["The capital of France is", "One, two, three,"]
    r = C.completions.create(model=MODEL, prompt=prompts, max_tokens=6, temperature=0, n=2,
                             extra_body={"return_token_ids": True})
    assert len(r.choices) == 4
    total = 0
    for c in r.choices:
        assert extra(c, "prompt_token_ids") == tok(prompts[c.index // 2]), c
        ids = extra(c, "token_ids")
        total += len(ids)
        if c.finish_reason == "length":
            assert detok(ids) == c.text, (detok(ids), c.text)
    assert total == r.usage.completion_tokens
    # streamed: the ids of choice i in its chunks, its prompt's with its first chunk
    got, seen_prompt = {}, {}
    for ch in C.completions.create(model=MODEL, prompt=prompts, max_tokens=6, temperature=0,
                                   n=2, stream=True, extra_body={"return_token_ids": True}):
        for c in ch.choices:
            if extra(c, "prompt_token_ids") is not None:  # with the choice's first chunk
                assert c.index not in got and c.index not in seen_prompt, c
                seen_prompt[c.index] = extra(c, "prompt_token_ids")
            got.setdefault(c.index, []).extend(extra(c, "token_ids") or [])
    for c in r.choices:
        assert got[c.index] == extra(c, "token_ids"), (c.index, got[c.index])
        assert seen_prompt[c.index] == extra(c, "prompt_token_ids")
    D.wait_idle()


def test_tokens_as_token_ids():
    r = C.chat.completions.create(model=MODEL, messages=MSGS, max_tokens=6, temperature=0,
                                  logprobs=True, top_logprobs=2,
                                  extra_body={"return_token_ids": True,
                                              "return_tokens_as_token_ids": True})
    ids = extra(r.choices[0], "token_ids")
    content = r.choices[0].logprobs.content
    assert len(content) >= 1
    for i, e in enumerate(content):
        assert e.token == "token_id:%d" % ids[i], (e.token, ids[i])
        assert bytes(e.bytes) == e.token.encode(), e  # vLLM: the bytes of that text
        assert len(e.top_logprobs) == 2
        assert all(t.token.startswith("token_id:") for t in e.top_logprobs), e
    r = C.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=5,
                             temperature=0, logprobs=1,
                             extra_body={"return_token_ids": True,
                                         "return_tokens_as_token_ids": True})
    c = r.choices[0]
    ids = extra(c, "token_ids")
    assert c.logprobs.tokens == ["token_id:%d" % i for i in ids[:len(c.logprobs.tokens)]]
    assert all(k.startswith("token_id:") for d in c.logprobs.top_logprobs for k in d)
    # text_offset counts the placeholders' characters, as vLLM's
    offs = c.logprobs.text_offset
    assert all(offs[i + 1] - offs[i] == len(c.logprobs.tokens[i]) for i in range(len(offs) - 1))
    D.wait_idle()


def test_allowed_token_ids():
    allowed = sorted(set(tok(" yes") + tok(" no") + tok(" maybe")))
    assert len(allowed) == 3, allowed
    # sampled at temperature 1, EOS not allowed either: every id in the set
    r = C.completions.create(model=MODEL, prompt="Answer:", max_tokens=8, temperature=1.0, n=4,
                             seed=3, extra_body={"allowed_token_ids": allowed,
                                                 "return_token_ids": True})
    seen = set()
    for c in r.choices:
        ids = extra(c, "token_ids")
        assert len(ids) == 8 and set(ids) <= set(allowed), (ids, allowed)
        seen |= set(ids)
    assert len(seen) >= 2, seen  # a draw, not a constant
    # chat, streamed, greedy: within the set too
    text = ""
    for ch in C.chat.completions.create(model=MODEL, messages=MSGS, max_tokens=5, temperature=0,
                                        stream=True, extra_body={"allowed_token_ids": allowed}):
        for c in ch.choices:
            text += c.delta.content or ""
    assert text and set(text.split()) <= {"yes", "no", "maybe"}, text
    # the refusals: every bad id named, and []
    code, body = D.curl("-X", "POST", "http://x/v1/chat/completions",
                        "-H", "Content-Type: application/json",
                        "-d", json.dumps({"model": MODEL, "messages": MSGS,
                                          "allowed_token_ids": [5, 99999999, 88888888]}))
    err = json.loads(body)["error"]
    assert code == 400 and err["param"] == "allowed_token_ids", (code, body)
    assert "99999999" in err["message"] and "88888888" in err["message"], err
    try:
        C.completions.create(model=MODEL, prompt="x", max_tokens=1,
                             extra_body={"allowed_token_ids": []})
        raise AssertionError("[] accepted")
    except openai.BadRequestError as e:
        assert e.body["param"] == "allowed_token_ids", e.body
    D.wait_idle()


def test_logprob_token_ids():
    # greedy, so both runs sample the same tokens: the ids' logprobs equal the ones the
    # top-20 run lists for them
    ids = sorted(set(tok(" red") + tok(" blue") + tok(" the")))
    full = C.chat.completions.create(model=MODEL, messages=MSGS, max_tokens=5, temperature=0,
                                     logprobs=True, top_logprobs=20,
                                     extra_body={"return_tokens_as_token_ids": True})
    r = C.chat.completions.create(model=MODEL, messages=MSGS, max_tokens=5, temperature=0,
                                  logprobs=True, extra_body={"logprob_token_ids": ids,
                                                             "return_tokens_as_token_ids": True})
    assert r.choices[0].message.content == full.choices[0].message.content
    for e, f in zip(r.choices[0].logprobs.content, full.choices[0].logprobs.content):
        # vLLM's dict: the sampled token first, then the ids asked for (the sampled once)
        want = [e.token] + ["token_id:%d" % i for i in ids if "token_id:%d" % i != e.token]
        assert [t.token for t in e.top_logprobs] == want, (e, want)
        assert abs(e.top_logprobs[0].logprob - e.logprob) < 1e-6
        known = {t.token: t.logprob for t in f.top_logprobs}
        for t in e.top_logprobs:
            if t.token in known:
                assert abs(t.logprob - known[t.token]) < 1e-4, (t, known[t.token])
            else:  # not in the top 20: below its 20th
                assert t.logprob <= f.top_logprobs[-1].logprob + 1e-4, (t, f.top_logprobs[-1])
    # completions, streamed: a dict per token holding the sampled token and the ids
    n = 0
    for ch in C.completions.create(model=MODEL, prompt="The sky is", max_tokens=4,
                                   temperature=0, logprobs=0, stream=True,
                                   extra_body={"logprob_token_ids": ids,
                                               "return_tokens_as_token_ids": True}):
        for c in ch.choices:
            if c.logprobs is None:  # the last chunk, when it brings no token
                continue
            for t, d in zip(c.logprobs.tokens, c.logprobs.top_logprobs):
                assert set(d) == {t} | {"token_id:%d" % i for i in ids}, (t, d)
                n += 1
    assert n == 4
    # refusals: without logprobs, an id past the vocabulary (named)
    err = D.json("POST", "/v1/completions", {"model": MODEL, "prompt": "x",
                                             "logprob_token_ids": [5]}, expect=400)["error"]
    assert err["param"] == "logprob_token_ids", err
    err = D.json("POST", "/v1/completions", {"model": MODEL, "prompt": "x", "logprobs": 1,
                                             "logprob_token_ids": [5, 99999999]},
                 expect=400)["error"]
    assert err["param"] == "logprob_token_ids" and "99999999" in err["message"], err
    # more ids than this daemon's max_logprobs (20, the default): vLLM's refusal
    err = D.json("POST", "/v1/completions", {"model": MODEL, "prompt": "x", "logprobs": 1,
                                             "logprob_token_ids": list(range(1, 22))},
                 expect=400)["error"]
    assert err["param"] == "logprob_token_ids" and "max allowed: 20" in err["message"], err
    D.wait_idle()


def test_prompt_logprobs_null_and_logprobs_zero():
    r = D.json("POST", "/v1/chat/completions", {"model": MODEL, "messages": MSGS,
                                                "max_tokens": 2})
    assert "prompt_logprobs" in r and r["prompt_logprobs"] is None, r
    r = D.json("POST", "/v1/completions", {"model": MODEL, "prompt": "Hello", "max_tokens": 4,
                                           "temperature": 0, "logprobs": 0})
    c = r["choices"][0]
    assert "prompt_logprobs" in c and c["prompt_logprobs"] is None, c
    lp = c["logprobs"]
    assert len(lp["top_logprobs"]) == len(lp["tokens"]) >= 1
    for t, v, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
        assert top == {t: v}, (t, v, top)
    # the openai client reads the attribute
    r = C.completions.create(model=MODEL, prompt="Hello", max_tokens=2, logprobs=0)
    assert extra(r.choices[0], "prompt_logprobs") is None
    assert "prompt_logprobs" in r.choices[0].model_extra
    D.wait_idle()


def test_tokenize_token_strs_are_pieces():
    code, body = D.curl("-X", "POST", "http://x/tokenize", "-H",
                        "Content-Type: application/json", "-d",
                        json.dumps({"prompt": "hello world\n", "add_special_tokens": False,
                                    "return_token_strs": True}), expect=200)
    r = json.loads(body)
    assert r["token_strs"][1] == "\u0120world", r  # GPT-2's byte alphabet: Ġ is the space
    assert "".join(r["token_strs"]).replace("\u0120", " ").replace("\u010a", "\n") == \
        "hello world\n", r


def test_custom_role_reaches_the_template():
    msgs = [{"role": "ipython", "content": "42"}, {"role": "user", "content": "Hi"}]
    ids = D.json("POST", "/tokenize", {"messages": msgs})["tokens"]
    assert "<|im_start|>ipython\n42" in detok(ids), detok(ids)
    r = C.chat.completions.create(model=MODEL, messages=msgs, max_tokens=2)
    assert r.choices[0].message.content is not None
    D.wait_idle()


def test_logit_bias_names_every_bad_key():
    code, body = D.curl("-X", "POST", "http://x/v1/completions", "-H",
                        "Content-Type: application/json", "-d",
                        json.dumps({"model": MODEL, "prompt": "x",
                                    "logit_bias": {"a": 1, "5": 1, "b": 2}}))
    err = json.loads(body)["error"]
    assert code == 400 and err["param"] == "logit_bias", body
    assert "'a'" in err["message"] and "'b'" in err["message"], err
    code, body = D.curl("-X", "POST", "http://x/v1/completions", "-H",
                        "Content-Type: application/json", "-d",
                        json.dumps({"model": MODEL, "prompt": "x",
                                    "logit_bias": {"5": 1, "99999999": 1, "77777777": -1}}))
    err = json.loads(body)["error"]
    assert code == 400 and err["param"] == "logit_bias", body
    assert "99999999" in err["message"] and "77777777" in err["message"], err
    assert "'5'" not in err["message"] and " 5," not in err["message"], err


def test_max_logprobs_setting():
    d2 = Daemon(INFERD, args=["--max-logprobs", "3"])
    try:
        base = {"model": MODEL, "max_tokens": 2}
        cases = [("/v1/chat/completions", {"messages": MSGS, "logprobs": True,
                                           "top_logprobs": 4}, "top_logprobs"),
                 ("/v1/completions", {"prompt": "x", "logprobs": 5}, "logprobs"),
                 ("/v1/completions", {"prompt": "x y", "prompt_logprobs": 4}, "prompt_logprobs")]
        for path, body, param in cases:
            err = d2.json("POST", path, dict(base, **body), expect=400)["error"]
            assert err["param"] == param and "max allowed: 3" in err["message"], err
        r = d2.json("POST", "/v1/chat/completions", dict(base, messages=MSGS, logprobs=True,
                                                         top_logprobs=3))
        assert len(r["choices"][0]["logprobs"]["content"][0]["top_logprobs"]) == 3, r
        d2.wait_idle()
    finally:
        assert d2.stop() == 0, d2.logtext()


def test_max_logprobs_above_20():
    """--max-logprobs past OpenAI's 20 (issue 29 item 4): 50 alternatives, sorted, whose
    first 20 are the 20-case's; the cap's 400; -1 (the vocabulary) with prompt_logprobs
    1000 and -1, and a 400 past the vocabulary (vLLM's _validate_logprobs). The -1 daemon's
    worker splits its frames at 1000 bytes (the INFERD_TEST_FRAME_BUDGET hook): its answers
    equal the unsplit daemon's."""
    from test_daemon_util import openai_client
    d2 = Daemon(INFERD, args=["--max-logprobs", "100"])
    try:
        c2 = openai_client(d2.sock)
        kw = dict(model=MODEL, messages=MSGS, max_tokens=4, temperature=0, logprobs=True)
        r50 = c2.chat.completions.create(top_logprobs=50, **kw).choices[0].logprobs.content
        r20 = c2.chat.completions.create(top_logprobs=20, **kw).choices[0].logprobs.content
        assert len(r50) == len(r20) == 4
        for a, b in zip(r50, r20):
            assert a.token == b.token and len(a.top_logprobs) == 50 and len(b.top_logprobs) == 20
            lps = [t.logprob for t in a.top_logprobs]
            assert lps == sorted(lps, reverse=True), lps
            assert [(t.token, t.logprob) for t in a.top_logprobs[:20]] == \
                [(t.token, t.logprob) for t in b.top_logprobs]
        # logprob_token_ids past 20 (wire v14): the top-50 run's ids, reversed, give the
        # same logprobs at each position where they are its top 50; 101 ids a 400
        ex = {"return_tokens_as_token_ids": True}
        t50 = c2.chat.completions.create(top_logprobs=50, extra_body=ex, **kw)
        want = [t.token for t in t50.choices[0].logprobs.content[0].top_logprobs][::-1]
        lpids = [int(t.split(":")[1]) for t in want]
        rid = c2.chat.completions.create(extra_body=dict(ex, logprob_token_ids=lpids), **kw)
        for e, f in zip(rid.choices[0].logprobs.content, t50.choices[0].logprobs.content):
            assert e.token == f.token
            got = [t.token for t in e.top_logprobs]
            assert got == [e.token] + [t for t in want if t != e.token], got[:5]
            known = {t.token: t.logprob for t in f.top_logprobs}
            for t in e.top_logprobs:
                if t.token in known:
                    assert abs(t.logprob - known[t.token]) < 1e-4, (t, known[t.token])
        try:
            c2.chat.completions.create(extra_body=dict(ex, logprob_token_ids=list(range(101))),
                                       **kw)
            raise AssertionError("101 logprob_token_ids accepted under --max-logprobs 100")
        except openai.BadRequestError as e:
            assert e.status_code == 400 and e.param == "logprob_token_ids", e
        try:
            c2.chat.completions.create(top_logprobs=101, **kw)
            raise AssertionError("top_logprobs 101 accepted under --max-logprobs 100")
        except openai.BadRequestError as e:
            assert e.status_code == 400 and e.param == "top_logprobs", e
            assert "max allowed: 100" in str(e), e
        ids = d2.json("POST", "/tokenize", {"prompt": "The quick brown fox jumps",
                                            "add_special_tokens": False})["tokens"]
        ref = {"plp": d2.json("POST", "/v1/completions",
                              {"model": MODEL, "prompt": ids, "max_tokens": 1,
                               "prompt_logprobs": 100})["choices"][0]["prompt_logprobs"],
               "chat": [[[(t.token, t.logprob) for t in c.top_logprobs]
                         for c in ch.logprobs.content]
                        for ch in c2.chat.completions.create(top_logprobs=50, n=2, seed=7,
                                                             **dict(kw, temperature=1)).choices]}
        d2.wait_idle()
    finally:
        assert d2.stop() == 0, d2.logtext()
    d3 = Daemon(INFERD, args=["--max-logprobs", "-1"],
                env={"INFERD_TEST_FRAME_BUDGET": "1000"})
    try:
        c3 = openai_client(d3.sock)
        split = d3.json("POST", "/v1/completions", {"model": MODEL, "prompt": ids, "max_tokens": 1,
                                                    "prompt_logprobs": 100})
        assert split["choices"][0]["prompt_logprobs"] == ref["plp"]
        chat = [[[(t.token, t.logprob) for t in c.top_logprobs] for c in ch.logprobs.content]
                for ch in c3.chat.completions.create(top_logprobs=50, n=2, seed=7,
                                                     **dict(kw, temperature=1)).choices]
        assert chat == ref["chat"]
        ids = d3.json("POST", "/tokenize", {"prompt": "The quick brown fox",
                                            "add_special_tokens": False})["tokens"]
        base = {"model": MODEL, "prompt": ids, "max_tokens": 1}
        r = d3.json("POST", "/v1/completions", dict(base, prompt_logprobs=1000))
        plp = r["choices"][0]["prompt_logprobs"]
        assert plp[0] is None and len(plp) == len(ids)
        for k in range(1, len(ids)):
            alts = plp[k]
            # the 1000 most probable, plus the prompt token when it is not among them
            assert len(alts) in (1000, 1001) and str(ids[k]) in alts, (k, len(alts))
            lps = [v["logprob"] for v in alts.values()]
            assert all(x <= 0 for x in lps) and min(v["rank"] for v in alts.values()) == 1
        r = d3.json("POST", "/v1/completions", dict(base, prompt=ids[:2], prompt_logprobs=-1))
        vocab = len(r["choices"][0]["prompt_logprobs"][1])
        assert vocab >= 49152, vocab  # SmolLM2's 49152 rows
        err = d3.json("POST", "/v1/completions", dict(base, prompt_logprobs=vocab + 1),
                      expect=400)["error"]
        assert err["param"] == "prompt_logprobs" and \
            "max allowed: %d" % vocab in err["message"], err
        d3.wait_idle()
    finally:
        assert d3.stop() == 0, d3.logtext()


class SSEReader(threading.Thread):
    """POSTs a streamed request on its own connection and collects its events (parsed
    JSON, "[DONE]" as the string) as they arrive."""

    def __init__(self, sock, path, body):
        super().__init__(daemon=True)
        self.sock, self.path, self.body = sock, path, body
        self.events, self.error = [], None
        self.lock = threading.Lock()

    def run(self):
        c = UnixHTTPConnection(self.sock, timeout=300)
        try:
            c.request("POST", self.path, body=json.dumps(self.body),
                      headers={"Content-Type": "application/json"})
            r = c.getresponse()
            assert r.status == 200, (r.status, r.read()[:300])
            for line in r:
                if not line.startswith(b"data: "):
                    continue
                data = line[6:].strip()
                ev = "[DONE]" if data == b"[DONE]" else json.loads(data)
                with self.lock:
                    self.events.append(ev)
                if ev == "[DONE]":
                    break
        except Exception as e:  # noqa: BLE001 (reported by the test)
            self.error = e
        finally:
            c.close()

    def snapshot(self):
        with self.lock:
            return list(self.events)


def _lp_chunks(events):
    return [e for e in events
            if e != "[DONE]" and e.get("choices") and e["choices"][0]["logprobs"]]


def test_stream_vocabulary_logprobs():
    """top_logprobs -1 streamed (~3 MB a token's chunk on SmolLM2's 49152-token vocabulary):
    the chunk is written on the router's thread pool. With the INFERD_TEST_CHUNK_GATE hook
    the job writing it waits for a file: while it waits (no logprobs chunk has reached the
    big stream), a second client's stream runs to its [DONE] — the loop would be stuck in
    the job were the chunk written on it, so this is not a timing assertion. Then the big
    stream's logprobs equal the non-streamed answer's, in order; a worker SIGKILLed while
    such a stream runs is resumed with no gap or duplicate; completions echo + logprobs -1
    (the prompt's rows written by the job too) streamed equal non-streamed."""
    hooks = os.environ.get("INFERD_TEST_HOOKS") == "1"
    tmp = tempfile.mkdtemp(prefix="stream-lp-")
    gate = os.path.join(tmp, "gate")
    # INFERD_TEST_LP_OFF_LOOP: the daemon aborts if its loop decodes a token's 49152
    # alternatives (they are decoded by the chunk / response jobs on the pool)
    d = Daemon(INFERD, args=["--max-logprobs", "-1", "--output-buffer-bytes", "1G"],
               env={"INFERD_TEST_CHUNK_GATE": gate, "INFERD_TEST_LP_OFF_LOOP": "1"}
               if hooks else None)
    big = None
    try:
        # sanitized: 2 tokens (each ~3 MB of JSON, slow under ASan); the gate still holds
        # the first chunk and the SIGKILL still lands before the second token is written
        ntok = 2 if SANITIZED else 4
        body = {"model": MODEL, "messages": MSGS, "max_tokens": ntok, "temperature": 0,
                "logprobs": True, "top_logprobs": -1}
        ref = d.json("POST", "/v1/chat/completions", body)["choices"][0]["logprobs"]["content"]
        assert len(ref) == ntok and all(len(t["top_logprobs"]) >= 49152 for t in ref), \
            [len(t["top_logprobs"]) for t in ref]
        big = SSEReader(d.sock, "/v1/chat/completions", dict(body, stream=True))
        big.start()
        if hooks:
            t0 = time.time()
            while not os.path.exists(gate + ".started"):
                assert time.time() - t0 < 120 * SCALE, "no chunk job started:\n" + d.logtext()
                assert big.is_alive(), big.error
                time.sleep(0.02)
            small = SSEReader(d.sock, "/v1/chat/completions",
                              {"model": MODEL, "messages": MSGS, "max_tokens": 8,
                               "temperature": 0, "stream": True})
            small.start()
            small.join(120 * SCALE)
            assert not small.is_alive() and small.error is None, \
                ("the small stream did not end while a large chunk was being written",
                 small.error, d.logtext())
            ev = small.snapshot()
            assert ev[-1] == "[DONE]" and ev[-2]["choices"][0]["finish_reason"] == "length", \
                ev[-2:]
            # structural: the big stream's first logprobs chunk is still held in its job
            assert _lp_chunks(big.snapshot()) == [], "the gated chunk was sent"
            open(gate, "w").close()
        big.join(300 * SCALE)
        assert not big.is_alive() and big.error is None, (big.error, d.logtext())
        events = big.snapshot()
        assert events[-1] == "[DONE]", events[-1:]
        got = [t for e in _lp_chunks(events) for t in e["choices"][0]["logprobs"]["content"]]
        assert len(got) == len(ref), (len(got), len(ref))
        for a, b in zip(got, ref):
            assert a == b, (a["token"], b["token"], a["logprob"], b["logprob"])
        # the worker SIGKILLed once the stream's first logprobs chunk is out (chunks of it
        # may wait in a job): resumed, it goes on with no gap and no duplicate; the resumed
        # rows are recomputed (a prefill where they were decode steps), so logprobs within
        # 1e-4, each token's alternatives compared as sorted values
        victim = d.worker_pids()[0]
        if hooks:  # re-armed: the stream's first chunk job waits again
            os.remove(gate)
            os.remove(gate + ".started")
        r = SSEReader(d.sock, "/v1/chat/completions", dict(body, stream=True))
        r.start()
        t0 = time.time()
        while not (os.path.exists(gate + ".started") if hooks else _lp_chunks(r.snapshot())):
            assert time.time() - t0 < 120 * SCALE and r.is_alive(), (r.error, d.logtext())
            time.sleep(0.005)
        os.kill(victim, signal.SIGKILL)
        if hooks:
            open(gate, "w").close()
        r.join(300 * SCALE)
        assert not r.is_alive() and r.error is None, (r.error, d.logtext())
        assert r.snapshot()[-1] == "[DONE]"
        got = [t for e in _lp_chunks(r.snapshot())
               for t in e["choices"][0]["logprobs"]["content"]]
        assert [t["token"] for t in got] == [t["token"] for t in ref]
        for a, b in zip(got, ref):
            assert abs(a["logprob"] - b["logprob"]) < 1e-4, \
                (a["token"], a["logprob"], b["logprob"])
            la = sorted(x["logprob"] for x in a["top_logprobs"])
            lb = sorted(x["logprob"] for x in b["top_logprobs"])
            assert len(la) == len(lb) and max(abs(x - y) for x, y in zip(la, lb)) < 1e-4
        print("     resumed after the worker's SIGKILL: %d sequence(s)"
              % d.wait_metric("inferd_redispatched_sequences_total", lambda v: True))
        # completions: echo + logprobs -1 (the prompt's rows), offsets across chunks
        ids = d.json("POST", "/tokenize", {"prompt": "The quick brown",
                                           "add_special_tokens": False})["tokens"]
        cb = {"model": MODEL, "prompt": ids, "max_tokens": 2, "temperature": 0,
              "logprobs": -1, "echo": True}
        cref = d.json("POST", "/v1/completions", cb)["choices"][0]["logprobs"]
        r = SSEReader(d.sock, "/v1/completions", dict(cb, stream=True))
        r.run()
        assert r.error is None, r.error
        cols = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
        for e in _lp_chunks(r.snapshot()):
            for k in cols:
                cols[k] += e["choices"][0]["logprobs"][k]
        assert len(cols["tokens"]) == len(ids) + 2, cols["tokens"]
        for k in cols:
            assert cols[k] == cref[k], k
        # a dict keyed by token text: pieces with the same text (partial UTF-8) merge
        assert len(cols["top_logprobs"][1]) > 10000, len(cols["top_logprobs"][1])
        d.wait_idle()
    finally:
        if hooks:
            open(gate, "w").close()  # never leave a job waiting on a failure
        rc = d.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    assert rc == 0, d.logtext()


def test_logprob_decode_off_loop():
    """A token's alternatives past 20 reach the router undecoded (ids and logprobs) and are
    decoded — each id's string looked up — by the job that writes their chunk or the
    response, on the thread pool when large. With the INFERD_TEST_LP_OFF_LOOP hook the
    daemon aborts when its loop decodes a token with more than 4096 alternatives (the
    vocabulary-sized chat and echo cases run under it in test_stream_vocabulary_logprobs);
    here completions logprobs -1 not streamed and logprob_token_ids of 5000 ids (streamed
    and not) run and the answers hold every alternative, in order: were any decoded on the
    loop, the daemon would die and this test fail."""
    if os.environ.get("INFERD_TEST_HOOKS") != "1":
        print("     skipped: a build without INFERD_TEST_HOOKS")
        return
    d = Daemon(INFERD, args=["--max-logprobs", "-1", "--output-buffer-bytes", "1G"],
               env={"INFERD_TEST_LP_OFF_LOOP": "1"})
    try:
        # completions without echo, not streamed: its answer's size estimate counts the
        # undecoded alternatives (the response is written on the pool)
        ids = d.json("POST", "/tokenize", {"prompt": "The quick brown",
                                           "add_special_tokens": False})["tokens"]
        cb = {"model": MODEL, "prompt": ids, "max_tokens": 1, "temperature": 0, "logprobs": -1}
        c = d.json("POST", "/v1/completions", cb)["choices"][0]["logprobs"]
        assert len(c["tokens"]) == 1 and len(c["top_logprobs"][0]) > 10000
        # (a dict keyed by token text: pieces with the same text merge, so no order check)
        assert all(v <= 0 for v in c["top_logprobs"][0].values())
        # logprob_token_ids past the loop's bound: the sampled token, then the 5000 ids,
        # streamed and not (top_logprobs -1 streamed / not: test_stream_vocabulary_logprobs)
        lpids = list(range(7, 5007))
        body = {"model": MODEL, "messages": MSGS, "max_tokens": 2, "temperature": 0,
                "logprobs": True, "logprob_token_ids": lpids, "return_tokens_as_token_ids": True}
        e = d.json("POST", "/v1/chat/completions", body)["choices"][0]["logprobs"]["content"]
        assert len(e) == 2
        for t in e:
            want = [t["token"]] + ["token_id:%d" % i for i in lpids
                                   if "token_id:%d" % i != t["token"]]
            assert [a["token"] for a in t["top_logprobs"]] == want
        r = SSEReader(d.sock, "/v1/chat/completions", dict(body, stream=True))
        r.run()
        assert r.error is None and r.snapshot()[-1] == "[DONE]", r.error
        got = [t for x in _lp_chunks(r.snapshot()) for t in x["choices"][0]["logprobs"]["content"]]
        assert got == e
        d.wait_idle()
    finally:
        rc = d.stop()
    assert rc == 0, d.logtext()


def _byte_alphabet():
    """GPT-2's byte-level alphabet, inverted: a vocabulary piece's character -> its byte."""
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1))
          + list(range(ord("\u00ae"), ord("\u00ff") + 1)))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def test_prompt_logprob_decode_off_loop():
    """vLLM's prompt_logprobs (and completions echo + logprobs) reach the router as ids,
    logprobs and ranks; the rows' strings (decoded_token, the echo form's tokens) are looked
    up by the job that writes the response or the echo chunk, on the thread pool when many.
    With the INFERD_TEST_LP_OFF_LOOP hook the daemon aborts once its loop has looked up more
    than 4096 strings of one prompt's rows; a ~280-token prompt at prompt_logprobs 32 has
    ~9k. Completions and chat not streamed, completions echo + logprobs 20 (n = 2) streamed
    and not, and with return_tokens_as_token_ids: every row is there; each prompt token's
    string is the bytes of its vocabulary piece (/tokenize's token_strs), a sample of the
    alternatives' strings their /detokenize, one id one string throughout; the streamed echo
    equals the non-streamed one."""
    if os.environ.get("INFERD_TEST_HOOKS") != "1":
        print("     skipped: a build without INFERD_TEST_HOOKS")
        return
    import random
    d = Daemon(INFERD, args=["--max-logprobs", "64"], env={"INFERD_TEST_LP_OFF_LOOP": "1"})
    try:
        words = ("river stone light garden morning paper silver window quiet number table "
                 "music forest bridge cloud winter market orange letter yellow").split()
        rng = random.Random(29)
        text = " ".join(rng.choice(words) + ("." if i % 9 == 8 else "") for i in range(250))
        tk = d.json("POST", "/tokenize", {"prompt": text, "add_special_tokens": False,
                                          "return_token_strs": True})
        ids, pieces = tk["tokens"], tk["token_strs"]
        # ~280 tokens: ~9,100 strings at k = 32, ~6,100 in the echo form at 20 (the
        # hook's bound is 4096); longer prompts cost seconds each on a CPU worker
        assert 200 <= len(ids) <= 600, len(ids)
        inv = _byte_alphabet()
        strs = {}  # id -> its string, wherever it appears

        def note(i, s):
            assert strs.setdefault(i, s) == s, (i, strs[i], s)

        def check_rows(plp, prompt_ids, k):
            assert len(plp) == len(prompt_ids) and plp[0] is None, len(plp)
            for pos in range(1, len(prompt_ids)):
                row = plp[pos]
                tid = str(prompt_ids[pos])
                assert tid in row and len(row) in (k, k + 1), (pos, len(row))
                alts = sorted(v["rank"] for t, v in row.items() if t != tid or len(row) == k)
                assert alts[-1] <= k and row[tid]["rank"] >= 1, (pos, row[tid])
                for t, v in row.items():
                    assert v["logprob"] <= 0
                    note(int(t), v["decoded_token"])

        # completions, not streamed
        K = 32
        r = d.json("POST", "/v1/completions", {"model": MODEL, "prompt": ids, "max_tokens": 1,
                                               "temperature": 0, "prompt_logprobs": K})
        plp = r["choices"][0]["prompt_logprobs"]
        check_rows(plp, ids, K)
        for i, piece in zip(ids, pieces):
            raw = bytes(inv[ch] for ch in piece)
            try:
                want = raw.decode("utf-8")
            except UnicodeDecodeError:
                continue
            assert strs.get(i, want) == want, (i, piece, strs.get(i))
        sample = rng.sample(sorted(strs), 100)
        for i in sample:
            t = detok_on(d, [i])
            if "\ufffd" not in t:
                assert strs[i] == t, (i, strs[i], t)
        # chat, not streamed: the templated prompt's rows, once at the top level
        msgs = [{"role": "user", "content": text}]
        cids = d.json("POST", "/tokenize", {"messages": msgs})["tokens"]
        c = d.json("POST", "/v1/chat/completions", {"model": MODEL, "messages": msgs,
                                                    "max_tokens": 1, "temperature": 0,
                                                    "prompt_logprobs": K})
        check_rows(c["prompt_logprobs"], cids, K)
        # completions echo + logprobs, n = 2: not streamed, then streamed (the echo chunk
        # written by the stream's chunk job), the same columns
        eb = {"model": MODEL, "prompt": ids, "max_tokens": 2, "temperature": 0, "n": 2,
              "echo": True, "logprobs": 20}
        e = d.json("POST", "/v1/completions", eb)
        for ch in e["choices"]:
            lp = ch["logprobs"]
            assert lp["tokens"][:len(ids)] == [strs[i] for i in ids]
            assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
            for pos in range(1, len(ids)):
                row = {v["decoded_token"] for v in plp[pos].values()}
                assert set(lp["top_logprobs"][pos]) <= row, pos
            assert ch["prompt_logprobs"] is not None and len(ch["prompt_logprobs"]) == len(ids)
        sr = SSEReader(d.sock, "/v1/completions", dict(eb, stream=True))
        sr.run()
        assert sr.error is None and sr.snapshot()[-1] == "[DONE]", sr.error
        cols = {0: {}, 1: {}}
        for ev in _lp_chunks(sr.snapshot()):
            for ch in ev["choices"]:
                for key, v in ch["logprobs"].items():
                    cols[ch["index"]].setdefault(key, []).extend(v)
        for ch in e["choices"]:
            for key in ("tokens", "token_logprobs", "top_logprobs", "text_offset"):
                assert cols[ch["index"]][key] == ch["logprobs"][key], (ch["index"], key)
        # return_tokens_as_token_ids: the echo form's tokens and alternatives as ids
        t = d.json("POST", "/v1/completions",
                   dict(eb, n=1, max_tokens=1, return_tokens_as_token_ids=True))
        lp = t["choices"][0]["logprobs"]
        assert lp["tokens"][:len(ids)] == ["token_id:%d" % i for i in ids]
        for pos in range(1, len(ids)):
            assert {"token_id:" + x for x in plp[pos]} >= set(lp["top_logprobs"][pos]), pos
        d.wait_idle()
    finally:
        rc = d.stop()
    assert rc == 0, d.logtext()


def test_stream_waiting_chunks_bounded():
    """The chunks waiting behind one written on the thread pool are bounded by
    output_buffer_bytes (4 MiB by default): with that job held (INFERD_TEST_CHUNK_GATE), a
    top_logprobs -1 stream (~1 MB a token at least) passes the bound within a few tokens;
    the router releases its sequence then, and once the held chunk is out ends the stream
    with an error event naming output_buffer_bytes and [DONE]; no block stays held."""
    if os.environ.get("INFERD_TEST_HOOKS") != "1":
        print("     SKIPPED: the daemon was built without -DINFERD_TEST_HOOKS=ON", flush=True)
        return
    tmp = tempfile.mkdtemp(prefix="stream-lp-")
    gate = os.path.join(tmp, "gate")
    d = Daemon(INFERD, args=["--max-logprobs", "-1"], env={"INFERD_TEST_CHUNK_GATE": gate})
    try:
        r = SSEReader(d.sock, "/v1/chat/completions",
                      {"model": MODEL, "messages": MSGS, "max_tokens": 64, "temperature": 0,
                       "ignore_eos": True, "logprobs": True, "top_logprobs": -1,
                       "stream": True})
        r.start()
        t0 = time.time()
        while "past output_buffer_bytes" not in d.logtext(tail=None):
            assert time.time() - t0 < 120 * SCALE and r.is_alive(), (r.error, d.logtext())
            time.sleep(0.05)
        assert _lp_chunks(r.snapshot()) == []  # the first chunk is still held
        d.wait_idle()  # its sequence released at once, while the job still waits
        open(gate, "w").close()
        r.join(120 * SCALE)
        assert not r.is_alive() and r.error is None, r.error
        ev = r.snapshot()
        assert ev[-1] == "[DONE]" and "output_buffer_bytes" in ev[-2]["error"]["message"], \
            ev[-2:]
        got = [t for e in _lp_chunks(ev) for t in e["choices"][0]["logprobs"]["content"]]
        assert 1 <= len(got) < 64, len(got)
    finally:
        open(gate, "w").close()
        rc = d.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    assert rc == 0, d.logtext()


if __name__ == "__main__":
    sys.exit(serve_and_run(globals(), INFERD))
