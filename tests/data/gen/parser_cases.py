#!/usr/bin/env python3
# Extracts the expectations of llama.cpp's tests/test-grammar-parser.cpp (b11312, MIT) into
# tests/data/grammar/parser_cases.json, the data of tests/grammar.rs's parser test.
#
# usage: parser_cases.py path/to/tests/test-grammar-parser.cpp [UPSTREAM] > parser_cases.json
#
# Each `verify_parsing(R"""(GRAMMAR)""", {{"name", id}, ...}, {{LLAMA_GRETYPE_X, value}, ...});`
# becomes {"grammar", "symbols": [[name, id], ...], "elements": [[X, value], ...]} (values of
# character elements as code points, RULE_REF ids as written), each `verify_failure(R"""(...)""")`
# a grammar string of "failures", in the order of the source. UPSTREAM, when given, is recorded
# in an "upstream" field (scripts/regenerate-references.sh passes the llama.cpp build it checked).
import json
import re
import sys

src = open(sys.argv[1], encoding="utf-8").read()
# only main()'s calls, not the helpers' definitions and their printf templates
src = src[src.index("int main()"):]

RAW = r'R"""\((.*?)\)"""'
CHAR_ESCAPES = {"\\n": "\n", "\\t": "\t", "\\r": "\r", "\\0": "\0", "\\\\": "\\", "\\'": "'"}


def value(v):
    v = re.sub(r"/\*.*?\*/", "", v).strip()
    if v.startswith("'"):
        c = v[1:-1]
        return ord(CHAR_ESCAPES.get(c, c))
    return int(v)


parsing, failures = [], []
for m in re.finditer(r"verify_(parsing|failure)\(" + RAW, src, re.S):
    grammar = m.group(2)
    if m.group(1) == "failure":
        failures.append(grammar)
        continue
    # the two brace lists that follow the grammar, up to the call's closing ");"
    rest = src[m.end():src.index(");", m.end())]
    rest = re.sub(r"//[^\n]*", "", rest)
    symbols = [[n, int(i)] for n, i in re.findall(r'\{"([^"]*)",\s*(\d+)\}', rest)]
    elements = [[t, value(v)] for t, v in re.findall(r"\{LLAMA_GRETYPE_(\w+),\s*((?:'(?:\\.|[^'])'|/\*.*?\*/|\s|\d)+)\}", rest)]
    parsing.append({"grammar": grammar, "symbols": symbols, "elements": elements})

out = {"source": "llama.cpp b11312 tests/test-grammar-parser.cpp (expected symbol ids and rule elements)"}
if len(sys.argv) > 2:
    out["upstream"] = sys.argv[2]
out["parsing"] = parsing
out["failures"] = failures
sys.stdout.write(json.dumps(out, indent=0, ensure_ascii=False))
