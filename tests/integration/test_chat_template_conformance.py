#!/usr/bin/env python3
"""test_chat_template_conformance.py JINJA_RENDER [TEMPLATE...]

Renders every chat template of $INFERD_TESTDATA_DIR/chat-templates (or the
given files) over a set of conversations — system prompt, multi-turn, tools
with tool calls and tool results, generation prompt on and off, custom
variables — with Python's jinja2 configured exactly as transformers'
apply_chat_template configures it, and with inferd's interpreter
(tests/tools/jinja_render.c), and compares the results byte for byte.
A case where jinja2 raises must fail in inferd too (with the same message for
raise_exception). Templates listed in KNOWN_UNSUPPORTED must be refused by
inferd at load with an error naming the construct; any other difference
fails. Skips (77) when the test data is absent.
"""
import json
import os
import subprocess
import sys
import tempfile
from datetime import datetime, timezone

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

NOW = 1764590400  # 2025-12-01 12:00:00 UTC: strftime_now's clock on both sides

# Templates inferd refuses at load, with the reason; must fail to parse.
KNOWN_UNSUPPORTED = {}


class _Generation(jinja2.ext.Extension):
    """transformers' AssistantTracker without the tracking: {% generation %}
    renders its body."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_gen"), [], [], body).set_lineno(lineno)

    def _gen(self, caller):
        return caller()


def hf_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.fromtimestamp(NOW, timezone.utc).strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[_Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name, e.g. Paris"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer", "description": "Forecast days", "default": 1}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search",
        "description": "Search the web.",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string"}, "limit": {"type": "number"}},
            "required": ["query"]}}},
]

SYS = {"role": "system", "content": "You are a helpful assistant. Answer briefly."}
U1 = {"role": "user", "content": "Hello! What's 2+2?"}
A1 = {"role": "assistant", "content": "2 + 2 = 4."}
U2 = {"role": "user", "content": "And  times three?\n"}
CALL = {"role": "assistant", "content": "", "tool_calls": [
    {"id": "call_1", "type": "function",
     "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}]}
RESULT = {"role": "tool", "tool_call_id": "call_1", "name": "get_weather",
          "content": "{\"temperature\": 21.5, \"sky\": \"clear\"}"}
A_END = {"role": "assistant", "content": "It is 21.5 °C and clear in Paris."}


def conversations():
    base = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
            "pad_token": "<pad>", "tools": None, "documents": None}
    convs = [
        ("user", [U1], True, {}),
        ("system-multiturn", [SYS, U1, A1, U2], True, {}),
        ("system-multiturn-nogen", [SYS, U1, A1, U2, A1], False, {}),
        ("no-system-multiturn", [U1, A1, {"role": "user", "content": "Ünïcödé ✓ — 日本語?"}],
         True, {}),
        ("tools", [SYS, {"role": "user", "content": "Weather in Paris?"}], True,
         {"tools": TOOLS}),
        ("tool-calls", [SYS, {"role": "user", "content": "Weather in Paris?"}, CALL, RESULT],
         True, {"tools": TOOLS}),
        ("tool-calls-done", [{"role": "user", "content": "Weather in Paris?"}, CALL, RESULT,
                             A_END, {"role": "user", "content": "Thanks"}], True,
         {"tools": TOOLS}),
        ("thinking-off", [U1], True, {"enable_thinking": False}),
        ("date", [SYS, U1], True, {"date_string": "01 Dec 2025"}),
    ]
    for name, msgs, gen, extra in convs:
        ctx = dict(base)
        ctx.update(extra)
        ctx["messages"] = msgs
        ctx["add_generation_prompt"] = gen
        yield name, ctx


_compiled = {}


def py_render(env, src, ctx):
    """("ok", text) / ("parse" | "raise" | "error", message); compiles once per source."""
    if src not in _compiled:
        try:
            _compiled[src] = env.from_string(src)
        except jinja2.TemplateError as e:
            _compiled[src] = e
    tpl = _compiled[src]
    if isinstance(tpl, Exception):
        return "parse", str(tpl)
    try:
        return "ok", tpl.render(**ctx)
    except jinja2.TemplateError as e:
        return ("raise" if type(e) is jinja2.TemplateError else "error"), str(e)
    except Exception as e:  # TypeError etc. from the template's own code
        return "error", f"{type(e).__name__}: {e}"


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    tool = sys.argv[1]
    files = sys.argv[2:]
    if not files:
        d = os.path.join(os.environ.get("INFERD_TESTDATA_DIR", ""), "chat-templates")
        if not os.path.isdir(d):
            print(f"SKIPPED: no chat-template corpus at {d!r} (../shared/testdata)",
                  file=sys.stderr)
            return 77
        files = sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".jinja"))
    env = hf_env()
    cases = list(conversations())
    os.environ["TZ"] = "UTC"
    os.environ["INFERD_JINJA_NOW"] = str(NOW)
    failures, compared, errors_matched = [], 0, 0
    with tempfile.TemporaryDirectory() as tmp:
        cpath = os.path.join(tmp, "cases.json")
        with open(cpath, "w") as f:
            json.dump([c for _, c in cases], f)
        if not sys.argv[2:]:
            # plus the official templates of tests/data/tokenizer/chat_golden.json (SmolLM2,
            # Phi-3.5, Gemma 3, Llama 2 / 3.0, Mistral v0.2), missing from the corpus
            gpath = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data",
                                 "tokenizer", "chat_golden.json")
            for gname, g in json.load(open(gpath))["templates"].items():
                fp = os.path.join(tmp, f"golden-{gname}.jinja")
                with open(fp, "w", encoding="utf-8") as f:
                    f.write(g["jinja"])
                files.append(fp)
            # and the published templates committed here (tests/data/chat-templates: Phi-4,
            # from microsoft/phi-4's tokenizer_config.json), missing from both
            cdir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data",
                                "chat-templates")
            files += sorted(os.path.join(cdir, f) for f in os.listdir(cdir)
                            if f.endswith(".jinja"))
        for path in files:
            name = os.path.basename(path)
            with open(path, encoding="utf-8") as f:
                src = f.read()
            p = subprocess.run([tool, path, cpath], capture_output=True, timeout=60)
            if p.returncode != 0:
                failures.append(f"{name}: jinja_render exited {p.returncode}: "
                                f"{p.stderr.decode(errors='replace')}")
                continue
            res = json.loads(p.stdout)
            if isinstance(res, dict):
                perr = res["parse_error"]
                kind, msg = py_render(env, src, cases[0][1])
                if name in KNOWN_UNSUPPORTED or kind == "parse":
                    errors_matched += 1
                    print(f"  {name}: refused at load ({perr})")
                else:
                    failures.append(f"{name}: inferd cannot parse it: {perr}")
                continue
            if name in KNOWN_UNSUPPORTED:
                failures.append(f"{name}: listed as unsupported but parses; update the list")
            for (cname, ctx), got in zip(cases, res):
                kind, want = py_render(env, src, ctx)
                if kind == "parse":
                    failures.append(f"{name}: jinja2 cannot parse it ({want}) but inferd can")
                    break
                if kind == "ok":
                    if not got["ok"]:
                        failures.append(f"{name} [{cname}]: inferd failed: {got['err']}")
                    elif got["out"] != want:
                        g, w = got["out"], want
                        i = next((k for k in range(min(len(g), len(w))) if g[k] != w[k]),
                                 min(len(g), len(w)))
                        failures.append(f"{name} [{cname}]: differs at char {i}:\n"
                                        f"    jinja2: {w[max(0, i - 60):i + 60]!r}\n"
                                        f"    inferd: {g[max(0, i - 60):i + 60]!r}")
                    else:
                        compared += 1
                else:
                    if got["ok"]:
                        failures.append(f"{name} [{cname}]: jinja2 raised ({want}) but inferd "
                                        f"rendered")
                    elif kind == "raise" and not got["err"].endswith(want):
                        failures.append(f"{name} [{cname}]: raise_exception message differs: "
                                        f"{want!r} vs {got['err']!r}")
                    else:
                        errors_matched += 1
    print(f"{len(files)} templates x {len(cases)} conversations: {compared} renderings "
          f"identical, {errors_matched} errors matched, {len(failures)} failures")
    for f in failures:
        print("FAIL " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
