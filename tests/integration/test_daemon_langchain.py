"""LangChain against the real daemon (label model), as an application would use it:
langchain-openai's ChatOpenAI pointed at inferd's Unix socket — plain invoke and stream,
bind_tools with tool_choice named and required (the tiny default model's output is forced
by the grammar) giving AIMessage.tool_calls with parsed arguments, a tool result sent back
as a ToolMessage, and with_structured_output(PydanticModel) in the json_schema and
function_calling methods returning model instances; the same through the Responses API
(use_responses_api=True).

Usage: test_daemon_langchain.py INFERD   (run by the venv's python: $INFERD_PYTHON)
"""
import os
import sys
from typing import Literal

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_daemon_util import serve_and_run, skip  # noqa: E402

try:
    import httpx
    import pydantic
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
except ImportError as e:  # pragma: no cover
    skip("langchain-openai missing (%s): run deploy/install-deps.sh" % e)

INFERD = sys.argv[1] if len(sys.argv) > 1 else "inferd"
D = None
MODEL = "SmolLM2-135M-Instruct.Q4_1"


def llm(**kw):
    kw.setdefault("temperature", 0)
    kw.setdefault("max_tokens", 64)
    http = httpx.Client(transport=httpx.HTTPTransport(uds=D.sock), timeout=300)
    return ChatOpenAI(model=MODEL, base_url="http://localhost/v1", api_key="unused",
                      http_client=http, max_retries=0, **kw)


@tool
def get_weather(city: str) -> str:
    """The current weather in a city."""
    return "sunny in " + city


@tool
def add(a: int, b: int) -> int:
    """Adds two integers."""
    return a + b


class Person(pydantic.BaseModel):
    """A person."""
    name: str = pydantic.Field(max_length=20)
    age: int
    mood: Literal["happy", "sad"]


def test_invoke_and_stream():
    m = llm(max_tokens=12)
    r = m.invoke("Name a color.")
    assert isinstance(r.content, str) and r.content, r
    assert r.usage_metadata["output_tokens"] >= 1, r.usage_metadata
    streamed = "".join(ch.content for ch in m.stream("Name a color."))
    assert streamed == r.content, (streamed, r.content)
    D.wait_idle()


def test_bind_tools_forced():
    q = "What is the weather in Paris?"
    named = llm().bind_tools([get_weather, add], tool_choice="get_weather").invoke(q)
    assert named.tool_calls, named
    call = named.tool_calls[0]
    assert call["name"] == "get_weather" and isinstance(call["args"].get("city"), str), call
    assert call["id"], call
    # required: one call (parallel calls off), else this tiny model repeats its call
    # until max_tokens
    required = llm().bind_tools([get_weather, add], tool_choice="required",
                                parallel_tool_calls=False).invoke("Add 2 and 3.")
    assert required.tool_calls and required.tool_calls[0]["name"] in ("get_weather", "add")
    # the tool runs and its result goes back: the model answers in text
    result = get_weather.invoke(call)
    assert isinstance(result, ToolMessage) and result.tool_call_id == call["id"]
    back = llm(max_tokens=16).bind_tools([get_weather]).invoke(
        [HumanMessage(q), named, result])
    assert isinstance(back.content, str) and (back.content or back.tool_calls), back
    D.wait_idle()


def test_with_structured_output():
    for method in ("json_schema", "function_calling"):
        p = llm(temperature=1.0, max_tokens=120).with_structured_output(
            Person, method=method).invoke("Describe a person.")
        assert isinstance(p, Person), (method, p)
        assert len(p.name) <= 20 and p.mood in ("happy", "sad"), (method, p)
    D.wait_idle()


def test_responses_api():
    m = llm(max_tokens=12, use_responses_api=True)
    r = m.invoke("Name a color.")
    assert r.text, r
    t = llm(use_responses_api=True).bind_tools([get_weather], tool_choice="get_weather").invoke(
        "Weather in Rome?")
    assert t.tool_calls and t.tool_calls[0]["name"] == "get_weather", t
    p = llm(temperature=1.0, max_tokens=120, use_responses_api=True).with_structured_output(
        Person).invoke("Describe a person.")
    assert isinstance(p, Person), p
    D.wait_idle()


if __name__ == "__main__":
    sys.exit(serve_and_run(globals(), INFERD, client=False))
