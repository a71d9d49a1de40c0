#!/usr/bin/env python3
"""Writes server/src/upstream_flags.tsv: every command-line option llama-server b11312 accepts,
read from llama.cpp's common/arg.cpp (the options whose examples include the server or all
programs, minus those excluded from the server and the preset-only ones).

    scripts/gen-server-flags.py LLAMA_CPP_SRC > server/src/upstream_flags.tsv

Columns: names (comma-separated, as upstream spells them), negated names, arity (void: no
value; value: one; two: two values; bool: a flag with a negated form), environment variable.
deepseek-server's flags module (server/src/flags.rs) decides what each one does here.
"""
import re
import sys


def statements(src):
    """The text of each `add_opt(common_arg(...))` call, comments removed."""
    i = 0
    while True:
        i = src.find("add_opt(common_arg(", i)
        if i < 0:
            return
        depth, k, in_str, esc = 0, i + len("add_opt"), False, False
        while k < len(src):
            c = src[k]
            if in_str:
                if esc:
                    esc = False
                elif c == "\\":
                    esc = True
                elif c == '"':
                    in_str = False
            elif c == '"':
                in_str = True
            elif c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
                if depth == 0:
                    break
            k += 1
        stmt = src[i : k + 1]
        i = k
        yield re.sub(r"/\*.*?\*/", "", re.sub(r"//[^\n]*", "", stmt), flags=re.S)


def main():
    src = open(sys.argv[1] + "/common/arg.cpp").read()
    print("# llama-server b11312's options, from llama.cpp's common/arg.cpp (scripts/gen-server-flags.py)")
    seen = set()
    for stmt in statements(src):
        body = stmt[len("add_opt(common_arg(") :]
        m = re.match(r"\s*\{([^}]*)\}\s*,\s*(?:\{([^}]*)\}\s*,)?", body)
        names = re.findall(r'"([^"]*)"', m.group(1))
        neg = re.findall(r'"([^"]*)"', m.group(2)) if m.group(2) else []
        lam = re.search(r"\[\]\(common_params\s*&\s*\w*\s*(?:,\s*([^)]*))?\)", body[m.end() :])
        params = lam.group(1) if lam else None
        if neg:
            arity = "bool"
        elif params is None:
            arity = "void"
        elif params.count(",") == 1:
            arity = "two"
        else:
            arity = "value"
        ex = re.search(r"set_examples\(\{([^}]*)\}\)", stmt)
        examples = [e.strip() for e in ex.group(1).split(",")] if ex else ["LLAMA_EXAMPLE_COMMON"]
        exc = re.search(r"set_excludes\(\{([^}]*)\}\)", stmt)
        excludes = [e.strip() for e in exc.group(1).split(",")] if exc else []
        if not ({"LLAMA_EXAMPLE_SERVER", "LLAMA_EXAMPLE_COMMON"} & set(examples)) or "LLAMA_EXAMPLE_SERVER" in excludes or "set_preset_only" in stmt:
            continue
        key = ",".join(names)
        if key in seen:  # -np is declared twice (two example sets)
            continue
        seen.add(key)
        env = re.search(r'set_env\("([^"]*)"\)', stmt)
        print("\t".join([key, ",".join(neg), arity, env.group(1) if env else ""]))


main()
