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


def golden_json(root, p):
    j = os.path.join(root, p[: -len(".f32")] + ".json")
    try:
        return json.load(open(j))
    except (OSError, ValueError):
        return None


def fed_differently(p):
    """Rows of a golden whose inputs differ between the two files: from the first greedy token
    (B_tokens, LB_tokens) where the two runs chose differently, every later row of that scenario."""
    a, b = golden_json(new_root, p), golden_json(old_root, p)
    rows = set()
    if not a or not b:
        return rows
    for key, first in (("B_tokens", a.get("B_rows", [None])[0]), ("LB_tokens", len(a.get("L_positions", [])))):
        x, y = a.get(key), b.get(key)
        if not x or not y or first is None:
            continue
        k = next((i for i, (u, v) in enumerate(zip(x, y)) if u != v), None)
        if k is not None:
            rows.update(range(first + k, first + len(x)))
    return rows


def n_vocab_of(p):
    for root in (new_root, old_root):
        g = golden_json(root, p)
        if g and "n_vocab" in g:
            return int(g["n_vocab"])
    return None


def cmp_f32(p, new, old):
    a, b = floats(new), floats(old)
    if len(a) != len(b):
        return "differs: %d vs %d floats" % (len(a), len(b))
    n = n_vocab_of(p)
    if n and len(a) % n == 0:
        rows = len(a) // n
        cosines, worst_rel, flips = [], 0.0, []
        for r in range(rows):
            x, y = a[r * n:(r + 1) * n], b[r * n:(r + 1) * n]
            cosines.append(cosine(x, y))
            scale = max(abs(v) for v in y) or 1.0
            worst_rel = max(worst_rel, max(abs(u - v) for u, v in zip(x, y)) / scale)
            if argmax(x) != argmax(y):
                flips.append(r)
        differing = sum(1 for r in range(rows) if a[r * n:(r + 1) * n] != b[r * n:(r + 1) * n])
        median = lambda v: sorted(v)[len(v) // 2]
        text = "differs: %d of %d rows, row cosine worst %.7f median %.7f, max |Δ|/max|x| %.2e, argmax differs on %d rows%s" % (
            differing, rows, min(cosines), median(cosines), worst_rel, len(flips), (" " + str(flips[:8])) if flips else "")
        other = fed_differently(p)
        if other:
            # what the tests see: they feed the reference's tokens, so compare the rows both runs
            # computed on the same tokens
            same = [cosines[r] for r in range(rows) if r not in other]
            text += "; the greedy tokens part at row %d: over the %d rows fed the same tokens, cosine worst %.7f median %.7f, argmax differs on %d" % (
                min(other), len(same), min(same), median(same), sum(1 for r in flips if r not in other))
        return text
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


def cmp_generate(a, b):
    """golden.c generate lines: where the greedy tokens part, and the top-5 logits before that."""
    parts, d, steps = [], 0.0, 0
    for x, y in zip(a, b):
        k = 0
        for u, v in zip(x["steps"], y["steps"]):
            if u["token"] != v["token"]:
                break
            lu = dict(map(tuple, u["top5"]))
            d = max([d] + [abs(lu[i] - l) for i, l in v["top5"] if i in lu])
            k += 1
        steps += k
        if k < min(len(x["steps"]), len(y["steps"])):
            parts.append("%r at step %d" % (x["prompt"][:24], k))
    return "differs: tokens part in %d of %d prompts (%s); over the %d steps before, top-5 logits max |Δ| %.3g" % (
        len(parts), len(a), ", ".join(parts), steps, d)


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
    if all("steps" in x for x in a + b) and a != b:
        return cmp_generate(a, b)
    if len(a) == 1 and "embeddings" in a[0] and "embeddings" in b[0] and a[0]["embeddings"] != b[0]["embeddings"]:
        x, y = a[0]["embeddings"], b[0]["embeddings"]
        if len(x) == len(y):
            rel = max(max(abs(u - v) for u, v in zip(r, q)) / (max(abs(v) for v in q) or 1.0) for r, q in zip(x, y))
            return "differs: %d rows, worst row cosine %.7f, max |Δ|/max|x| %.2e%s" % (
                len(x), min(cosine(r, q) for r, q in zip(x, y)), rel, "" if a[0].get("tokens") == b[0].get("tokens") else ", tokens differ")
    acc = {"keys": set(), "ints": set(), "float": 0.0}
    lines = 0
    for x, y in zip(a, b):
        one = {"keys": set(), "ints": set(), "float": 0.0}
        walk(x, y, "", one)
        lines += bool(one["keys"] or one["ints"] or one["float"])
        acc["keys"] |= one["keys"]
        acc["ints"] |= one["ints"]
        acc["float"] = max(acc["float"], one["float"])
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
