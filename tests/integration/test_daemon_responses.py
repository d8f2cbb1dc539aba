"""POST /v1/responses and the vLLM parameters added with it, through the real daemon and
the official openai package (label model): client.responses.create (text and items,
instructions, max_output_tokens, greedy text equal to the chat endpoint's), streaming with
stream=True (the typed events, in order) and with the SDK's client.responses.stream helper
(its accumulated final response), function tools with tool_choice required, tool results
sent back as items, refused server-side features (conversation); background responses
(client.responses.create(background=True), retrieve polling to completed, cancel, the
responses_background_max cap's 429, curl); reasoning (the effort reaching the template as
reasoning_effort, reasoning items replayed as reasoning_content or dropped); the
Responses store: store (default true), client.responses.retrieve / delete, 404s for unknown
ids, previous_response_id continuing a stored conversation (its prompt equal to the chat
request it means, counted by /tokenize), LRU eviction under --responses-store-entries;
/tokenize with chat fields equal to the chat's usage.prompt_tokens; vLLM's min_tokens (no EOS
and no stop string before it), include_stop_str_in_output (the matched stop string kept or
not, streamed too) and stream_options.continuous_usage_stats; a Jinja template that raises gives a 400 with its
own message (chat and /tokenize); chat_template_kwargs, documents, continue_final_message
and chat echo.

Usage: test_daemon_responses.py INFERD   (run by the venv's python: $INFERD_PYTHON)
"""
import json
import os
import signal
import sys
import tempfile
import time
from typing import Literal

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_daemon_util import Daemon, openai_client, serve_and_run, skip  # noqa: E402

try:
    import openai
    import pydantic
except ImportError as e:  # pragma: no cover
    skip("openai/pydantic missing (%s): run deploy/install-deps.sh" % e)

INFERD = sys.argv[1] if len(sys.argv) > 1 else "inferd"
D = None
C = None
MODEL = "SmolLM2-135M-Instruct.Q4_1"
SANITIZED = bool(os.environ.get("INFERD_TEST_SANITIZED"))
TOOLS = [{"type": "function", "name": "get_weather", "description": "Weather in a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                         "required": ["city"]}}]


def test_create_text_matches_chat():
    r = C.responses.create(model=MODEL, input="Name a color.", instructions="Be brief.",
                           max_output_tokens=12, temperature=0)
    assert r.object == "response" and r.id.startswith("resp_"), r
    assert r.status in ("completed", "incomplete") and r.output_text, r
    assert r.output[0].type == "message" and r.output[0].role == "assistant"
    assert r.usage.input_tokens > 5 and 1 <= r.usage.output_tokens <= 12
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    assert r.instructions == "Be brief." and r.max_output_tokens == 12 and r.store is True
    if r.status == "incomplete":
        assert r.incomplete_details.reason == "max_output_tokens"
    chat = C.chat.completions.create(model=MODEL, max_tokens=12, temperature=0, messages=[
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a color."}])
    assert chat.choices[0].message.content == r.output_text, (chat, r.output_text)
    assert chat.usage.prompt_tokens == r.usage.input_tokens
    # input items with text parts, an assistant turn, and the developer role
    r2 = C.responses.create(model=MODEL, max_output_tokens=8, temperature=0, input=[
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Hello!"}]},
        {"type": "message", "role": "user", "content": "Name a color."}])
    assert r2.output_text and r2.usage.input_tokens > r.usage.input_tokens
    D.wait_idle()


def test_stream_events():
    ref = C.responses.create(model=MODEL, input="Count to five.", max_output_tokens=16,
                             temperature=0)
    types, text, done_text, final = [], "", None, None
    for ev in C.responses.create(model=MODEL, input="Count to five.", max_output_tokens=16,
                                 temperature=0, stream=True):
        types.append(ev.type)
        assert ev.sequence_number == len(types) - 1
        if ev.type == "response.output_text.delta":
            text += ev.delta
        elif ev.type == "response.output_text.done":
            done_text = ev.text
        elif ev.type in ("response.completed", "response.incomplete"):
            final = ev.response
    assert types[:4] == ["response.created", "response.in_progress",
                         "response.output_item.added", "response.content_part.added"], types
    assert types[-4:-1] == ["response.output_text.done", "response.content_part.done",
                            "response.output_item.done"], types
    assert types[-1] == ("response.completed" if ref.status == "completed"
                         else "response.incomplete"), (types[-1], ref.status)
    assert text == done_text == ref.output_text, (text, done_text, ref.output_text)
    assert final.output[0].content[0].text == text and final.usage.output_tokens >= 1
    D.wait_idle()


class Verdict(pydantic.BaseModel):
    answer: Literal["yes", "no"]
    sure: bool


def test_stream_helper_and_parse():
    # the SDK's own accumulator (strict about ids and event order), over a schema the
    # grammar forces to complete
    schema = {"type": "object", "properties": {"answer": {"enum": ["yes", "no"]},
                                               "sure": {"type": "boolean"}},
              "required": ["answer", "sure"], "additionalProperties": False}
    with C.responses.stream(model=MODEL, input="Is water wet? Answer as JSON.",
                            max_output_tokens=60, temperature=0,
                            text={"format": {"type": "json_schema", "name": "v",
                                             "schema": schema, "strict": True}}) as s:
        deltas = "".join(ev.delta for ev in s if ev.type == "response.output_text.delta")
        final = s.get_final_response()
    doc = json.loads(final.output_text)
    assert deltas == final.output_text and doc["answer"] in ("yes", "no"), final
    # responses.parse with a pydantic model: the SDK derives the schema and parses
    p = C.responses.parse(model=MODEL, input="Is the sky green? Reply as JSON.",
                          text_format=Verdict, max_output_tokens=60, temperature=0)
    assert isinstance(p.output_parsed, Verdict), p
    D.wait_idle()


def test_function_tools_round_trip():
    r = C.responses.create(model=MODEL, input="What is the weather in Paris?", tools=TOOLS,
                           tool_choice="required", parallel_tool_calls=False,
                           max_output_tokens=80, temperature=0)
    calls = [o for o in r.output if o.type == "function_call"]
    assert calls and calls[0].name == "get_weather", r.output
    args = json.loads(calls[0].arguments)
    assert isinstance(args.get("city"), str), args
    assert calls[0].call_id.startswith("call_") and calls[0].id.startswith("fc_")
    # streamed: the same call as events
    types, argtext = [], ""
    for ev in C.responses.create(model=MODEL, input="What is the weather in Paris?",
                                 tools=TOOLS, tool_choice={"type": "function",
                                                           "name": "get_weather"},
                                 max_output_tokens=80, temperature=0, stream=True):
        types.append(ev.type)
        if ev.type == "response.function_call_arguments.done":
            argtext = ev.arguments
    assert "response.function_call_arguments.delta" in types and types[-1] == \
        "response.completed", types
    assert isinstance(json.loads(argtext).get("city"), str)
    # the call and its result sent back as input items
    back = C.responses.create(model=MODEL, tools=TOOLS, max_output_tokens=16, temperature=0,
                              input=[{"role": "user", "content": "Weather in Paris?"},
                                     {"type": "function_call", "call_id": calls[0].call_id,
                                      "name": "get_weather", "arguments": calls[0].arguments},
                                     {"type": "function_call_output",
                                      "call_id": calls[0].call_id, "output": "sunny, 21 C"}])
    assert back.output and back.usage.input_tokens > r.usage.input_tokens
    if SANITIZED:
        return
    # the same via previous_response_id: the stored call, then its output
    cont = C.responses.create(model=MODEL, tools=TOOLS, max_output_tokens=2, temperature=0,
                              previous_response_id=r.id,
                              input=[{"type": "function_call_output",
                                      "call_id": calls[0].call_id, "output": "sunny, 21 C"}])
    want = D.json("POST", "/tokenize", {"tools": CHAT_TOOLS, "messages": [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": c.call_id, "type": "function",
             "function": {"name": c.name, "arguments": c.arguments}} for c in calls]},
        {"role": "tool", "tool_call_id": calls[0].call_id, "content": "sunny, 21 C"}]})
    assert cont.usage.input_tokens == want["count"], (cont.usage, want["count"])
    D.wait_idle()


def test_required_calls_cut_by_length():
    # parallel calls allowed: this tiny model repeats its call until max_tokens; the
    # whole calls come back (finish "length"), not the cut JSON array as content
    tools = [{"type": "function", "function": {
        "name": "add", "description": "Adds two integers",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"},
                                                        "b": {"type": "integer"}},
                       "required": ["a", "b"]}}}]
    r = C.chat.completions.create(model=MODEL, max_tokens=64, temperature=0, tools=tools,
                                  tool_choice="required",
                                  messages=[{"role": "user", "content": "Add 2 and 3."}])
    ch = r.choices[0]
    if ch.finish_reason == "tool_calls":
        print("     (the model closed its array: nothing was cut)")
    else:
        assert ch.finish_reason == "length", ch
    assert ch.message.tool_calls and not ch.message.content, ch
    for tc in ch.message.tool_calls:
        assert tc.function.name == "add" and set(json.loads(tc.function.arguments)) == {"a", "b"}
    D.wait_idle()


def test_refused_features():
    for kw, param in [({"background": True, "store": False}, "background"),
                      ({"background": "yes"}, "background"),
                      ({"reasoning": {"effort": "huge"}}, "reasoning.effort"),
                      ({"reasoning": {"summary": 3}}, "reasoning.summary"),
                      ({"reasoning": "high"}, "reasoning"),
                      ({"input": [{"type": "reasoning", "summary": [],
                                   "encrypted_content": "gAAA"}]}, "input[0].encrypted_content"),
                      ({"input": [{"type": "reasoning", "content": [{"text": 1}]}]},
                       "input[0].content[0].text"),
                      ({"conversation": "conv_1"}, "conversation"),
                      ({"previous_response_id": 7}, "previous_response_id"),
                      ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
                      ({"max_output_tokens": 0}, "max_output_tokens")]:
        try:
            C.responses.create(**dict({"model": MODEL, "input": "x"}, **kw))
            raise AssertionError("accepted: %r" % kw)
        except openai.BadRequestError as e:
            assert e.param == param, (e.param, param, str(e))


def not_found(fn, *args, param="response_id", **kw):
    try:
        fn(*args, **kw)
    except openai.NotFoundError as e:
        assert e.status_code == 404 and e.body["type"] == "invalid_request_error", e.body
        assert e.param == param and "not found" in e.body["message"], e.body
        return
    raise AssertionError("found: %r %r" % (args, kw))


def test_store_retrieve_delete():
    r = C.responses.create(model=MODEL, input="Name a color.", instructions="Be brief.",
                           max_output_tokens=4, temperature=0)  # store: true by default
    assert r.store is True and r.previous_response_id is None, r
    got = C.responses.retrieve(r.id)
    assert got.id == r.id and got.output_text == r.output_text and got.usage == r.usage, got
    assert got.model_dump() == r.model_dump()
    off = C.responses.create(model=MODEL, input="x", max_output_tokens=1, store=False)
    assert off.store is False
    not_found(C.responses.retrieve, off.id)
    not_found(C.responses.retrieve, "resp_0123456789")
    if SANITIZED:  # the ASan build: retrieve, 404s and delete only
        assert C.responses.delete(r.id) is None
        not_found(C.responses.retrieve, r.id)
        return
    # streamed: kept as its response.completed carried it
    final = None
    for ev in C.responses.create(model=MODEL, input="Count to three.", max_output_tokens=4,
                                 temperature=0, stream=True, store=True):
        if ev.type in ("response.completed", "response.incomplete"):
            final = ev.response
    assert final.store is True and C.responses.retrieve(final.id).model_dump() == \
        final.model_dump()
    # previous_response_id: the stored conversation (without its instructions) + the input
    nxt = C.responses.create(model=MODEL, input="And another?", previous_response_id=r.id,
                             max_output_tokens=2, temperature=0)
    assert nxt.previous_response_id == r.id and nxt.store is True, nxt
    conv = [{"role": "user", "content": "Name a color."},
            {"role": "assistant", "content": r.output_text},
            {"role": "user", "content": "And another?"}]
    want = D.json("POST", "/tokenize", {"messages": conv})["count"]
    assert nxt.usage.input_tokens == want, (nxt.usage, want)
    third = C.responses.create(model=MODEL, input="Once more.", previous_response_id=nxt.id,
                               max_output_tokens=1, instructions="Be terse.")
    conv = [{"role": "system", "content": "Be terse."}] + conv + [
        {"role": "assistant", "content": nxt.output_text}, {"role": "user", "content": "Once more."}]
    want = D.json("POST", "/tokenize", {"messages": conv})["count"]
    assert third.usage.input_tokens == want, (third.usage, want)
    not_found(C.responses.create, model=MODEL, input="x", previous_response_id="resp_nope",
              param="previous_response_id")
    # delete: gone for retrieve, delete and previous_response_id alike
    assert C.responses.delete(r.id) is None
    not_found(C.responses.retrieve, r.id)
    not_found(C.responses.delete, r.id)
    not_found(C.responses.create, model=MODEL, input="x", previous_response_id=r.id,
              param="previous_response_id")
    code, body = D.request("POST", "/v1/responses/" + nxt.id, {})
    assert code == 405, (code, body)
    D.wait_idle()


def test_min_tokens():
    q = [{"role": "user", "content": "What is 2+2? Answer with a number only."}]
    base = C.chat.completions.create(model=MODEL, messages=q, max_tokens=40, temperature=0)
    n0 = base.usage.completion_tokens
    assert base.choices[0].finish_reason == "stop" and n0 < 20, base
    r = C.chat.completions.create(model=MODEL, messages=q, max_tokens=40, temperature=0,
                                  extra_body={"min_tokens": n0 + 6})
    assert r.usage.completion_tokens >= n0 + 6, r.usage
    assert r.choices[0].message.content.startswith(base.choices[0].message.content), r
    # stop strings are not matched before min_tokens either (vLLM's rule)
    s = C.chat.completions.create(model=MODEL, messages=q, max_tokens=40, temperature=0,
                                  stop=[" "], extra_body={"min_tokens": 4})
    assert s.usage.completion_tokens >= 4 and " " in s.choices[0].message.content, s
    # completions, streamed, and over a resumed count: the same text as unstreamed
    c = C.completions.create(model=MODEL, prompt="2+2=", max_tokens=30, temperature=0,
                             extra_body={"min_tokens": 25})
    assert c.usage.completion_tokens >= 25, c.usage
    try:
        C.chat.completions.create(model=MODEL, messages=q, max_tokens=4,
                                  extra_body={"min_tokens": 5})
        raise AssertionError("min_tokens > max_tokens accepted")
    except openai.BadRequestError as e:
        assert e.param == "min_tokens", e
    D.wait_idle()


def stop_in(text):
    """A 3-character ASCII stop string the greedy text first reaches at i >= 2: (i, stop)."""
    for i in range(2, len(text) - 3):
        s = text[i:i + 3]
        if s.strip() and s.isascii() and text.find(s) == i:
            return i, s
    raise AssertionError("no stop string in %r" % text)


def test_include_stop_str_in_output():
    kw = dict(model=MODEL, prompt="The capital of France is", max_tokens=10, temperature=0)
    base = C.completions.create(**kw).choices[0].text
    i, stop = stop_in(base)
    for keep in (False, True):
        ch = C.completions.create(**kw, stop=[stop],
                                  extra_body={"include_stop_str_in_output": keep}).choices[0]
        assert ch.finish_reason == "stop", (keep, stop, ch)
        if keep:
            assert ch.text == base[:i + 3] and ch.text.endswith(stop), (stop, base, ch.text)
        else:
            assert ch.text == base[:i] and stop not in ch.text, (stop, base, ch.text)
    # chat, streamed: the held-back stop string is sent when kept
    q = dict(model=MODEL, messages=[{"role": "user", "content": "Name three colors."}],
             max_tokens=10, temperature=0)
    base = C.chat.completions.create(**q).choices[0].message.content
    i, stop = stop_in(base)
    for keep in (False, True):
        text, finish = "", None
        for ev in C.chat.completions.create(**q, stop=[stop], stream=True,
                                            extra_body={"include_stop_str_in_output": keep}):
            for c in ev.choices:
                text += c.delta.content or ""
                finish = c.finish_reason or finish
        assert finish == "stop", (keep, stop, finish)
        assert text == base[:i + 3 if keep else i], (keep, stop, base, text)
        assert text.endswith(stop) if keep else stop not in text, (keep, stop, text)
    D.wait_idle()


def test_continuous_usage_stats():
    usages = []
    text = ""
    for ch in C.chat.completions.create(
            model=MODEL, stream=True, max_tokens=12, temperature=0,
            messages=[{"role": "user", "content": "Count to ten."}],
            stream_options={"include_usage": True}, extra_body={
                "stream_options": {"include_usage": True, "continuous_usage_stats": True}}):
        assert ch.usage is not None, ch  # on every chunk
        usages.append(ch.usage.completion_tokens)
        for c in ch.choices:
            text += c.delta.content or ""
    assert usages == sorted(usages) and usages[-1] == 12 and usages[0] <= 1, usages
    assert len(set(usages)) > 5, usages
    D.wait_idle()


def test_continue_final_message_and_echo():
    msgs = [{"role": "user", "content": "What is the capital of France?"},
            {"role": "assistant", "content": "The capital of France is"}]
    kw = dict(model=MODEL, messages=msgs, max_tokens=8, temperature=0,
              extra_body={"continue_final_message": True, "add_generation_prompt": False})
    r = C.chat.completions.create(**kw)
    cont = r.choices[0].message.content
    # the prompt ends inside the assistant turn: one more turn header would be 3+ tokens
    plain = C.chat.completions.create(model=MODEL, messages=msgs[:1], max_tokens=1)
    assert r.usage.prompt_tokens > plain.usage.prompt_tokens, (r.usage, plain.usage)
    kw["extra_body"]["echo"] = True
    e = C.chat.completions.create(**kw)
    assert e.choices[0].message.content == "The capital of France is" + cont, e
    text = "".join(ch.choices[0].delta.content or "" for ch in
                   C.chat.completions.create(stream=True, **kw) if ch.choices)
    assert text == e.choices[0].message.content, (text, e)
    for extra, param in [({"continue_final_message": True}, "continue_final_message"),
                         ({"chat_template_kwargs": {"tools": []}}, "chat_template_kwargs.tools")]:
        try:
            C.chat.completions.create(model=MODEL, messages=msgs, max_tokens=2,
                                      extra_body=extra)
            raise AssertionError("accepted: %r" % extra)
        except openai.BadRequestError as ex:
            assert ex.param == param, (ex.param, param)
    D.wait_idle()


CHAT_TOOLS = [{"type": "function", "function": {k: v for k, v in TOOLS[0].items()
                                                 if k != "type"}}]
TOOL_TURNS = [{"role": "user", "content": "Weather in Paris?"},
              {"role": "assistant", "content": None, "tool_calls": [
                  {"id": "call_1", "type": "function",
                   "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
              {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"}]


BG_MAX = 2  # --responses-background-max


def poll(rid, timeout=120):
    """client.responses.retrieve until the Response leaves queued / in_progress."""
    t0 = time.time()
    while True:
        r = C.responses.retrieve(rid)
        if r.status not in ("queued", "in_progress"):
            return r
        assert r.output == [] and r.usage is None and r.background is True, r
        assert time.time() - t0 < timeout, "still %s" % r.status
        time.sleep(0.05)


def long_background(**kw):
    """A background Response that runs until cancelled (no EOS, a long budget)."""
    return C.responses.create(model=MODEL, input="Tell a very long story.", background=True,
                              max_output_tokens=1000, extra_body={"ignore_eos": True}, **kw)


def test_background_poll_and_cancel():
    fg = C.responses.create(model=MODEL, input="Name a color.", max_output_tokens=12,
                            temperature=0, metadata={"k": "v"})
    bg = C.responses.create(model=MODEL, input="Name a color.", max_output_tokens=12,
                            temperature=0, metadata={"k": "v"}, background=True)
    assert bg.status in ("queued", "in_progress") and bg.background is True, bg
    assert bg.output == [] and bg.store is True and bg.metadata == {"k": "v"}, bg
    done = poll(bg.id)
    assert done.status == fg.status and done.output_text == fg.output_text, (done, fg)
    # the same counts (cached_tokens is the prefix cache's state, not the request's: the
    # second run may find more of its prompt cached than the first did)
    for k in ("input_tokens", "output_tokens", "total_tokens"):
        assert getattr(done.usage, k) == getattr(fg.usage, k), (k, done.usage, fg.usage)
    assert done.background is True and done.id == bg.id, done
    # a finished background Response: cancel answers it as it is (idempotent); it continues
    assert C.responses.cancel(bg.id).model_dump() == done.model_dump()
    nxt = C.responses.create(model=MODEL, input="Another?", previous_response_id=bg.id,
                             max_output_tokens=2)
    assert nxt.previous_response_id == bg.id
    # cancelled while running: its sequence released, kept as cancelled
    run = long_background()
    c1 = C.responses.cancel(run.id)
    assert c1.status == "cancelled" and c1.id == run.id and c1.output == [], c1
    assert C.responses.retrieve(run.id).status == "cancelled"
    D.wait_idle()
    assert C.responses.cancel(run.id).status == "cancelled"  # twice: the same
    assert C.responses.retrieve(run.id).status == "cancelled"
    not_found(C.responses.create, model=MODEL, input="x", previous_response_id=run.id,
              param="previous_response_id")  # nothing to continue
    # a foreground Response cannot be cancelled; unknown ids are 404 for cancel too
    try:
        C.responses.cancel(fg.id)
        raise AssertionError("cancelled a foreground Response")
    except openai.BadRequestError as e:
        assert e.param == "response_id" and "synchronous" in str(e), e.body
    not_found(C.responses.cancel, "resp_0123456789")
    # delete of a running one cancels it first
    run = long_background()
    assert C.responses.delete(run.id) is None
    not_found(C.responses.retrieve, run.id)
    D.wait_idle()


def test_background_streamed():
    """background + stream: the typed events while the client reads; a client that leaves
    does not stop it (polled to the end); a cancel ends the stream it is read from."""
    final, created = None, None
    for ev in C.responses.create(model=MODEL, input="Count to five.", max_output_tokens=8,
                                 temperature=0, stream=True, background=True):
        if ev.type == "response.created":
            created = ev.response
        if ev.type in ("response.completed", "response.incomplete"):
            final = ev.response
    assert created.background is True and created.status in ("queued", "in_progress"), created
    assert final.id == created.id and C.responses.retrieve(final.id).model_dump() == \
        final.model_dump()
    # the client reads the first event and leaves (200 tokens, 60 in the sanitized build:
    # long after it has gone)
    n_bg = 60 if SANITIZED else 200
    kw = dict(model=MODEL, input="Count to ten.", max_output_tokens=n_bg, temperature=0,
              extra_body={"ignore_eos": True})
    stream = C.responses.create(stream=True, background=True, **kw)
    first = next(iter(stream))
    stream.close()
    done = poll(first.response.id)
    assert done.status == "incomplete" and done.usage.output_tokens == n_bg, done
    with open(D.logpath, errors="replace") as f:  # the whole log (logtext: its tail)
        assert "gen %s: the client of a background Response left" % done.id in f.read()
    ref = C.responses.create(**kw)
    assert done.output_text == ref.output_text, (done.output_text, ref.output_text)
    # cancelled while its stream is read: the stream ends, the Response is kept cancelled
    stream = C.responses.create(model=MODEL, input="Tell a very long story.", stream=True,
                                background=True, max_output_tokens=1000,
                                extra_body={"ignore_eos": True})
    it = iter(stream)
    rid = next(it).response.id
    assert C.responses.cancel(rid).status == "cancelled"
    rest = [ev.type for ev in it]
    assert "response.completed" not in rest, rest
    assert C.responses.retrieve(rid).status == "cancelled"
    D.wait_idle()


def test_background_cap_and_curl():
    runs = [long_background() for _ in range(BG_MAX)]
    try:
        long_background()
        raise AssertionError("over responses_background_max accepted")
    except openai.RateLimitError as e:
        assert e.status_code == 429 and e.param == "background", e.body
        assert "responses_background_max" in e.body["message"], e.body
    for r in runs:
        assert C.responses.cancel(r.id).status == "cancelled"
    # the same with curl: create, poll, cancel (POST /v1/responses/{id}/cancel)
    code, body = D.curl("-X", "POST", "http://localhost/v1/responses", "-H",
                        "Content-Type: application/json", "-d", json.dumps(
                            {"model": MODEL, "input": "Say hi.", "background": True,
                             "max_output_tokens": 4}), expect=200)
    r = json.loads(body)
    assert r["status"] in ("queued", "in_progress") and r["background"] is True, r
    t0 = time.time()
    while r["status"] in ("queued", "in_progress"):
        assert time.time() - t0 < 60, r
        r = json.loads(D.curl("http://localhost/v1/responses/" + r["id"], expect=200)[1])
    assert r["status"] in ("completed", "incomplete") and r["output"], r
    code, body = D.curl("-X", "POST", "http://localhost/v1/responses/%s/cancel" % r["id"],
                        expect=200)
    assert json.loads(body) == r
    code, body = D.curl("http://localhost/v1/responses/%s/cancel" % r["id"], expect=405)
    # streamed retrieval (OpenAI's ?stream=true&starting_after=N) is refused, not misanswered
    code, body = D.curl("http://localhost/v1/responses/%s?starting_after=2&stream=true" % r["id"],
                        expect=400)
    assert json.loads(body)["error"]["param"] == "stream", body
    D.curl("http://localhost/v1/responses/%s?stream=false" % r["id"], expect=200)
    D.wait_idle()


REASONING_TEMPLATE = (
    "{%- if reasoning_effort is defined -%}Effort: {{ reasoning_effort }}, think hard.\n"
    "{%- endif -%}"
    "{%- for m in messages -%}<|im_start|>{{ m['role'] }}\n"
    "{%- if m['reasoning_content'] -%}<think>{{ m['reasoning_content'] }}</think>{%- endif -%}"
    "{{ m['content'] }}<|im_end|>\n{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|im_start|>assistant\n{%- endif -%}")

REPLAY = [{"role": "user", "content": "Pick a number."},
          {"type": "reasoning", "id": "rs_1", "summary": [],
           "content": [{"type": "reasoning_text", "text": "seven is a fine number " * 4}]},
          {"type": "message", "role": "assistant", "content": [
              {"type": "output_text", "text": "7"}]},
          {"role": "user", "content": "Another?"}]
NO_REASONING = [REPLAY[0], REPLAY[2], REPLAY[3]]


def test_reasoning_default_template():
    """SmolLM2's template has no place for reasoning: accepted, echoed, and dropped."""
    plain = C.responses.create(model=MODEL, input="hi", max_output_tokens=1)
    r = C.responses.create(model=MODEL, input="hi", max_output_tokens=1,
                           reasoning={"effort": "high", "summary": "auto"},
                           include=["reasoning.encrypted_content"])
    assert r.reasoning.effort == "high" and r.reasoning.summary == "auto", r.reasoning
    assert r.usage.input_tokens == plain.usage.input_tokens, (r.usage, plain.usage)
    assert plain.reasoning.effort is None
    a = C.responses.create(model=MODEL, input=REPLAY, max_output_tokens=1)
    b = C.responses.create(model=MODEL, input=NO_REASONING, max_output_tokens=1)
    assert a.usage.input_tokens == b.usage.input_tokens, (a.usage, b.usage)
    D.wait_idle()


def test_reasoning_reaches_the_template():
    with tempfile.NamedTemporaryFile("w", suffix=".jinja", delete=False) as f:
        f.write(REASONING_TEMPLATE)
    d2 = Daemon(INFERD, args=["--chat-template", f.name])
    try:
        c2 = openai_client(d2.sock)
        plain = c2.responses.create(model=MODEL, input="hi", max_output_tokens=1)
        high = c2.responses.create(model=MODEL, input="hi", max_output_tokens=1,
                                   reasoning={"effort": "high"})
        assert high.usage.input_tokens >= plain.usage.input_tokens + 5, (high.usage,
                                                                         plain.usage)
        want = d2.json("POST", "/tokenize", {"messages": [{"role": "user", "content": "hi"}],
                                             "chat_template_kwargs": {
                                                 "reasoning_effort": "high"}})["count"]
        assert high.usage.input_tokens == want, (high.usage, want)
        # the client's own chat_template_kwargs value wins
        own = "as little as you can, and then some less"
        low = c2.responses.create(model=MODEL, input="hi", max_output_tokens=1,
                                  reasoning={"effort": "high"},
                                  extra_body={"chat_template_kwargs": {"reasoning_effort": own}})
        want = d2.json("POST", "/tokenize", {"messages": [{"role": "user", "content": "hi"}],
                                             "chat_template_kwargs": {
                                                 "reasoning_effort": own}})["count"]
        assert low.usage.input_tokens == want > high.usage.input_tokens, (low.usage, want)
        # replayed reasoning goes to its assistant message as reasoning_content
        a = c2.responses.create(model=MODEL, input=REPLAY, max_output_tokens=1)
        b = c2.responses.create(model=MODEL, input=NO_REASONING, max_output_tokens=1)
        assert a.usage.input_tokens >= b.usage.input_tokens + 16, (a.usage, b.usage)
        want = d2.json("POST", "/tokenize", {"messages": [
            {"role": "user", "content": "Pick a number."},
            {"role": "assistant", "content": "7",
             "reasoning_content": "seven is a fine number " * 4},
            {"role": "user", "content": "Another?"}]})["count"]
        assert a.usage.input_tokens == want, (a.usage, want)
    finally:
        os.unlink(f.name)
        assert d2.stop() == 0


def tokenize_equals_chat(d, c, body, chat=True):
    """POST /tokenize with a chat body counts exactly the chat's usage.prompt_tokens (the
    chat request left out with chat=False: the ASan build's reduced set)."""
    t = d.json("POST", "/tokenize", body)
    if not chat:
        assert t["count"] == len(t["tokens"]), t
        return t["count"]
    extra = {k: v for k, v in body.items() if k not in ("messages", "tools", "tool_choice")}
    r = c.chat.completions.create(model=MODEL, messages=body["messages"], max_tokens=1,
                                  tools=body.get("tools", openai.NOT_GIVEN),
                                  tool_choice=body.get("tool_choice", openai.NOT_GIVEN),
                                  extra_body=extra)
    assert t["count"] == len(t["tokens"]) == r.usage.prompt_tokens, (body, t["count"], r.usage)
    return t["count"]


def test_tokenize_renders_as_chat():
    q = [{"role": "user", "content": "What is the capital of France?"}]
    # sanitized: one short body compared with the chat (a tools prompt takes ~30 s to
    # prefill in the ASan build), the rest only counted
    full = not SANITIZED
    base = tokenize_equals_chat(D, C, {"messages": q}, full)
    tools = tokenize_equals_chat(D, C, {"messages": q, "tools": CHAT_TOOLS}, full)
    assert tools > base + 20, (tools, base)  # the tool definitions are in the prompt
    assert tokenize_equals_chat(D, C, {"messages": q, "tools": CHAT_TOOLS,
                                       "tool_choice": "none"}, full) == base
    cont = q + [{"role": "assistant", "content": "The capital of France is"}]
    assert tokenize_equals_chat(D, C, {"messages": cont, "continue_final_message": True,
                                       "add_generation_prompt": False}) > base
    if not SANITIZED:
        tokenize_equals_chat(D, C, {"messages": TOOL_TURNS, "tools": CHAT_TOOLS})
        tokenize_equals_chat(D, C, {"messages": q, "add_generation_prompt": False,
                                    "chat_template_kwargs": {"x": 1}})
        assert tokenize_equals_chat(D, C, {"messages": q, "truncate_prompt_tokens": 5}) == 5
    # bad chat fields: the chat endpoint's 400, naming the field
    for extra, param in [({"continue_final_message": True}, "continue_final_message"),
                         ({"chat_template_kwargs": {"tools": []}}, "chat_template_kwargs.tools"),
                         ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
                         ({"tool_choice": "required"}, "tool_choice")]:
        code, body = D.request("POST", "/tokenize", dict({"messages": cont}, **extra))
        err = json.loads(body)["error"]
        assert code == 400 and err["param"] == param, (extra, code, body)
        try:
            C.chat.completions.create(model=MODEL, messages=cont, max_tokens=1, extra_body=extra)
            raise AssertionError("chat accepted %r" % extra)
        except openai.BadRequestError as e:
            assert e.param == param and err["message"] == e.body["message"], (e.body, err)
    D.wait_idle()


RAISING_TEMPLATE = (
    "{%- if note is defined -%}{{ note }}\n{%- endif -%}"
    "{%- if documents -%}{%- for d in documents -%}[{{ d['text'] }}]{%- endfor -%}{%- endif -%}"
    "{%- for m in messages -%}"
    "{%- if m['role'] == 'system' -%}"
    "{{ raise_exception('System messages are not allowed by this template.') }}"
    "{%- endif -%}"
    "<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|im_start|>assistant\n{%- endif -%}")


def test_template_error_is_a_400():
    with tempfile.NamedTemporaryFile("w", suffix=".jinja", delete=False) as f:
        f.write(RAISING_TEMPLATE)
    conf = f.name + ".json"
    with open(conf, "w") as cf:
        json.dump({"chat_template": f.name, "responses_store_entries": 2}, cf)
    d2 = Daemon(INFERD, args=["--config", conf])
    try:
        c2 = openai_client(d2.sock)
        ok = c2.chat.completions.create(model=MODEL, max_tokens=2,
                                        messages=[{"role": "user", "content": "hi"}])
        assert ok.choices[0].message.content is not None
        msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "hi"}]
        try:
            c2.chat.completions.create(model=MODEL, max_tokens=2, messages=msgs)
            raise AssertionError("the template's exception did not reach the client")
        except openai.BadRequestError as e:
            assert "System messages are not allowed by this template." in str(e), str(e)
            assert e.param == "messages", e
        # chat_template_kwargs reach the template as variables
        noted = c2.chat.completions.create(
            model=MODEL, max_tokens=1, messages=[{"role": "user", "content": "hi"}],
            extra_body={"chat_template_kwargs": {"note": "Note: " + "word " * 20}})
        assert noted.usage.prompt_tokens >= ok.usage.prompt_tokens + 20, (noted.usage,
                                                                           ok.usage)
        docs = c2.chat.completions.create(
            model=MODEL, max_tokens=1, messages=[{"role": "user", "content": "hi"}],
            extra_body={"documents": [{"title": "a", "text": "word " * 20},
                                      {"title": "b", "text": "more " * 10}]})
        assert docs.usage.prompt_tokens >= ok.usage.prompt_tokens + 30, (docs.usage, ok.usage)
        # the store keeps the 2 most recently used (sanitized: test_respstore's cases only)
        for _ in range(0 if SANITIZED else 1):
            ids = [c2.responses.create(model=MODEL, input="hi", max_output_tokens=1).id
                   for _ in range(2)]
            c2.responses.retrieve(ids[0])  # now the most recent: the next one evicts ids[1]
            ids.append(c2.responses.create(model=MODEL, input="hi", max_output_tokens=1).id)
            c2.responses.retrieve(ids[0])
            c2.responses.retrieve(ids[2])
            not_found(c2.responses.retrieve, ids[1])
            # reloaded with responses_store_entries 0: nothing kept or served
            with open(conf, "w") as cf:
                json.dump({"chat_template": f.name, "responses_store_entries": 0}, cf)
            d2.proc.send_signal(signal.SIGHUP)
            t0 = time.time()
            while "'responses_store_entries' changed" not in d2.logtext():
                assert time.time() - t0 < 10, "no reload logged"
                time.sleep(0.05)
            not_found(c2.responses.retrieve, ids[2])
            assert c2.responses.create(model=MODEL, input="hi", max_output_tokens=1,
                                       store=True).store is False
        # /tokenize renders the same variables
        hi = [{"role": "user", "content": "hi"}]
        plain = tokenize_equals_chat(d2, c2, {"messages": hi}, False)
        assert tokenize_equals_chat(d2, c2, {"messages": hi, "chat_template_kwargs": {
            "note": "Note: " + "w " * 9}}, not SANITIZED) >= plain + 9
        assert tokenize_equals_chat(d2, c2, {"messages": hi, "documents": [
            {"title": "a", "text": "w " * 9}]}, not SANITIZED) >= plain + 9
        code, body = d2.request("POST", "/tokenize", {"messages": msgs})
        assert code == 400 and b"System messages are not allowed" in body, (code, body)
        try:  # the Responses API renders through the same template
            c2.responses.create(model=MODEL, input="hi", instructions="S", max_output_tokens=2)
            raise AssertionError("accepted")
        except openai.BadRequestError as e:
            assert "System messages are not allowed" in str(e), str(e)
    finally:
        os.unlink(f.name)
        os.unlink(conf)
        assert d2.stop() == 0


if __name__ == "__main__":
    sys.exit(serve_and_run(globals(), INFERD,
                           args=["--responses-background-max", str(BG_MAX)]))
