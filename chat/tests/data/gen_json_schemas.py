"""Schemas for json_schema_oracle.py: a hand-written list of edge cases, then random mixtures of
every keyword the converter knows. Usage: gen_json_schemas.py SEED N > schemas.jsonl"""
import json, random, sys
random.seed(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
N = int(sys.argv[2]) if len(sys.argv) > 2 else 300

names = ["a", "b", "aa", "ab", "and", "also", "", "root", "number", "string", "x y", "é", "ü-ö", "*", "a\"b", "1", "value", "char", "-", "日本", "date", "a_b", "A", "kv"]
consts = [0, 1, -1, 1.5, 1.0, 100.0, 0.001, 1e-5, 1e16, -2.5e-7, 1e300, "s", "a\nb", "q\"", "\\", True, False, None, [1, "x"], {"k": [1.25, None]}, "é", 12345678901234567890, -0.0, 0.1, 2.5e-3]
patterns = ["^abc$", "^a+b*c?$", "^[a-z]{2,5}$", "^(foo|bar)+$", "^\\d+$", "^[0-9]{3}-[0-9]{4}$", "^.{1,3}x$", "^(?:ab|cd){2}$", "^a{,3}$", "^a{2,}$", "^\"$", "^\\\\$", "^a|b$", "^(a(b(c)))$", "^[^\"]*$", "^\\x41\\u0042$", "^a{x}$", "^(a$", "^a)$", "^*a$", "^a\\$", "no anchors", "^$", "^é+$", "^[é-ü]$", "^\\.\\*$", "^a{1,2,3}$", "^[a\\-z]$", "^a.b.$", "^(?<n>a)$", "^a{3}b{3}$", "^(ab){2}(ab){3}$", "^[abc]{2}[abc]{3}$", "^x]$", "^x}$", "^a{99999999999}$"]
formats = ["date", "time", "date-time", "uuid", "uuid4", "uuid7", "email", 3]

def rnd(depth=0):
    r = random.random()
    if depth > 3 or r < 0.25:
        return random.choice(leaf())
    k = random.randrange(9)
    if k == 0:
        props = {}
        for _ in range(random.randrange(0, 4)):
            props[random.choice(names)] = rnd(depth + 1)
        s = {"properties": props}
        if random.random() < 0.6: s["type"] = "object"
        if props and random.random() < 0.6:
            s["required"] = random.sample(list(props), random.randrange(0, len(props) + 1))
        ap = random.randrange(5)
        if ap == 0: s["additionalProperties"] = False
        elif ap == 1: s["additionalProperties"] = True
        elif ap == 2: s["additionalProperties"] = rnd(depth + 1)
        return s
    if k == 1:
        return {random.choice(["anyOf", "oneOf"]): [rnd(depth + 1) for _ in range(random.randrange(1, 4))]}
    if k == 2:
        return {"allOf": [rnd(depth + 1) for _ in range(random.randrange(1, 4))]}
    if k == 3:
        s = {"type": "array", "items": rnd(depth + 1)}
        if random.random() < 0.5: s["minItems"] = random.randrange(0, 4)
        if random.random() < 0.5: s["maxItems"] = random.randrange(0, 5)
        return s
    if k == 4:
        return {"prefixItems": [rnd(depth + 1) for _ in range(random.randrange(1, 4))]}
    if k == 5:
        return {"type": random.sample(["string", "number", "integer", "boolean", "null", "object", "array"], random.randrange(1, 4))}
    if k == 6:
        return {"enum": random.sample(consts, random.randrange(1, 5))}
    if k == 7:
        return {"allOf": [{"enum": random.sample(["a", "b", "c", "d"], 3)}, {"enum": random.sample(["a", "b", "c", "d"], 3)}]}
    return {"type": "object", "properties": {random.choice(names): rnd(depth + 1), random.choice(names): rnd(depth + 1)}, "additionalProperties": rnd(depth + 1)}

def intschema():
    s = {"type": "integer"}
    def v():
        c = random.randrange(6)
        if c == 0: return random.randrange(-10, 10)
        if c == 1: return random.randrange(-1000, 1000)
        if c == 2: return random.randrange(-10**12, 10**12)
        if c == 3: return random.choice([0, 9, 10, 99, 100, 101, 999, -9, -10, -100, 2**31, -2**31, 2**62])
        if c == 4: return random.uniform(-500, 500)
        return random.randrange(-10**18, 10**18)
    kmin = random.choice(["minimum", "exclusiveMinimum", None])
    kmax = random.choice(["maximum", "exclusiveMaximum", None])
    a, b = v(), v()
    if kmin and kmax and isinstance(a, int) and isinstance(b, int) and a > b: a, b = b, a
    if kmin: s[kmin] = a
    if kmax: s[kmax] = b
    return s

def leaf():
    return [
        {"type": "string"}, {"type": "number"}, {"type": "integer"}, {"type": "boolean"}, {"type": "null"}, {},
        {"const": random.choice(consts)},
        {"type": "string", "pattern": random.choice(patterns)},
        {"type": "string", "format": random.choice(formats)},
        {"format": random.choice(formats)},
        {"type": "string", "minLength": random.randrange(0, 4), "maxLength": random.randrange(0, 6)},
        {"type": "string", "minLength": random.randrange(0, 4)},
        intschema(), intschema(),
        {"$ref": "#/$defs/" + random.choice(["a", "b", "c", "missing"])},
        {"$ref": "#/properties/" + random.choice(names)},
        {"type": "array"}, {"type": "object"},
    ]

defs = {"a": {"type": "object", "properties": {"x": {"type": "integer"}, "next": {"$ref": "#/$defs/a"}}},
        "b": {"type": "string", "enum": ["b1", "b2"]},
        "c": {"anyOf": [{"$ref": "#/$defs/b"}, {"type": "null"}]}}
out = []
for i in range(N):
    s = rnd()
    if random.random() < 0.5:
        s = {"type": "object", "properties": {"p": s, "q": rnd()}, "required": ["p"], "$defs": defs}
    else:
        if isinstance(s, dict): s = dict(s); s["$defs"] = defs
    out.append(s)
hand = [
    {"type": "integer", "minimum": -5, "maximum": -1}, {"type": "integer", "exclusiveMinimum": 2.5}, {"type": "integer", "maximum": 9.99},
    {"type": "integer", "minimum": 1e3}, {"type": "integer", "minimum": 9007199254740993},
    {"properties": {"a": {"type": "string"}}, "required": "a"}, {"properties": []}, {"type": "object", "additionalProperties": 1},
    {"type": []}, {"type": ["string", 3]}, {"enum": []}, {"enum": 3}, {"anyOf": []}, {"anyOf": {}}, {"allOf": 3},
    {"$ref": 3}, {"$ref": "#/"}, {"$ref": "#/$defs/x/0", "$defs": {"x": [{"type": "null"}]}}, {"$ref": "#/$defs/x/5", "$defs": {"x": [1]}},
    {"$ref": "#/$defs/x/-0", "$defs": {"x": [{"type": "null"}]}}, {"$ref": "#/$defs/x/ 0", "$defs": {"x": [{"type": "null"}]}}, {"$ref": "#/$defs/x/0abc", "$defs": {"x": [{"type": "null"}]}},
    {"type": "string", "pattern": 1}, {"type": "string", "format": None}, {"minItems": -1, "items": {}}, {"items": {}, "maxItems": 1.0},
    {"type": "string", "minLength": 0, "maxLength": 0}, {"additionalProperties": {"type": "integer"}}, {"additionalProperties": False},
    {"type": "object", "properties": {"a": {}}, "additionalProperties": {}}, {"type": "string", "allOf": [{"enum": ["x"]}]},
    {"allOf": [{"anyOf": [{"properties": {"a": {}}}, {"properties": {"b": {}}}]}, {"properties": {"c": {}}}]},
    {"items": [{}, {"type": "integer"}], "minItems": 5}, {"type": "array", "items": {"type": "array", "items": {"type": "array"}}},
    {"properties": {"a b": {"type": "string"}, "a-b": {"type": "number"}, "a.b": {"type": "boolean"}}},
    {"properties": {"root": {}, "space": {}, "value": {"type": "string"}}, "additionalProperties": {"type": "null"}},
    {"type": "string", "pattern": "^" + "(" * 101 + "a" + ")" * 101 + "$"},
    {"type": "string", "pattern": "^" + "(" * 99 + "a" + ")" * 99 + "$"},
    {"type": ["null"], "enum": [1]}, {"const": None}, {"const": {"b": 1, "a": 2}}, {"type": "boolean", "const": 3},
    {"oneOf": [{"type": "string"}], "anyOf": [{"type": "null"}]},
    {"properties": {"x": {"type": "integer", "minimum": 0, "maximum": 0}}}, {"type": "integer", "minimum": 0, "maximum": 0},
    {"type": "integer", "minimum": -9223372036854775807}, {"type": "integer", "maximum": -9223372036854775807},
    {"properties": {"x": {"properties": {"1": {"allOf": [{"$ref": "#/properties/x"}]}}}}},
    {"type": "string", "pattern": "^é+$"},
]
for s in hand + out:
    print(json.dumps(s, ensure_ascii=False))
