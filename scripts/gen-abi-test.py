#!/usr/bin/env python3
"""Generates c_tests/abi_generated.c: _Static_asserts on every struct size, field offset and
field size, every enum value and enum size, the integer #defines and the scalar typedefs that
llama.h b11312 shows a caller, with the values upstream's own header gives (x86-64).

usage: scripts/gen-abi-test.py LLAMA_CPP_SOURCE_DIR [OUT.c]

LLAMA_CPP_SOURCE_DIR is the pinned llama.cpp tree (llama-cpp-python 0.3.36's vendor/llama.cpp).
Its include/llama.h must equal tests/data/llama-b11312.h. The names come from parsing that
header (plus the ggml enums and structs llama.h's API uses); the numbers come from compiling a
probe program against upstream's headers with cc and running it. The output is compiled against
OUR include/llama.h by tests/c_harness.rs, so any difference is a compile error naming the item.
Run once per pinned upstream version; the output is committed.
"""
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PINNED = os.path.join(ROOT, "tests/data/llama-b11312.h")

# ggml types that appear in llama.h's structs and function signatures, defined by ggml's headers.
GGML_ITEMS = {
    "ggml.h": {"enum ggml_type", "enum ggml_log_level"},
    "ggml-cpu.h": {"enum ggml_numa_strategy"},
    "ggml-opt.h": {"enum ggml_opt_optimizer_type", "struct ggml_opt_optimizer_params"},
}


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def matching_brace(text, open_at):
    depth = 0
    for i in range(open_at, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i
    raise ValueError("unbalanced braces")


def split_top(text, sep):
    """Splits at `sep` outside (), {} and []."""
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch in "({[":
            depth += 1
        elif ch in ")}]":
            depth -= 1
        if ch == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def definitions(text):
    """Yields (kind, name, body) for every `struct|enum|union NAME {...}` at any nesting level
    that has a name (typedef'd or not)."""
    for m in re.finditer(r"\b(struct|enum|union)\s+(\w+)\s*\{", text):
        close = matching_brace(text, m.end() - 1)
        yield m.group(1), m.group(2), text[m.end():close]


def fields(body, prefix=""):
    """Field designators of a struct body; anonymous unions/structs contribute their members,
    named nested aggregates their members as `outer.inner`."""
    out = []
    for decl in split_top(body, ";"):
        nested = re.match(r"^(?:struct|union)\s*(\w+\s*)?\{", decl)
        if nested and nested.group(1) is None:
            close = matching_brace(decl, decl.index("{"))
            inner, rest = decl[decl.index("{") + 1:close], decl[close + 1:].strip()
            if rest:  # struct { ... } name;
                out.append(prefix + rest)
                out += fields(inner, prefix + rest + ".")
            else:  # anonymous: members belong to the enclosing struct
                out += fields(inner, prefix)
            continue
        fnptr = re.search(r"\(\s*\*\s*(\w+)\s*\)\s*\(", decl)
        if fnptr:
            out.append(prefix + fnptr.group(1))
            continue
        for declarator in split_top(decl, ","):
            name = re.search(r"(\w+)\s*(\[[^\]]*\]\s*)*$", declarator)
            out.append(prefix + name.group(1))
    return out


def enumerators(body):
    return [re.match(r"\s*(\w+)", e).group(1) for e in split_top(body, ",")]


def collect(upstream):
    llama_h = strip_comments(open(PINNED).read())
    items = []  # (kind, name, members)
    for kind, name, body in definitions(llama_h):
        items.append((kind, name, enumerators(body) if kind == "enum" else fields(body)))
    for header, wanted in GGML_ITEMS.items():
        text = strip_comments(open(os.path.join(upstream, "ggml/include", header)).read())
        for kind, name, body in definitions(text):
            if f"{kind} {name}" in wanted:
                items.append((kind, name, enumerators(body) if kind == "enum" else fields(body)))
                wanted = wanted - {f"{kind} {name}"}
        assert not wanted, f"not found in {header}: {wanted}"
    defines = [m.group(1) for m in re.finditer(r"^#define\s+(LLAMA_\w+)\s+\S", llama_h, re.M)
               if m.group(1) not in ("LLAMA_API", "LLAMA_H")]
    integers = re.findall(r"typedef\s+u?int\d+_t\s+(\w+)\s*;", llama_h)
    pointers = re.findall(r"typedef\s+(?:struct\s+\w+|void)\s*\*\s*(\w+)\s*;", llama_h)
    return items, defines, integers, pointers


def probe(upstream, items, defines, integers, pointers):
    """Values from upstream's headers: compiles and runs a program that prints one line per fact."""
    lines = ['#include <stdio.h>', '#include <stddef.h>', '#include "llama.h"', "int main(void) {"]
    for kind, name, members in items:
        if kind == "enum":
            lines.append(f'printf("ESIZE {name} %zu\\n", sizeof(enum {name}));')
            for e in members:
                lines.append(f'printf("ENUM {name} {e} %lld\\n", (long long){e});')
        else:
            lines.append(f'printf("SIZE {kind} {name} %zu\\n", sizeof({kind} {name}));')
            for f in members:
                lines.append(f'printf("OFF {kind} {name} {f} %zu %zu\\n", offsetof({kind} {name}, {f}), '
                             f'sizeof((({kind} {name} *)0)->{f}));')
    for d in defines:
        lines.append(f'printf("DEFINE {d} %lld\\n", (long long)({d}));')
    for t in integers:
        lines.append(f'printf("TYPEDEF {t} %zu %d\\n", sizeof({t}), (int)((({t})-1) < ({t})1));')
    for t in pointers:
        lines.append(f'printf("PTRTYPE {t} %zu\\n", sizeof({t}));')
    lines += ["return 0;", "}"]
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = os.path.join(tmp, "probe.c"), os.path.join(tmp, "probe")
        open(src, "w").write("\n".join(lines) + "\n")
        subprocess.run(["cc", "-std=c11", "-w", "-I", os.path.join(upstream, "include"),
                        "-I", os.path.join(upstream, "ggml/include"), src, "-o", exe], check=True)
        return subprocess.run([exe], check=True, capture_output=True, text=True).stdout.splitlines()


def render(facts):
    out = [
        "/* Generated by scripts/gen-abi-test.py from llama.cpp b11312's headers (llama-cpp-python 0.3.36,",
        " * vendor/llama.cpp): do not edit. Every struct size, field offset and field size, enum value and",
        " * enum size, integer #define and scalar typedef that llama.h shows a caller, as upstream",
        " * compiles them on x86-64. tests/c_harness.rs compiles this against OUR include/llama.h. */",
        "#include <stddef.h>",
        '#include "llama.h"',
        "",
        "#define SIZE(T, v) _Static_assert(sizeof(T) == (v), \"sizeof \" #T)",
        "#define OFF(T, f, off, size) _Static_assert(offsetof(T, f) == (off) && sizeof(((T *)0)->f) == (size), #T \".\" #f \" offset/size\")",
        "#define ENUM(e, v) _Static_assert((long long)(e) == (v), #e)",
        "#define DEFINE(d, v) _Static_assert((long long)(d) == (v), #d)",
        "#define TYPEDEF(t, size, is_signed) _Static_assert(sizeof(t) == (size) && (((t)-1) < (t)1) == (is_signed), #t)",
        "",
    ]
    for line in facts:
        w = line.split()
        if w[0] == "SIZE":
            out.append(f"SIZE({w[1]} {w[2]}, {w[3]});")
        elif w[0] == "OFF":
            out.append(f"OFF({w[1]} {w[2]}, {w[3]}, {w[4]}, {w[5]});")
        elif w[0] == "ESIZE":
            out.append(f"SIZE(enum {w[1]}, {w[2]});")
        elif w[0] == "ENUM":
            out.append(f"ENUM({w[2]}, {w[3]}LL);")
        elif w[0] == "DEFINE":
            out.append(f"DEFINE({w[1]}, {w[2]}LL);")
        elif w[0] == "PTRTYPE":
            out.append(f"SIZE({w[1]}, {w[2]});")
        elif w[0] == "TYPEDEF":
            out.append(f"TYPEDEF({w[1]}, {w[2]}, {w[3]});")
    out += ["", "int main(void) { return 0; }", ""]
    return "\n".join(out)


def main():
    upstream = sys.argv[1]
    dest = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "c_tests/abi_generated.c")
    if open(os.path.join(upstream, "include/llama.h")).read() != open(PINNED).read():
        sys.exit(f"{upstream}/include/llama.h differs from {PINNED}: not the pinned version")
    items, defines, integers, pointers = collect(upstream)
    facts = probe(upstream, items, defines, integers, pointers)
    open(dest, "w").write(render(facts))
    counts = {k: sum(1 for f in facts if f.startswith(k + " ")) for k in ("SIZE", "OFF", "ESIZE", "ENUM", "DEFINE", "TYPEDEF", "PTRTYPE")}
    print(f"wrote {dest}: {counts}")


if __name__ == "__main__":
    main()
