"""Structured outputs and tool calling through the real daemon and the official openai
package (label model): every output must parse against its JSON Schema (checked with the
`jsonschema` package) over several schemas and seeds at temperature 1; regex / choice /
grammar constraints; chat.completions.parse with a pydantic model; tool calls with
tool_choice required and named, streamed and not; tool results sent back; unsupported
schema features refused with 400 naming the keyword.

With $INFERD_TEST_SANITIZED set (the ASan+UBSan build) each request asks for one choice
instead of 2-3: every schema, constraint kind and tool path still runs, on a third of the
generations.

Usage: test_daemon_structured.py INFERD   (run by the venv's python: $INFERD_PYTHON)
"""
import concurrent.futures
import decimal
import json
import os
import re
import sys
from typing import List, Literal

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_daemon_util import SCALE, Daemon, openai_client, serve_and_run, skip  # noqa: E402

try:
    import httpx
    import jsonschema
    import openai
    import pydantic
except ImportError as e:  # pragma: no cover
    skip("openai/httpx/jsonschema/pydantic missing (%s): run deploy/install-deps.sh" % e)

INFERD = sys.argv[1] if len(sys.argv) > 1 else "inferd"
D = None
C = None
MODEL = "SmolLM2-135M-Instruct.Q4_1"
SANITIZED = bool(os.environ.get("INFERD_TEST_SANITIZED"))
# A worker answers pings between engine steps only; the sanitized worker's prefill of three
# tool prompts at once is one step of up to ~30 s on a loaded 2-core machine, which the
# default worker_timeout (30 s) would kill — and the resumed sequences would take as long on
# the replacement, again and again. Scaled like the tests' other deadlines.
ARGS = ["--worker-timeout", str(int(30 * SCALE))] if SCALE > 1 else []


def choices(n):
    """n choices per request, 1 in the sanitized build."""
    return 1 if SANITIZED else n

SCHEMAS = [
    {"type": "object",
     "properties": {"name": {"type": "string", "maxLength": 24},
                    "age": {"type": "integer"},
                    "member": {"type": "boolean"}},
     "required": ["name", "age", "member"], "additionalProperties": False},
    {"type": "object",
     "properties": {"color": {"enum": ["red", "green", "blue"]},
                    "tags": {"type": "array", "items": {"type": "string", "maxLength": 8},
                             "minItems": 1, "maxItems": 3},
                    "score": {"type": "number"}},
     "required": ["color", "tags"]},
    {"$defs": {"pt": {"type": "object",
                      "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
                      "required": ["x", "y"]}},
     "type": "object",
     "properties": {"start": {"$ref": "#/$defs/pt"}, "end": {"$ref": "#/$defs/pt"},
                    "label": {"anyOf": [{"type": "string", "maxLength": 10}, {"type": "null"}]}},
     "required": ["start", "end", "label"]},
    {"type": "object",
     "properties": {"id": {"type": "string", "format": "uuid"},
                    "day": {"type": "string", "format": "date"},
                    "code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{2}$"}},
     "required": ["id", "day", "code"]},
    # const, and an array of objects with both bounds (also sent to /v1/completions as
    # vLLM's structured_outputs.json)
    {"type": "object",
     "properties": {"kind": {"const": "route"},
                    "stops": {"type": "array", "minItems": 1, "maxItems": 2,
                              "items": {"type": "object",
                                        "properties": {"at": {"enum": ["a", "b", "c"]},
                                                       "ok": {"type": "boolean"}},
                                        "required": ["at", "ok"],
                                        "additionalProperties": False}}},
     "required": ["kind", "stops"], "additionalProperties": False},
]


def ask(content, **kw):
    kw.setdefault("max_tokens", 300)
    return C.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": content}],
                                     **kw)


def parallel(*calls):
    """Runs the calls at once (the engine batches them); returns their results."""
    with concurrent.futures.ThreadPoolExecutor(len(calls)) as ex:
        return [f.result() for f in [ex.submit(c) for c in calls]]


def test_json_schema_outputs_validate():
    def one(i, schema):
        return ask("Describe something as JSON.", temperature=1.0, seed=100 + i, n=choices(3),
                   response_format={"type": "json_schema",
                                    "json_schema": {"name": "s%d" % i, "schema": schema,
                                                    "strict": True}})
    def completion():
        return C.completions.create(model=MODEL, prompt="A route as JSON:", max_tokens=200,
                                    temperature=1.0, seed=12, n=choices(2),
                                    extra_body={"structured_outputs": {"json": SCHEMAS[-1]}})
    *results, comp = parallel(*[lambda i=i, s=s: one(i, s) for i, s in enumerate(SCHEMAS)],
                              completion)
    n_checked = 0
    for i, (schema, r) in enumerate(zip(SCHEMAS, results)):
        for ch in r.choices:
            assert ch.finish_reason == "stop", (i, ch.finish_reason, ch.message.content)
            doc = json.loads(ch.message.content)
            jsonschema.validate(doc, schema)
            n_checked += 1
    for ch in comp.choices:
        assert ch.finish_reason == "stop", ("completion", ch.finish_reason, ch.text)
        doc = json.loads(ch.text)
        jsonschema.validate(doc, SCHEMAS[-1])
        assert doc["kind"] == "route" and 1 <= len(doc["stops"]) <= 2, doc
        n_checked += 1
    print("     %d outputs validated" % n_checked)
    D.wait_idle()


def test_json_object_and_guided_names():
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}

    def stream_schema():
        text = ""
        for chunk in C.chat.completions.create(
                model=MODEL, stream=True, max_tokens=200, temperature=1.0, seed=9,
                messages=[{"role": "user", "content": "JSON please"}],
                response_format={"type": "json_schema",
                                 "json_schema": {"name": "s", "schema": SCHEMAS[0]}}):
            for ch in chunk.choices:
                text += ch.delta.content or ""
        return text

    r_obj, r_gj, r_so, r_re, r_ch, r_gr, c_ch, streamed = parallel(
        lambda: ask("Give a JSON object about a cat.", temperature=1.0, seed=3, max_tokens=120,
                    response_format={"type": "json_object"}),
        # vLLM's names, old and new, on both endpoints
        lambda: ask("A number as JSON.", temperature=1.0, seed=4, max_tokens=60,
                    extra_body={"guided_json": schema}),
        lambda: ask("A number as JSON.", temperature=1.0, seed=4, max_tokens=60,
                    extra_body={"structured_outputs": {"json": schema}}),
        lambda: ask("Pick a phone number.", temperature=1.0, seed=5, max_tokens=30,
                    extra_body={"guided_regex": r"\(\d{3}\) \d{3}-\d{4}"}),
        lambda: ask("Is the sky blue?", temperature=1.0, seed=6, max_tokens=10,
                    extra_body={"structured_outputs": {"choice": ["yes", "no", "maybe"]}}),
        lambda: ask("Count.", temperature=1.0, seed=7, max_tokens=30,
                    extra_body={"guided_grammar": 'root ::= "1" ("," [0-9]){2,4}'}),
        lambda: C.completions.create(model=MODEL, prompt="The answer is", max_tokens=10,
                                     temperature=1.0, seed=8,
                                     extra_body={"guided_choice": ["A", "B"]}),
        stream_schema)
    ch = r_obj.choices[0]
    if ch.finish_reason == "stop":
        assert isinstance(json.loads(ch.message.content), dict), ch.message.content
    else:  # a free-form object may run long; what came must still start an object
        assert ch.message.content.startswith("{"), ch.message.content
    for r in (r_gj, r_so):
        jsonschema.validate(json.loads(r.choices[0].message.content), schema)
    assert re.fullmatch(r"\(\d{3}\) \d{3}-\d{4}", r_re.choices[0].message.content), r_re
    assert r_ch.choices[0].message.content in ("yes", "no", "maybe"), r_ch
    assert re.fullmatch(r"1(,[0-9]){2,4}", r_gr.choices[0].message.content), r_gr
    assert c_ch.choices[0].text in ("A", "B"), c_ch
    jsonschema.validate(json.loads(streamed), SCHEMAS[0])
    D.wait_idle()


class Step(pydantic.BaseModel):
    explanation: str = pydantic.Field(max_length=40)
    output: int


class Answer(pydantic.BaseModel):
    steps: List[Step] = pydantic.Field(max_length=2)
    final: Literal["yes", "no"]


def test_pydantic_parse():
    r = C.chat.completions.parse(
        model=MODEL, temperature=1.0, seed=11, n=choices(2), max_tokens=300,
        response_format=Answer,
        messages=[{"role": "user", "content": "Is 7 prime? Think in steps."}])
    for ch in r.choices:
        p = ch.message.parsed
        assert isinstance(p, Answer), r
        assert p.final in ("yes", "no")
    D.wait_idle()


TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather for a city",
        "parameters": {"type": "object",
                       "properties": {"city": {"type": "string", "maxLength": 20},
                                      "unit": {"enum": ["celsius", "fahrenheit"]}},
                       "required": ["city", "unit"]}}},
    {"type": "function", "function": {
        "name": "add", "description": "Add two integers",
        "parameters": {"type": "object",
                       "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                       "required": ["a", "b"]}}},
]
PARAMS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}


def check_calls(calls):
    assert calls, "no tool calls"
    for tc in calls:
        assert tc.type == "function" and tc.id.startswith("call_"), tc
        assert tc.function.name in PARAMS, tc
        jsonschema.validate(json.loads(tc.function.arguments), PARAMS[tc.function.name])


def test_tool_choice_required_and_named():
    msgs = [{"role": "user", "content": "What is the weather in Paris?"}]

    def stream_required():
        calls, finish = {}, None
        for chunk in C.chat.completions.create(model=MODEL, messages=msgs, tools=TOOLS,
                                               tool_choice="required", temperature=1.0, seed=24,
                                               max_tokens=300, stream=True):
            for ch in chunk.choices:
                for d in ch.delta.tool_calls or []:
                    c = calls.setdefault(d.index, {"id": None, "name": "", "args": ""})
                    if d.id:
                        c["id"] = d.id
                    if d.function and d.function.name:
                        c["name"] += d.function.name
                    if d.function and d.function.arguments:
                        c["args"] += d.function.arguments
                if ch.finish_reason:
                    finish = ch.finish_reason
        return calls, finish

    req, named, (calls, finish) = parallel(
        lambda: C.chat.completions.create(model=MODEL, messages=msgs, tools=TOOLS,
                                          tool_choice="required", temperature=1.0, seed=21,
                                          n=choices(2), max_tokens=300),
        lambda: C.chat.completions.create(
            model=MODEL, messages=msgs, tools=TOOLS, temperature=1.0, seed=23, max_tokens=100,
            parallel_tool_calls=False,
            tool_choice={"type": "function", "function": {"name": "add"}}),
        stream_required)
    for ch in req.choices:
        assert ch.finish_reason == "tool_calls", ch
        assert not ch.message.content, ch
        check_calls(ch.message.tool_calls)
    ch = named.choices[0]
    assert ch.finish_reason == "tool_calls" and len(ch.message.tool_calls) == 1, ch
    assert ch.message.tool_calls[0].function.name == "add"
    check_calls(ch.message.tool_calls)
    # streamed: deltas assemble into the same kind of calls
    assert finish == "tool_calls" and calls, (finish, calls)
    for c in calls.values():
        assert c["id"].startswith("call_") and c["name"] in PARAMS, c
        jsonschema.validate(json.loads(c["args"]), PARAMS[c["name"]])
    # the results go back as role "tool" messages; auto mode answers
    first = named.choices[0].message
    follow = msgs + [
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": tc.id, "type": "function",
                         "function": {"name": tc.function.name,
                                      "arguments": tc.function.arguments}}
                        for tc in first.tool_calls]},
        {"role": "tool", "tool_call_id": first.tool_calls[0].id, "content": "42"}]
    r = C.chat.completions.create(model=MODEL, messages=follow, tools=TOOLS, temperature=0,
                                  max_tokens=20)
    ch = r.choices[0]
    assert ch.finish_reason in ("stop", "length", "tool_calls"), ch
    if ch.finish_reason == "tool_calls":
        check_calls(ch.message.tool_calls)
    D.wait_idle()


def test_auto_tool_calls_parsed_from_output():
    # the output is forced into the Hermes format by a grammar; tool_choice "auto" must turn
    # it into tool_calls, streamed or not
    call = '<tool_call>\\n{"name": "add", "arguments": {"a": 1, "b": 2}}\\n</tool_call>'
    grammar = 'root ::= "Sure." "\\n" "%s"' % call.replace('"', '\\"')
    msgs = [{"role": "user", "content": "Add 1 and 2."}]

    def streamed():
        content, calls, finish = "", {}, None
        for chunk in C.chat.completions.create(model=MODEL, messages=msgs, tools=TOOLS,
                                               max_tokens=60, temperature=1.0, seed=31,
                                               stream=True,
                                               extra_body={"guided_grammar": grammar}):
            for ch in chunk.choices:
                content += ch.delta.content or ""
                for d in ch.delta.tool_calls or []:
                    c = calls.setdefault(d.index, {"name": "", "args": ""})
                    c["name"] += (d.function and d.function.name) or ""
                    c["args"] += (d.function and d.function.arguments) or ""
                if ch.finish_reason:
                    finish = ch.finish_reason
        return content, calls, finish

    plain, (content, calls, finish) = parallel(
        lambda: C.chat.completions.create(model=MODEL, messages=msgs, tools=TOOLS,
                                          max_tokens=60, temperature=1.0, seed=31,
                                          extra_body={"guided_grammar": grammar}),
        streamed)
    ch = plain.choices[0]
    assert ch.finish_reason == "tool_calls", ch
    assert ch.message.content == "Sure.", ch
    assert ch.message.tool_calls[0].function.name == "add"
    assert json.loads(ch.message.tool_calls[0].function.arguments) == {"a": 1, "b": 2}
    assert finish == "tool_calls" and content.strip() == "Sure.", (finish, content)
    assert calls[0]["name"] == "add" and json.loads(calls[0]["args"]) == {"a": 1, "b": 2}
    D.wait_idle()


def prompt_tokens(cl, **kw):
    r = cl.chat.completions.create(model=MODEL, max_tokens=1, temperature=0,
                                   messages=[{"role": "user", "content": "hi"}], **kw)
    return r.usage.prompt_tokens


def tokens_of(d, **kw):
    """The length of the prompt a chat request with kw would prefill, from /tokenize (the
    chat path's one prompt builder, daemon/prompt.h): nothing is prefilled, which under the
    sanitizers saves seconds per tools prompt."""
    kw.setdefault("messages", [{"role": "user", "content": "hi"}])
    return d.json("POST", "/tokenize", dict(model=MODEL, **kw))["count"]


def test_tools_reach_the_template():
    # the default model's template knows no tools: the built-in tool text is added; a
    # template that renders tools itself (Qwen 2.5's, also ChatML) gets them as JSON
    base = tokens_of(D)
    # one real request: what it prefilled is what /tokenize counts
    assert prompt_tokens(C, tools=TOOLS) == tokens_of(D, tools=TOOLS) > base + 60
    assert tokens_of(D, tools=TOOLS, tool_choice="none") == base == prompt_tokens(C)
    tpl = os.path.join(os.environ.get("INFERD_TESTDATA_DIR", ""), "chat-templates",
                       "Qwen-Qwen2.5-7B-Instruct.jinja")
    if not os.path.exists(tpl):
        print("     (no Qwen template in the test data: second half skipped)")
        return
    d2 = Daemon(INFERD, args=["--chat-template", tpl] + ARGS)
    try:
        b2 = tokens_of(d2)
        assert tokens_of(d2, tools=TOOLS) > b2 + 60
        n = tokens_of(d2, tools=TOOLS, messages=[
            {"role": "user", "content": "w?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "add", "arguments": "{\"a\": 1, \"b\": 2}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "3"}])
        assert n > b2 + 60, n
    finally:
        assert d2.stop() == 0


# What pydantic and zod emit for ordinary models (Field(ge=0), EmailStr, IPv4Address,
# dict[str, int], a nested model by $ref with a description beside it, a discriminated
# union), with annotations and vendor keywords around: enforced, outputs valid.
COVERAGE_SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema#", "title": "Order", "x-origin": "test",
    "$defs": {"Item": {"title": "Item", "type": "object", "additionalProperties": False,
                       "properties": {"sku": {"type": "string", "pattern": "^[A-Z]{2,4}$"},
                                      "qty": {"type": "integer", "minimum": 1, "maximum": 9}},
                       "required": ["sku", "qty"]}},
    "type": "object",
    "properties": {
        "id": {"type": "integer", "exclusiveMinimum": 0, "maximum": 99999, "readOnly": True},
        "price": {"type": "number", "minimum": 0, "maximum": 100, "multipleOf": 0.01},
        "email": {"type": "string", "format": "email", "description": "EmailStr"},
        "ip": {"type": "string", "format": "ipv4", "examples": ["10.0.0.1"]},
        "item": {"$ref": "#/$defs/Item", "description": "the thing"},
        "counts": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0},
                   "maxProperties": 2},
        "pay": {"oneOf": [
            {"type": "object", "properties": {"kind": {"const": "card"},
                                              "last4": {"type": "string", "pattern": "^[0-9]{4}$"}},
             "required": ["kind", "last4"], "additionalProperties": False},
            {"type": "object", "properties": {"kind": {"const": "cash"}},
             "required": ["kind"], "additionalProperties": False}]},
    },
    "required": ["id", "price", "email", "ip", "item", "counts", "pay"],
    "additionalProperties": False,
}


def test_schema_coverage_validates():
    r = ask("An order as JSON.", temperature=1.0, seed=21, n=choices(3), max_tokens=400,
            response_format={"type": "json_schema",
                             "json_schema": {"name": "order", "schema": COVERAGE_SCHEMA,
                                             "strict": True}})
    schema = json.loads(json.dumps(COVERAGE_SCHEMA), parse_float=decimal.Decimal)
    checker = jsonschema.Draft7Validator(schema,
                                         format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER)
    for ch in r.choices:
        assert ch.finish_reason == "stop", (ch.finish_reason, ch.message.content)
        # decimals stay exact (multipleOf 0.01 fails on binary floats: 0.29 / 0.01)
        doc = json.loads(ch.message.content, parse_float=decimal.Decimal)
        checker.validate(doc)
        assert 0 < doc["id"] <= 99999 and 1 <= doc["item"]["qty"] <= 9, doc
    print("     %d outputs validated" % len(r.choices))


def test_tool_schemas_only_checked_when_enforced():
    """A tool the model is only shown (auto) may use keywords no grammar enforces, and so may
    a strict or forced one: its grammar over-approximates them and each call's arguments are
    checked after generation, as response_format's output is (an invalid call is OpenAI's
    500 invalid_content, counted in /metrics); what neither evaluates is a 400 naming it."""
    tool = {"type": "function", "function": {
        "name": "tag", "description": "Tags a post",
        "parameters": {"type": "object", "properties": {
            "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}},
            "required": ["tags"]}}}
    r = ask("Tag this post: cats", max_tokens=20, tools=[tool])
    assert r.choices[0].finish_reason in ("stop", "length", "tool_calls"), r
    strict = json.loads(json.dumps(tool))
    strict["function"]["strict"] = True
    for kw in ({"tools": [strict]},
               {"tools": [tool], "tool_choice": {"type": "function",
                                                 "function": {"name": "tag"}}}):
        try:  # accepted now: answered with valid arguments, or the 500 of a failed check
            r = ask("Tag this post: cats", max_tokens=40, temperature=1.0, seed=2, **kw)
            for call in r.choices[0].message.tool_calls or []:
                jsonschema.validate(json.loads(call.function.arguments),
                                    tool["function"]["parameters"])
        except openai.InternalServerError as e:
            assert "invalid content" in str(e) and "uniqueItems" in str(e), str(e)
    # forced, named or required: the grammar admits n in 0..3, the schema none of them, so
    # every call is invalid: the openai client's 500 names the call and the JSON pointer
    before = D.metrics()
    pick = {"type": "function", "function": {"name": "pick", "strict": True, "parameters": {
        "type": "object", "additionalProperties": False, "required": ["n"],
        "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 3,
                             "not": {"enum": [0, 1, 2, 3]}}}}}}
    for choice in ({"type": "function", "function": {"name": "pick"}}, "required"):
        try:
            ask("Pick a number.", max_tokens=40, tools=[pick], tool_choice=choice,
                parallel_tool_calls=False)
            raise AssertionError("an invalid call was answered (%r)" % (choice,))
        except openai.InternalServerError as e:
            assert e.status_code == 500 and "invalid content" in str(e), str(e)
            assert "call to 'pick'" in str(e) and "/n: matches the 'not' schema" in str(e), str(e)
    try:  # streamed: the held call is never sent, the stream ends with the error
        chunks = list(C.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Pick a number."}], max_tokens=40,
            tools=[pick], tool_choice={"type": "function", "function": {"name": "pick"}},
            stream=True))
        raise AssertionError("an invalid streamed call ended without an error: %r" % chunks)
    except openai.APIError as e:
        assert "call to 'pick'" in str(e), str(e)
    after = D.metrics()
    key = "inferd_structured_output_invalid_total"
    assert after[key] - before.get(key, 0) == 3, (before.get(key), after[key])
    # what neither a grammar nor the check evaluates, with curl over the Unix socket: the
    # 400's param and message; and a strict tool with bounds forced: its arguments obey them
    never = json.loads(json.dumps(strict))
    never["function"]["parameters"]["$dynamicRef"] = "#meta"
    body = {"model": MODEL, "max_tokens": 20, "tools": [never],
            "messages": [{"role": "user", "content": "Tag this post: cats"}]}
    code, out = D.curl("-H", "Content-Type: application/json", "-d", json.dumps(body),
                       "http://localhost/v1/chat/completions", expect=400)
    err = json.loads(out)["error"]
    assert (err["param"] == "tools[0].function.parameters"
            and "$dynamicRef" in err["message"]), err
    bounded = {"type": "function", "function": {
        "name": "rate", "strict": True, "parameters": {
            "type": "object", "additionalProperties": False, "required": ["stars"],
            "properties": {"stars": {"type": "integer", "minimum": 1, "maximum": 5}}}}}
    body = {"model": MODEL, "max_tokens": 40, "temperature": 1.0, "seed": 3, "tools": [bounded],
            "tool_choice": {"type": "function", "function": {"name": "rate"}},
            "messages": [{"role": "user", "content": "Rate it"}]}
    code, out = D.curl("-H", "Content-Type: application/json", "-d", json.dumps(body),
                       "http://localhost/v1/chat/completions", expect=200)
    call = json.loads(out)["choices"][0]["message"]["tool_calls"][0]["function"]
    args = json.loads(call["arguments"])
    assert call["name"] == "rate" and 1 <= args["stars"] <= 5, call


def test_over_approximated_schemas_checked():
    """Keywords no grammar enforces (not, if/then/else, uniqueItems, contains, overlapping
    oneOf) are left out of the grammar and the finished output is checked against the whole
    schema: a valid output is answered as usual; an invalid one is OpenAI's 500 for invalid
    content (code invalid_content, the JSON pointer and the reason in the message), through
    the openai client, curl, and a stream (an error event ends it); counted in /metrics."""
    before = D.metrics()
    # valid whatever the grammar writes (n <= 9, never 100): the check passes it
    ok = {"type": "object", "additionalProperties": False, "required": ["n", "tags"],
          "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9},
                         "tags": {"type": "array", "maxItems": 1, "items": {"type": "string",
                                                                          "maxLength": 5}}},
          "not": {"properties": {"n": {"const": 100}}, "required": ["n"]},
          "if": {"properties": {"n": {"minimum": 5}}}, "then": {"required": ["n"]},
          "oneOf": [{"required": ["n"]}, {"required": ["tags"], "properties": {"n": {"type": "null"}}}]}
    r = ask("A number and tags as JSON.", temperature=1.0, seed=5, n=choices(2), max_tokens=60,
            response_format={"type": "json_schema", "json_schema": {"name": "ok", "schema": ok}})
    for ch in r.choices:
        assert ch.finish_reason == "stop", (ch.finish_reason, ch.message.content)
        jsonschema.validate(json.loads(ch.message.content), ok)
    # the grammar admits 0..3 only, the schema none of them: every output is invalid
    bad = {"type": "integer", "minimum": 0, "maximum": 3, "not": {"enum": [0, 1, 2, 3]}}
    rf = {"type": "json_schema", "json_schema": {"name": "bad", "schema": bad}}
    try:
        ask("A number.", max_tokens=5, response_format=rf)
        raise AssertionError("an invalid output was answered")
    except openai.InternalServerError as e:
        assert e.status_code == 500 and "invalid content" in str(e), str(e)
        assert "matches the 'not' schema" in str(e), str(e)
    body = {"model": MODEL, "max_tokens": 5, "response_format": rf,
            "messages": [{"role": "user", "content": "A number."}]}
    code, out = D.curl("-H", "Content-Type: application/json", "-d", json.dumps(body),
                       "http://localhost/v1/chat/completions", expect=500)
    err = json.loads(out)["error"]
    assert err["code"] == "invalid_content" and "(the value)" in err["message"], err
    try:
        chunks = list(C.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "A number."}], max_tokens=5,
            response_format=rf, stream=True))
        raise AssertionError("an invalid stream ended without an error: %r" % chunks)
    except openai.APIError as e:
        assert "invalid content" in str(e), str(e)
    after = D.metrics()
    key = "inferd_structured_output_invalid_total"
    assert after[key] - before.get(key, 0) == 3, (before.get(key), after[key])
    D.wait_idle()


def test_unsupported_refused():
    cases = [
        ({"response_format": {"type": "json_schema", "json_schema": {
            "name": "x", "schema": {"type": "object", "$dynamicRef": "#meta"}}}},
         "$dynamicRef"),
        ({"response_format": {"type": "json_schema", "json_schema": {
            "name": "x", "schema": {"$ref": "https://example.com/s.json"}}}}, "$ref"),
        ({"extra_body": {"guided_regex": "(?<=a)b"}}, "lookaround"),
        ({"extra_body": {"prompt_logprobs": 21}}, "prompt_logprobs"),  # the param (vLLM's words)
    ]
    for kw, needle in cases:
        try:
            ask("x", max_tokens=5, **kw)
            raise AssertionError("accepted: %r" % kw)
        except openai.BadRequestError as e:
            assert needle in str(e) or e.body.get("param") == needle, (needle, e.body)


if __name__ == "__main__":
    sys.exit(serve_and_run(globals(), INFERD, args=ARGS))
