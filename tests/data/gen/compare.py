#!/usr/bin/env python3
# Compares regenerated reference files with the committed ones (scripts/regenerate-references.sh).
#
#   compare.py NEW_ROOT OLD_ROOT PATH...      (PATHs relative to both roots)
#
# Prints one line per path: "identical" (same bytes; for .gz the same decompressed bytes), or
# "differs" with what differs, measured the way the tests measure it:
#   .f32 logits (a golden JSON beside it gives n_vocab): worst row cosine, max |Δ| relative to
#        the row's largest |logit|, rows whose argmax differs; other .f32 (embeddings, op
#        outputs): max |Δ| and max |Δ| / max |x|, bits equal or not;
#   .router (gen_trace.c records): records whose chosen experts differ, max |Δ| of the scores;
#   .json/.jsonl: the keys whose integers (token ids) differ, max |Δ| of the floats;
#   text: the number of differing lines.
# Floating-point references made on another CPU (AVX2 vs AVX-512, another compiler) may differ
# in the last bits, and a greedy token chosen on a near-tie may differ with everything after it:
# a "differs" line is a measurement, not a failure. Exit status 0 unless a path is missing.
import gzip
import json
import math
import os
import struct
import sys

new_root, old_root, paths = sys.argv[1], sys.argv[2], sys.argv[3:]


def read(root, p):
    with open(os.path.join(root, p), "rb") as f:
        data = f.read()
    return gzip.decompress(data) if p.endswith(".gz") else data


def floats(b):
    return struct.unpack("<%df" % (len(b) // 4), b[: len(b) // 4 * 4])


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na and nb else (1.0 if na == nb else 0.0)


def argmax(v):
    return max(range(len(v)), key=v.__getitem__)


def n_vocab_of(p):
    stem = p[: -len(".f32")]
    for root in (new_root, old_root):
        j = os.path.join(root, stem + ".json")
        if os.path.exists(j):
            try:
                return int(json.load(open(j))["n_vocab"])
            except (ValueError, KeyError):
                pass
    return None


def cmp_f32(p, new, old):
    a, b = floats(new), floats(old)
    if len(a) != len(b):
        return "differs: %d vs %d floats" % (len(a), len(b))
    n = n_vocab_of(p)
    if n and len(a) % n == 0:
        rows = len(a) // n
        worst_cos, worst_rel, flips = 1.0, 0.0, []
        for r in range(rows):
            x, y = a[r * n:(r + 1) * n], b[r * n:(r + 1) * n]
            worst_cos = min(worst_cos, cosine(x, y))
            scale = max(abs(v) for v in y) or 1.0
            worst_rel = max(worst_rel, max(abs(u - v) for u, v in zip(x, y)) / scale)
            if argmax(x) != argmax(y):
                flips.append(r)
        differing = sum(1 for r in range(rows) if a[r * n:(r + 1) * n] != b[r * n:(r + 1) * n])
        return "differs: %d of %d rows, worst row cosine %.7f, max |Δ|/max|x| %.2e, argmax differs on %d rows%s" % (
            differing, rows, worst_cos, worst_rel, len(flips), (" " + str(flips[:8])) if flips else "")
    d = max(abs(u - v) for u, v in zip(a, b))
    scale = max(abs(v) for v in b) or 1.0
    ne = sum(1 for u, v in zip(a, b) if u != v)
    return "differs: %d of %d floats, max |Δ| %.3g, max |Δ|/max|x| %.2e" % (ne, len(a), d, d / scale)


def records(b):
    out, i = [], 0
    while i + 20 <= len(b):
        dec, layer, kind, ne0, nt = struct.unpack_from("<5I", b, i)
        i += 20
        fmt = "<%d%s" % (ne0 * nt, "f" if kind == 0 else "i")
        out.append(((dec, layer, kind, ne0, nt), struct.unpack_from(fmt, b, i)))
        i += 4 * ne0 * nt
    return out


def cmp_router(new, old):
    a, b = records(new), records(old)
    if [h for h, _ in a] != [h for h, _ in b]:
        return "differs: record layout (%d vs %d records)" % (len(a), len(b))
    chosen_diff = sum(1 for (h, x), (_, y) in zip(a, b) if h[2] == 1 and sorted(x) != sorted(y))
    n_chosen = sum(1 for h, _ in a if h[2] == 1)
    d = max([abs(u - v) for (h, x), (_, y) in zip(a, b) if h[2] == 0 for u, v in zip(x, y)] or [0.0])
    return "differs: chosen experts differ in %d of %d records, max score |Δ| %.3g" % (chosen_diff, n_chosen, d)


IGNORED_KEYS = {"producer"}  # a path on the machine that made the file


def walk(x, y, path, acc):
    if isinstance(x, dict) and isinstance(y, dict):
        for k in sorted(set(x) | set(y)):
            if k in IGNORED_KEYS:
                continue
            if k not in x or k not in y:
                acc["keys"].add(path + "." + k)
            else:
                walk(x[k], y[k], path + "." + k, acc)
    elif isinstance(x, list) and isinstance(y, list):
        if len(x) != len(y):
            acc["ints"].add(path + " (length)")
        for i, (u, v) in enumerate(zip(x, y)):
            walk(u, v, path, acc)
    elif isinstance(x, bool) or isinstance(y, bool) or isinstance(x, str) or isinstance(y, str):
        if x != y:
            acc["ints"].add(path)
    elif isinstance(x, int) and isinstance(y, int):
        if x != y:
            acc["ints"].add(path)
    elif isinstance(x, (int, float)) and isinstance(y, (int, float)):
        acc["float"] = max(acc["float"], abs(x - y))
    elif x != y:
        acc["ints"].add(path)


def cmp_json(p, new, old):
    def docs(b):
        t = b.decode("utf-8")
        return [json.loads(l) for l in t.splitlines() if l.strip()] if p.endswith(".jsonl") else [json.loads(t)]
    try:
        a, b = docs(new), docs(old)
    except ValueError as e:
        return "differs (unparsable: %s)" % e
    if len(a) != len(b):
        return "differs: %d vs %d lines" % (len(a), len(b))
    acc = {"keys": set(), "ints": set(), "float": 0.0}
    lines = 0
    for x, y in zip(a, b):
        before = (len(acc["ints"]), len(acc["keys"]), acc["float"])
        walk(x, y, "", acc)
        lines += before != (len(acc["ints"]), len(acc["keys"]), acc["float"])
    if not acc["keys"] and not acc["ints"] and acc["float"] == 0.0:
        return "equal values (bytes differ: formatting or ignored keys %s)" % sorted(IGNORED_KEYS)
    what = []
    if acc["ints"]:
        what.append("integers/strings differ at %s" % ", ".join(sorted(acc["ints"])[:6]))
    if acc["keys"]:
        what.append("keys only on one side: %s" % ", ".join(sorted(acc["keys"])[:6]))
    what.append("max float |Δ| %.3g" % acc["float"])
    return "differs%s: %s" % (" in %d of %d lines" % (lines, len(a)) if p.endswith(".jsonl") else "", "; ".join(what))


def cmp_text(new, old):
    a, b = new.split(b"\n"), old.split(b"\n")
    n = sum(1 for x, y in zip(a, b) if x != y) + abs(len(a) - len(b))
    return "differs: %d of %d lines" % (n, len(b))


missing = 0
for p in paths:
    if not os.path.exists(os.path.join(new_root, p)):
        print("%-60s not regenerated" % p)
        missing += 1
        continue
    if not os.path.exists(os.path.join(old_root, p)):
        print("%-60s new (no committed file)" % p)
        continue
    new, old = read(new_root, p), read(old_root, p)
    if new == old:
        status = "identical"
    elif p.endswith(".f32"):
        status = cmp_f32(p, new, old)
    elif p.endswith(".router"):
        status = cmp_router(new, old)
    elif p.endswith(".json") or p.endswith(".jsonl"):
        status = cmp_json(p, new, old)
    elif p.endswith(".gguf"):
        status = "differs (%d vs %d bytes)" % (len(new), len(old))
    else:
        status = cmp_text(new, old)
    print("%-60s %s" % (p, status))
sys.exit(1 if missing else 0)
