#!/usr/bin/env python3
"""Writes server/src/upstream_fields.tsv: the request fields llama-server b11312 reads for a
completion (tools/server/server-schema.cpp's make_llama_cmpl_schema), one per line: name,
aliases (comma-separated), kind (bool, num, str, json, nested).

    scripts/gen-server-fields.py LLAMA_CPP_SRC > server/src/upstream_fields.tsv

deepseek-server's fields module (server/src/fields.rs) decides what each one does here.
"""
import re
import sys

src = open(sys.argv[1] + "/tools/server/server-schema.cpp").read()
body = src[src.index("make_llama_cmpl_schema("):]
body = body[: body.index("\n}\n")]
body = re.sub(r"//[^\n]*", "", body)
print("# llama-server b11312's completion request fields, from tools/server/server-schema.cpp (scripts/gen-server-fields.py)")
for m in re.finditer(r"new field_(bool|num|str|json|nested)\(\"([^\"]+)\"", body):
    kind, name = m.group(1), m.group(2)
    # the aliases of this field: add_alias calls before the next field
    nxt = body.find("new field_", m.end())
    part = body[m.end() : nxt if nxt > 0 else len(body)]
    aliases = re.findall(r'add_alias\("([^"]+)"\)', part)
    print("\t".join([name, ",".join(aliases), kind]))
