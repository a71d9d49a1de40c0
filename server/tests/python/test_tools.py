"""Tool calls and thinking against deepseek-server, with the real `openai` client and LangChain.

Usage: test_tools.py SERVER_BIN QWEN_MODEL.gguf FIXTURES_DIR
- Qwen2.5-Coder-0.5B (Hermes `<tool_call>` format, its GGUF's Jinja template): tool_choice
  "required" returns a schema-valid call, whole and streamed, with finish_reason "tool_calls";
  a named function is the one called; the tool result round trip returns content; "auto" with a
  question no tool fits returns content only; LangChain's ChatOpenAI(...).bind_tools(...) runs
  an agent step (call, tool result, answer); bad tool fields are refused with the field named.
- Tiny DeepSeek fixtures with upstream's DeepSeek V3.1, V3.2 and V4 templates: a forced call is
  generated under the grammar and parsed back, with thinking off and on.
Prints "all tool checks passed" at the end.
"""

import json
import os
import sys

import httpx
import openai

import harness

SERVER, QWEN, FIXTURES = sys.argv[1], sys.argv[2], sys.argv[3]
TEMPLATES = os.path.join(FIXTURES, "chat", "upstream-templates")

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "The city"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "Get the current time in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def Server(model, *extra):
    return harness.Server(SERVER, model, *extra)


def client(srv):
    return openai.OpenAI(base_url=srv.base + "/v1", api_key="none", max_retries=0, timeout=300)


def valid(schema, value, where="arguments"):
    """A small JSON-schema check of what the tests' schemas use."""
    t = schema.get("type")
    if "enum" in schema:
        assert value in schema["enum"], f"{where}: {value!r} not in {schema['enum']}"
    if t == "object":
        assert isinstance(value, dict), f"{where}: {value!r} is not an object"
        props = schema.get("properties", {})
        for r in schema.get("required", []):
            assert r in value, f"{where}: required {r!r} missing from {value}"
        for k, v in value.items():
            if k in props:
                valid(props[k], v, f"{where}.{k}")
            else:
                assert schema.get("additionalProperties", True) is not False, f"{where}: {k!r} is not a property"
    elif t == "string":
        assert isinstance(value, str), f"{where}: {value!r} is not a string"
        if "maxLength" in schema:
            assert len(value) <= schema["maxLength"], f"{where}: {value!r} is longer than {schema['maxLength']}"
    elif t == "integer":
        assert isinstance(value, int) and not isinstance(value, bool), f"{where}: {value!r} is not an integer"
        assert schema.get("minimum", value) <= value <= schema.get("maximum", value), f"{where}: {value} out of range"


def check_call(call, tool):
    assert call.type == "function", call
    assert call.function.name == tool["function"]["name"], call
    assert isinstance(call.id, str) and len(call.id) == 32 and call.id.isalnum(), call.id
    valid(tool["function"]["parameters"], json.loads(call.function.arguments))


QUESTION = [{"role": "user", "content": "What is the weather like in Paris right now?"}]


def check_required(srv):
    c = client(srv)
    r = c.chat.completions.create(model="m", messages=QUESTION, tools=[WEATHER], tool_choice="required", temperature=0, max_tokens=128)
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls", ch
    assert ch.message.tool_calls and len(ch.message.tool_calls) >= 1, ch.message
    check_call(ch.message.tool_calls[0], WEATHER)
    assert not ch.message.content, ch.message.content
    return ch.message


def check_required_streamed(srv):
    c = client(srv)
    calls, finish, content = {}, None, ""
    first_delta = True
    for chunk in c.chat.completions.create(model="m", messages=QUESTION, tools=[WEATHER], tool_choice="required", temperature=0, max_tokens=128, stream=True):
        if not chunk.choices:
            continue
        d = chunk.choices[0].delta
        if first_delta:
            assert d.role == "assistant", d
            first_delta = False
        content += d.content or ""
        for tc in d.tool_calls or []:
            if tc.index not in calls:
                # A call's first delta carries its id, type and name.
                assert tc.id and tc.type == "function" and tc.function.name, tc
                calls[tc.index] = {"id": tc.id, "name": tc.function.name, "arguments": ""}
            else:
                assert tc.id is None and not tc.function.name, tc
            calls[tc.index]["arguments"] += tc.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls", finish
    assert calls and not content.strip(), (calls, content)
    call = calls[0]
    assert call["name"] == "get_weather" and len(call["id"]) == 32
    valid(WEATHER["function"]["parameters"], json.loads(call["arguments"]))
    # The same answer as the whole one (greedy), but for the id.
    whole = check_required(srv).tool_calls[0]
    assert json.loads(whole.function.arguments) == json.loads(call["arguments"]), (whole, call)


def check_named(srv):
    c = client(srv)
    r = c.chat.completions.create(model="m", messages=QUESTION, tools=[WEATHER, TIME], tool_choice={"type": "function", "function": {"name": "get_time"}}, temperature=0, max_tokens=128)
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls" and len(ch.message.tool_calls) == 1, ch
    check_call(ch.message.tool_calls[0], TIME)


def check_round_trip(srv):
    c = client(srv)
    first = check_required(srv)
    call = first.tool_calls[0]
    history = QUESTION + [
        {"role": "assistant", "content": "", "tool_calls": [{"id": call.id, "type": "function", "function": {"name": call.function.name, "arguments": call.function.arguments}}]},
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature": 18, "unit": "celsius", "sky": "sunny"})},
    ]
    r = c.chat.completions.create(model="m", messages=history, tools=[WEATHER], tool_choice="none", temperature=0, max_tokens=96)
    ch = r.choices[0]
    assert not ch.message.tool_calls, ch.message
    assert ch.message.content and ch.message.content.strip(), ch.message
    assert ch.finish_reason in ("stop", "length"), ch


def check_auto_without_a_fitting_tool(srv):
    c = client(srv)
    r = c.chat.completions.create(model="m", messages=[{"role": "user", "content": "Write one short sentence about the sea."}], tools=[WEATHER], tool_choice="auto", temperature=0, max_tokens=48)
    ch = r.choices[0]
    assert not ch.message.tool_calls, ch.message
    assert ch.message.content and "<tool_call>" not in ch.message.content, ch.message
    assert ch.finish_reason in ("stop", "length"), ch


def check_refusals(srv):
    def post(body):
        return httpx.post(srv.base + "/v1/chat/completions", json={"messages": QUESTION, "max_tokens": 4, **body}, timeout=60)

    def refused(body, param, words):
        r = post(body)
        assert r.status_code == 400, (body, r.status_code, r.text)
        e = r.json()["error"]
        assert e.get("param") == param and words in e["message"], (body, e)

    refused({"tools": [WEATHER], "tool_choice": "sometimes"}, "tool_choice", "Invalid tool_choice: sometimes")
    refused({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice", "nope")
    refused({"tool_choice": "required"}, "tool_choice", "tool")
    refused({"tools": [WEATHER], "grammar": 'root ::= "a"'}, "grammar", "Cannot use custom grammar constraints with tools.")
    refused({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "kaboom"}}}], "tool_choice": "required"}, "tools", "kaboom")
    refused({"tools": "all of them"}, "tools", "tools")
    # tool_choice none: the tools are shown to the model, no call is parsed.
    r = post({"tools": [WEATHER], "tool_choice": "none"})
    assert r.status_code == 200 and "tool_calls" not in r.json()["choices"][0]["message"], r.text


def check_langchain_agent_step(srv):
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    @tool
    def get_weather(city: str) -> str:
        """Get the current weather in a city."""
        return f"It is 18 degrees and sunny in {city}."

    llm = ChatOpenAI(base_url=srv.base + "/v1", api_key="none", model="m", temperature=0, max_tokens=128, max_retries=0)
    agent = llm.bind_tools([get_weather], tool_choice="required")
    messages = [HumanMessage("What is the weather like in Paris right now?")]
    ai = agent.invoke(messages)
    assert ai.tool_calls, ai
    call = ai.tool_calls[0]
    assert call["name"] == "get_weather" and isinstance(call["args"].get("city"), str), call
    messages += [ai, ToolMessage(get_weather.invoke(call["args"]), tool_call_id=call["id"])]
    answer = llm.bind_tools([get_weather], tool_choice="none").invoke(messages)
    assert not answer.tool_calls and answer.content.strip(), answer


DS_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the weather",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "enum": ["Paris", "Tokyo", "Lima"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 9},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "days", "unit"]}}}


def check_deepseek_templates():
    """Random tiny DeepSeek models with the real templates: what the grammar makes them write
    parses back into the call, as the template's own format."""
    for model, template in [("deepseek2/tiny-deepseek3-q8_0.gguf", "deepseek-ai-DeepSeek-V3.1.jinja"),
                            ("deepseek-family/tiny-deepseek32-q8_0.gguf", "deepseek-ai-DeepSeek-V3.2.jinja"),
                            ("deepseek-family/tiny-deepseek4-q8_0.gguf", "deepseek-ai-DeepSeek-V4.jinja")]:
        srv = Server(os.path.join(FIXTURES, model), "--chat-template-file", os.path.join(TEMPLATES, template))
        try:
            c = client(srv)
            for think in (False, True):
                r = c.chat.completions.create(model="m", messages=QUESTION, tools=[DS_TOOL], tool_choice="required", parallel_tool_calls=False, temperature=0, max_tokens=600,
                                              extra_body={"chat_template_kwargs": {"enable_thinking": think}, "reasoning_budget_tokens": 64})
                ch = r.choices[0]
                where = f"{template} thinking={think}"
                assert ch.finish_reason == "tool_calls", (where, ch)
                assert len(ch.message.tool_calls) == 1, (where, ch.message)
                check_call(ch.message.tool_calls[0], DS_TOOL)
                assert "DSML" not in (ch.message.content or "") and "tool▁" not in (ch.message.content or ""), (where, ch.message.content)
        finally:
            srv.stop()


def main():
    srv = Server(QWEN)
    try:
        for check in [check_required, check_required_streamed, check_named, check_round_trip, check_auto_without_a_fitting_tool, check_refusals, check_langchain_agent_step]:
            check(srv)
            print("ok", check.__name__, flush=True)
    except BaseException:
        print(srv.logs()[-4000:])
        raise
    finally:
        srv.stop()
    check_deepseek_templates()
    print("ok check_deepseek_templates")
    print("all tool checks passed")


if __name__ == "__main__":
    main()
