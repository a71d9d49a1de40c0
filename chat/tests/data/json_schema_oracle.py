"""Writes json_schema_oracle.txt: each schema of a file (one JSON per line, e.g. from
gen_json_schemas.py) with the grammar or error llama.cpp's own converter gives for it.

Usage:
  g++ -std=c++17 -I$LLAMA/common -I$LLAMA/include -I$LLAMA/ggml/include -I$LLAMA/vendor \\
      json_schema_oracle.cpp -L$BUILD/bin -lllama-common -lllama -Wl,-rpath,$BUILD/bin -o json_schema_oracle
  python3 gen_json_schemas.py 3 150 > schemas.jsonl
  python3 json_schema_oracle.py ./json_schema_oracle schemas.jsonl > json_schema_oracle.txt

($LLAMA: the llama.cpp b11312 tree, e.g. llama-cpp-python 0.3.36's vendor/llama.cpp; $BUILD: its
CMake build.) The program is restarted after a crash, and the schema that crashed it is marked.
"""
import subprocess
import sys

exe, path = sys.argv[1], sys.argv[2]
schemas = open(path, "rb").read().split(b"\n")[:-1]
results = []
i = 0
while i < len(schemas):
    p = subprocess.run([exe], input=b"\n".join(schemas[i:]) + b"\n", capture_output=True)
    blocks = p.stdout.split(b"\x01\n")[:-1]
    results += blocks
    i += len(blocks)
    if p.returncode != 0 and i < len(schemas):
        results.append(b"CRASH\n")
        i += 1

out = sys.stdout
print("# JSON schemas and the grammar (or error) llama.cpp b11312's json_schema_to_grammar(schema, true)")
print("# gives for each (MIT License, Copyright (c) 2023-2026 The ggml authors), made by")
print("# json_schema_oracle.py (see there) from gen_json_schemas.py's schemas. Each case: '### ' and")
print("# the schema (one line of JSON), then '--- ok' and the grammar, '--- error' and the message,")
print("# or '--- crash' where upstream crashes, up to the next case. Cases whose upstream grammar is")
print("# not UTF-8 are left out (see non_ascii_pattern_characters_repeat_whole).")
for s, r in zip(schemas, results):
    kind, _, text = r.partition(b"\n")
    try:
        text = text.decode("utf-8")
    except UnicodeDecodeError:
        continue
    print("### " + s.decode("utf-8"))
    if kind == b"OK":
        print("--- ok")
        out.write(text)
    elif kind == b"ERR":
        print("--- error")
        out.write(text)
    else:
        assert kind == b"CRASH", kind
        print("--- crash")
