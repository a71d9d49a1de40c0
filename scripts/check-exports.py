#!/usr/bin/env python3
"""Compares the functions of the pinned upstream llama.h with ours.

usage: scripts/check-exports.py UPSTREAM_LLAMA_H OUR_DEEPSEEK_H [LIBDEEPSEEK_SO]

1. Extracts every `LLAMA_API` declaration of the upstream header (deprecated aliases included),
   and every function declaration of our generated header (include/deepseek.h).
2. Normalizes each to `return type (param types...)` (parameter names dropped, whitespace,
   `struct`/`enum` tags and `(void)` unified) and reports functions missing from our header or
   declared with a different signature.
3. With a library path, also checks `nm -D --defined-only` lists each upstream function.
Exit status 1 when anything is missing or differs; prints one line per problem.
"""
import re
import subprocess
import sys

# Our header spells a few upstream typedefs by their underlying type (cbindgen has no
# typedef for them); these are the same C types.
EQUIV = {
    "llama_token": "int32_t",
    "llama_pos": "int32_t",
    "llama_seq_id": "int32_t",
    "llama_state_seq_flags": "uint32_t",
    "int": "int32_t",
}


def strip_comments(src):
    src = re.sub(r"/\*.*?\*/", " ", src, flags=re.S)
    src = re.sub(r"//[^\n]*", " ", src)
    # preprocessor lines (with continuations)
    src = re.sub(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", " ", src, flags=re.M)
    return src


def split_params(s):
    out, depth, cur = [], 0, ""
    for ch in s:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur)
    return out


def norm_type(t, drop_name):
    t = " ".join(t.replace("*", " * ").split())
    t = re.sub(r"\b(struct|enum)\s+", "", t)
    toks = t.split()
    if drop_name and len(toks) > 1 and re.fullmatch(r"[A-Za-z_]\w*", toks[-1]) and toks[-1] not in ("const",):
        # the last identifier is the parameter name unless the type is a single word
        toks = toks[:-1]
    toks = [EQUIV.get(x, x) for x in toks]
    # "T const *" and "const T *" are the same
    if len(toks) >= 2 and toks[0] == "const":
        toks = toks[1:2] + ["const"] + toks[2:]
    return " ".join(toks).replace(" *", "*")


def parse_decl(decl):
    decl = " ".join(decl.split())
    m = re.match(r"^(.*?)\b([A-Za-z_]\w*)\s*\((.*)\)$", decl)
    if not m:
        return None
    ret, name, params = m.groups()
    ps = [p for p in split_params(params)]
    if len(ps) == 1 and ps[0].strip() in ("void", ""):
        ps = []
    return name, (norm_type(ret, False), tuple(norm_type(p, True) for p in ps))


def upstream_decls(path):
    src = strip_comments(open(path).read())
    decls = {}
    for m in re.finditer(r"\bLLAMA_API\b(.*?);", src, flags=re.S):
        d = m.group(1)
        # DEPRECATED(LLAMA_API decl, "hint"): drop the hint and the closing parenthesis
        d = re.sub(r'\)\s*,\s*"[^"]*"\s*\)\s*$', ")", d.strip())
        # LLAMA_API DEPRECATED(decl, "hint")
        d = re.sub(r"^DEPRECATED\s*\(", "", d)
        p = parse_decl(d)
        if p is None:
            raise SystemExit(f"cannot parse upstream declaration: {d!r}")
        decls[p[0]] = p[1]
    return decls


def our_decls(path):
    src = strip_comments(open(path).read())
    src = re.sub(r'extern\s+"C"\s*\{', " ", src)
    decls = {}
    # function declarations: a statement ending in ')' ';' that is not a typedef or inside a struct
    for stmt in re.split(r"[;{}]", src):
        s = " ".join(stmt.split())
        if not s or s.startswith("typedef") or "(" not in s:
            continue
        s = re.sub(r"^(extern|DS_API)\s+", "", s)
        p = parse_decl(s)
        if p and re.fullmatch(r"(llama|ggml|ds)_\w+", p[0]):
            decls[p[0]] = p[1]
    return decls


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    up = upstream_decls(sys.argv[1])
    ours = our_decls(sys.argv[2])
    problems = 0
    for name, sig in sorted(up.items()):
        if name not in ours:
            print(f"missing: {name}")
            problems += 1
        elif ours[name] != sig:
            print(f"signature differs: {name}\n  upstream: {sig}\n  ours:     {ours[name]}")
            problems += 1
    if len(sys.argv) > 3:
        out = subprocess.run(["nm", "-D", "--defined-only", sys.argv[3]], capture_output=True, text=True, check=True).stdout
        syms = {l.split()[-1] for l in out.splitlines() if l.split()}
        for name in sorted(up):
            if name not in syms:
                print(f"not exported by {sys.argv[3]}: {name}")
                problems += 1
    print(f"{len(up)} upstream functions, {len(ours)} declared by our header, {problems} problems")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
