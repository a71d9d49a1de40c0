"""Extracts the cases of llama.cpp's tests/test-json-schema-to-grammar.cpp (b11312, MIT) into
json_schema_to_grammar.txt, the data of server/tests/json_schema_to_grammar.rs.

Usage: extract_json_schema_cases.py path/to/test-json-schema-to-grammar.cpp > json_schema_to_grammar.txt

Each `test({STATUS, "name", schema, expected_grammar});` becomes

    ### SUCCESS|FAILURE name
    --- schema
    <schema text, as in the C++ source>
    --- grammar
    <expected grammar, trimmed as the C++ test trims it (no leading blanks on any line)>

in the order of the source. Strings are C++ raw strings R\"\"\"(...)\"\"\" or plain "..." literals.
"""

import re
import sys

src = open(sys.argv[1], encoding="utf-8").read()


def cxx_string(s, i):
    """The C++ string literal starting at s[i]: (value, index after it)."""
    if s.startswith('R"""(', i):
        end = s.index(')"""', i + 5)
        return s[i + 5:end], end + 4
    assert s[i] == '"', s[i:i + 40]
    out, i = [], i + 1
    while s[i] != '"':
        if s[i] == "\\":
            c = s[i + 1]
            out.append({"n": "\n", "t": "\t", '"': '"', "\\": "\\"}[c])
            i += 2
        else:
            out.append(s[i])
            i += 1
    return "".join(out), i + 1


def skip_ws(s, i):
    while True:
        while s[i].isspace():
            i += 1
        if s.startswith("//", i):
            i = s.index("\n", i)
            continue
        return i


def trim(g):
    # the C++ test's trim(): strip the ends, then the blanks that start each line
    g = g.strip(" \n\r\t")
    return re.sub(r"(^|\n)[ \t]+", r"\1", g)


# only the cases inside test_all (the two hand-written checks after it are in the Rust test)
body = src[src.index("static void test_all"):src.index("int main()")]
cases = []
for m in re.finditer(r"\btest\(\{", body):
    i = skip_ws(body, m.end())
    status = re.match(r"(SUCCESS|FAILURE),", body[i:]).group(1)
    i = skip_ws(body, i + len(status) + 1)
    name, i = cxx_string(body, i)
    i = skip_ws(body, i)
    assert body[i] == ",", body[i:i + 40]
    schema, i = cxx_string(body, skip_ws(body, i + 1))
    i = skip_ws(body, i)
    assert body[i] == ",", body[i:i + 40]
    grammar, i = cxx_string(body, skip_ws(body, i + 1))
    i = skip_ws(body, i)
    assert body.startswith("});", i), body[i:i + 40]
    cases.append((status, name, schema, trim(grammar)))

print("# The cases of llama.cpp b11312 tests/test-json-schema-to-grammar.cpp (MIT License,")
print("# Copyright (c) 2023-2026 The ggml authors), extracted by extract_json_schema_cases.py.")
print(f"# {len(cases)} cases.")
for status, name, schema, grammar in cases:
    assert "\n###" not in schema and "\n---" not in schema and "\n###" not in grammar
    print(f"### {status} {name}")
    print("--- schema")
    print(schema.strip("\n"))
    print("--- grammar")
    print(grammar)
