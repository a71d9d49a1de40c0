"""Grammar-constrained generation through llama-cpp-python 0.3.36 on libdeepseek (run by
scripts/test-llama-cpp-python.sh after test_llama_cpp_python.py): JSON mode, a JSON schema,
LlamaGrammar.from_string, and chatml-function-calling with a forced tool, on the real 0.5B model.
Each output must parse and validate; the sampler chain must hold the grammar (no NULL member).

usage: python test_grammar.py MODEL.gguf
"""
import json
import re
import sys
import time

import llama_cpp
from llama_cpp.llama_grammar import LlamaGrammar

MODEL = sys.argv[1]
T0 = time.time()


def ok(what):
    print(f"ok: {what} ({time.time() - T0:.1f}s)", flush=True)


def validate(value, schema):
    """The subset of JSON Schema used below."""
    t = schema.get("type")
    if "enum" in schema:
        assert value in schema["enum"], (value, schema["enum"])
    if "const" in schema:
        assert value == schema["const"], (value, schema["const"])
    if t == "object":
        assert isinstance(value, dict), value
        for k in schema.get("required", []):
            assert k in value, (k, value)
        for k, v in value.items():
            if k in schema.get("properties", {}):
                validate(v, schema["properties"][k])
            else:
                assert schema.get("additionalProperties", True) is not False, (k, value)
    elif t == "array":
        assert isinstance(value, list), value
        assert len(value) >= schema.get("minItems", 0), value
        assert len(value) <= schema.get("maxItems", 10**9), value
        for v in value:
            validate(v, schema.get("items", {}))
    elif t == "string":
        assert isinstance(value, str), value
    elif t == "integer":
        assert isinstance(value, int) and not isinstance(value, bool), value
        assert schema.get("minimum", -10**18) <= value <= schema.get("maximum", 10**18), value
    elif t == "boolean":
        assert isinstance(value, bool), value


llm = llama_cpp.Llama(model_path=MODEL, n_ctx=1024, n_threads=2, n_batch=256, verbose=False, seed=7)

# JSON mode
r = llm.create_chat_completion(
    messages=[{"role": "user", "content": "Describe a cat as a JSON object with a name and an age."}],
    response_format={"type": "json_object"}, max_tokens=96, temperature=0.0)
text = r["choices"][0]["message"]["content"]
obj = json.loads(text)
assert isinstance(obj, (dict, list)), text
ok(f"response_format json_object: {text.strip()[:60]!r}")

# JSON schema
schema = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0, "maximum": 30},
          "colors": {"type": "array", "items": {"type": "string", "enum": ["black", "white", "orange", "grey"]}, "maxItems": 3}},
          "required": ["name", "age", "colors"], "additionalProperties": False}
r = llm.create_chat_completion(
    messages=[{"role": "user", "content": "Give me a cat: its name, age and colors."}],
    response_format={"type": "json_object", "schema": schema}, max_tokens=128, temperature=0.8, seed=3)
text = r["choices"][0]["message"]["content"]
validate(json.loads(text), schema)
ok(f"response_format with a JSON schema: {text.strip()[:60]!r}")

# LlamaGrammar.from_string, completion API
g = LlamaGrammar.from_string(r'''root ::= "Answer: " ("yes" | "no") "." [0-9]{2}''', verbose=False)
r = llm.create_completion("Is the sky blue? ", grammar=g, max_tokens=16, temperature=0.0)
text = r["choices"][0]["text"]
assert re.fullmatch(r"Answer: (yes|no)\.[0-9]{2}", text), text
ok(f"LlamaGrammar.from_string: {text!r}")

# chatml-function-calling with a forced tool
fc = llama_cpp.Llama(model_path=MODEL, n_ctx=2048, n_threads=2, n_batch=256, verbose=False, chat_format="chatml-function-calling")
params = {"type": "object", "properties": {"location": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
          "required": ["location", "unit"]}
tools = [{"type": "function", "function": {"name": "get_weather", "description": "Current weather", "parameters": params}}]
r = fc.create_chat_completion(
    messages=[{"role": "user", "content": "What is the weather in Paris?"}],
    tools=tools, tool_choice={"type": "function", "function": {"name": "get_weather"}}, max_tokens=96, temperature=0.0)
calls = r["choices"][0]["message"]["tool_calls"]
assert calls and calls[0]["function"]["name"] == "get_weather", r
args = json.loads(calls[0]["function"]["arguments"])
validate(args, params)
ok(f"chatml-function-calling, forced tool: {calls[0]['function']['arguments'][:60]!r}")

print("all grammar checks passed")
