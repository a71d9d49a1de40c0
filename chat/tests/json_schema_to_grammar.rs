//! The JSON schema converter (`chat/src/schema.rs`) against llama.cpp b11312's
//! tests/test-json-schema-to-grammar.cpp: every case of upstream's list (in
//! `data/json_schema_to_grammar.txt`, extracted by `data/extract_json_schema_cases.py`) must
//! give exactly upstream's grammar (compared as upstream compares: both trimmed, blanks at the
//! start of lines dropped) or fail where upstream fails; every expected grammar must parse with
//! the library's GBNF parser and have a root; and upstream's two hand-written checks (a document
//! parsed first, a sub-schema with a $ref) hold too.

use deepseek_chat::schema;

use serde_json::Value;

struct Case {
    success: bool,
    name: String,
    schema: String,
    grammar: String,
}

fn cases() -> Vec<Case> {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/json_schema_to_grammar.txt")).expect("the cases");
    let mut out = Vec::new();
    for block in text.split("\n### ").skip(1) {
        let (head, rest) = block.split_once('\n').expect("a case header");
        let (status, name) = head.split_once(' ').expect("status and name");
        let rest = rest.strip_prefix("--- schema\n").expect("--- schema");
        let (schema, grammar) = rest.split_once("\n--- grammar\n").expect("--- grammar");
        out.push(Case { success: status == "SUCCESS", name: name.to_string(), schema: schema.to_string(), grammar: grammar.trim_end_matches('\n').to_string() });
        assert!(status == "SUCCESS" || status == "FAILURE", "{head}");
    }
    out
}

/// Upstream's trim(): the ends stripped, then the blanks starting each line.
fn trim(s: &str) -> String {
    let s = s.trim_matches([' ', '\n', '\r', '\t']);
    s.split('\n').map(|l| l.trim_start_matches([' ', '\t'])).collect::<Vec<_>>().join("\n")
}

fn parses_with_root(grammar: &str) -> Result<(), String> {
    let parsed = deepseek::sampling::grammar::parser::parse(grammar.as_bytes(), None).map_err(|e| e.describe(grammar.as_bytes()))?;
    if !parsed.symbol_ids.contains_key(&b"root"[..]) {
        return Err("no root rule".into());
    }
    Ok(())
}

#[test]
fn upstream_cases_give_upstream_grammars() {
    let cases = cases();
    assert_eq!(cases.len(), 81, "the data file holds upstream's 81 cases");
    assert_eq!(cases.iter().filter(|c| !c.success).count(), 3);
    let mut failed = Vec::new();
    for c in &cases {
        let schema: Value = serde_json::from_str(&c.schema).unwrap_or_else(|e| panic!("{}: the schema is not JSON: {e}", c.name));
        match (schema::json_schema_to_grammar(&schema), c.success) {
            (Ok(g), true) => {
                if trim(&g.grammar) != trim(&c.grammar) {
                    failed.push(format!("# {}\n# EXPECTED:\n{}\n# ACTUAL:\n{}", c.name, c.grammar, g.grammar));
                }
            }
            (Err(e), false) => assert!(e.starts_with("JSON schema conversion failed:\n"), "{}: {e}", c.name),
            (Ok(g), false) => failed.push(format!("# {}: expected a failure, got\n{}", c.name, g.grammar)),
            (Err(e), true) => failed.push(format!("# {}: expected a grammar, got the error {e}", c.name)),
        }
    }
    assert!(failed.is_empty(), "{} of {} cases differ from upstream:\n{}", failed.len(), cases.len(), failed.join("\n"));
}

#[test]
fn expected_grammars_parse() {
    for c in cases().iter().filter(|c| c.success) {
        parses_with_root(&c.grammar).unwrap_or_else(|e| panic!("{}: {e}\n{}", c.name, c.grammar));
        // and the library's full grammar set-up (left recursion, initial stacks) accepts them
        let g = deepseek::sampling::grammar::Grammar::new(c.grammar.as_bytes(), b"root", None, Default::default());
        assert!(g.is_ok(), "{}: {:?}", c.name, g.err());
    }
}

#[test]
fn upstream_error_messages() {
    let err = |s: &str| schema::json_schema_to_grammar(&serde_json::from_str(s).unwrap()).err().expect("an error");
    assert_eq!(err(r#"{"type": "kaboom"}"#), "JSON schema conversion failed:\nJSON schema error at #: unrecognized type kaboom");
    assert_eq!(err(r#"{"type": 123}"#), "JSON schema conversion failed:\nJSON schema error at #: type must be a string or an array of strings");
    assert_eq!(err(r#"{"type": "string", "pattern": "^(a$"}"#), "JSON schema conversion failed:\nInvalid pattern ^(a$: unbalanced parentheses");
    assert_eq!(err(r#"{"properties": {"a": {"$ref": "https://x/y"}}}"#), "JSON schema conversion failed:\nJSON schema error at #/properties/a: unsupported $ref https://x/y, only references into the same document are supported");
    assert_eq!(err(r##"{"$ref": "#/definitions/missing"}"##), "JSON schema conversion failed:\nJSON schema error at #: cannot resolve $ref #/definitions/missing, definitions not found");
    assert_eq!(err(r#"{"items": [{}, 3]}"#), "JSON schema conversion failed:\nJSON schema error at #/items/1: schema must be an object");
    assert_eq!(err(r#"{"type": "string", "minLength": -1}"#), "JSON schema conversion failed:\nJSON schema error at #: minLength must be a non-negative integer");
    // an unsupported pattern is a warning, not an error: any string
    let c = schema::json_schema_to_grammar(&serde_json::from_str(r#"{"type": "string", "pattern": "^(?=a)a$"}"#).unwrap()).unwrap();
    assert_eq!(c.warnings, ["pattern ^(?=a)a$ is not supported (unsupported group syntax), accepting any string"]);
}

/// upstream: "a document parsed up front gives the same grammar as the JSON, recursion included"
#[test]
fn parsed_document_gives_the_same_grammar() {
    let schema: Value = serde_json::from_str(
        r##"{
            "$ref": "#/$defs/node",
            "$defs": {
                "node": {
                    "type": "object",
                    "properties": {"next": {"$ref": "#/$defs/node"}, "leaf": {}},
                    "additionalProperties": false
                }
            }
        }"##,
    )
    .unwrap();
    let doc = schema::Doc::from_json(&schema).unwrap();
    let a = doc.to_grammar().unwrap().grammar;
    let b = schema::json_schema_to_grammar(&schema).unwrap().grammar;
    assert_eq!(a, b);
    // what upstream's build gives for it: the recursion is through a rule
    let upstream = r#"
        array ::= "[" space ( value ("," space value)* )? space "]"
        boolean ::= ("true" | "false")
        char ::= [^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4})
        decimal-part ::= [0-9]{1,16}
        integral-part ::= [0] | [1-9] [0-9]{0,15}
        null ::= "null"
        number ::= ("-"? integral-part) ("." decimal-part)? ([eE] [-+]? integral-part)?
        object ::= "{" space ( string ":" space value ("," space string ":" space value)* )? space "}"
        ref-defs-node ::= "{" space  (ref-defs-node-next-kv ref-defs-node-next-rest | ref-defs-node-leaf-kv )? space "}"
        ref-defs-node-leaf ::= value
        ref-defs-node-leaf-kv ::= "\"leaf\"" space ":" space ref-defs-node-leaf
        ref-defs-node-next ::= ref-defs-node
        ref-defs-node-next-kv ::= "\"next\"" space ":" space ref-defs-node-next
        ref-defs-node-next-rest ::= ( "," space ref-defs-node-leaf-kv )?
        root ::= ref-defs-node
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        string ::= "\"" char* "\""
        value ::= object | array | string | number | boolean | null
    "#;
    assert_eq!(trim(&a), trim(upstream));
    parses_with_root(&a).unwrap();
}

/// upstream: "a property node carries its $ref target, so its grammar names the ref rule"
#[test]
fn sub_schema_ref() {
    let parameters: Value = serde_json::from_str(
        r##"{
            "type": "object",
            "properties": {"item": {"$ref": "#/$defs/item"}},
            "$defs": {
                "item": {
                    "type": "object",
                    "properties": {"a": {"type": "string"}},
                    "required": ["a"],
                    "additionalProperties": false
                }
            }
        }"##,
    )
    .unwrap();
    let expected = r#"
        char ::= [^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4})
        ref-defs-item ::= "{" space ref-defs-item-a-kv space "}"
        ref-defs-item-a-kv ::= "\"a\"" space ":" space string
        root ::= ref-defs-item
        space ::= | " " | "\n"{1,2} [ \t]{0,20}
        string ::= "\"" char* "\""
    "#;
    let doc = schema::Doc::from_json(&parameters).unwrap();
    let schema::Node::Object { props, .. } = &doc.root else { panic!("an object") };
    let g = doc.grammar_of(&props[0].schema).unwrap().grammar;
    assert_eq!(trim(&g), trim(expected));
}

#[test]
fn json_dump_is_nlohmanns() {
    let d = |s: &str| schema::dump(&serde_json::from_str(s).unwrap());
    assert_eq!(d(r#"{"b": 1, "a": [true, null, "x\ny\u0001\"\\/é"]}"#), r#"{"b":1,"a":[true,null,"x\ny\u0001\"\\/é"]}"#);
    assert_eq!(d("[1.0, 1.5, 100.0, 0.001, 0.0001, 0.00001, 1e16, 1.5e300, -2.5e-7, -0.0, 123456789012345.0, 1234567890123456.0, 12345678901234567890]"), "[1.0,1.5,100.0,0.001,0.0001,1e-05,1e+16,1.5e+300,-2.5e-07,-0.0,123456789012345.0,1.234567890123456e+15,12345678901234567890]");
}

#[test]
fn bounds_hold_instead_of_overflowing() {
    // a chain of 1000 $refs: refused, not a stack overflow
    let mut defs = serde_json::Map::new();
    for i in 0..1000 {
        defs.insert(format!("d{i}"), serde_json::json!({"$ref": format!("#/$defs/d{}", i + 1)}));
    }
    defs.insert("d1000".into(), serde_json::json!({"type": "integer"}));
    let schema = serde_json::json!({"$ref": "#/$defs/d0", "$defs": defs});
    let e = schema::json_schema_to_grammar(&schema).err().expect("refused");
    assert!(e.contains("nested more than"), "{e}");
    // a $ref cycle inside allOf adds nothing (upstream recurses without end)
    let cyc = serde_json::json!({"allOf": [{"$ref": "#/$defs/a"}, {"properties": {"x": {"type": "null"}}}], "$defs": {"a": {"$ref": "#/$defs/a"}}});
    let g = schema::json_schema_to_grammar(&cyc).unwrap().grammar;
    assert!(g.contains("root ::= \"{\" space x-kv space \"}\"\n"), "{g}");
    // 20,000 optional properties: linear, and the same rules as the quadratic upstream way
    let props: serde_json::Map<String, Value> = (0..20_000).map(|i| (format!("p{i}"), serde_json::json!({"type": "null"}))).collect();
    let t = std::time::Instant::now();
    let g = schema::json_schema_to_grammar(&serde_json::json!({"properties": props, "additionalProperties": false})).unwrap().grammar;
    assert!(t.elapsed().as_secs() < 10, "{:?}", t.elapsed());
    assert!(g.contains("p19998-rest ::= ( \",\" space p19999-kv )?\n"));
    assert!(g.contains("p0-rest ::= ( \",\" space p1-kv )? p1-rest\n"));
}

/// Schemas beyond upstream's list (random mixtures of every keyword, edge cases of numbers,
/// names, patterns and references, malformed schemas), each with the grammar or the error
/// llama.cpp b11312 itself gives (data/json_schema_oracle.txt, made by
/// data/json_schema_oracle.py from data/gen_json_schemas.py's schemas): exact equality; where
/// upstream crashes, the converter must refuse the schema.
/// DEEPSEEK_SCHEMA_ORACLE=FILE checks another file of that form instead.
#[test]
fn oracle_cases_give_upstream_output() {
    let path = std::env::var("DEEPSEEK_SCHEMA_ORACLE").unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/json_schema_oracle.txt").to_string());
    let text = std::fs::read_to_string(&path).expect("the oracle cases");
    let (mut n_ok, mut n_err, mut failed) = (0, 0, Vec::new());
    for block in text.split("\n### ").skip(1) {
        let (schema_line, rest) = block.split_once('\n').expect("a schema line");
        let schema: Value = serde_json::from_str(schema_line).unwrap_or_else(|e| panic!("{schema_line}: {e}"));
        let got = schema::json_schema_to_grammar(&schema);
        // the split took the newline that ends each block but the last
        let rest = if rest.ends_with('\n') { rest.to_string() } else { format!("{rest}\n") };
        if let Some(grammar) = rest.strip_prefix("--- ok\n") {
            n_ok += 1;
            match got {
                Ok(g) if g.grammar == grammar => {}
                Ok(g) => failed.push(format!("# {schema_line}\n# EXPECTED:\n{grammar}# ACTUAL:\n{}", g.grammar)),
                Err(e) => failed.push(format!("# {schema_line}\n# EXPECTED:\n{grammar}# ACTUAL ERROR: {e}")),
            }
        } else if rest == "--- crash\n" {
            // upstream's recursion overflows its stack; the converter's bounds refuse it
            n_err += 1;
            match got {
                Err(e) if e.contains("nested more than") => {}
                other => failed.push(format!("# {schema_line}\n# upstream crashes; expected the nesting bound, got {:?}", other.map(|g| g.grammar))),
            }
        } else {
            let message = rest.strip_prefix("--- error\n").expect("--- ok, --- error or --- crash");
            n_err += 1;
            match got {
                Err(e) if e == message.trim_end_matches('\n') => {}
                Err(e) => failed.push(format!("# {schema_line}\n# EXPECTED ERROR: {message}# ACTUAL ERROR: {e}")),
                Ok(g) => failed.push(format!("# {schema_line}\n# EXPECTED ERROR: {message}# ACTUAL:\n{}", g.grammar)),
            }
        }
    }
    assert!(failed.is_empty(), "{} of {} differ from upstream:\n{}", failed.len(), n_ok + n_err, failed.join("\n"));
    if std::env::var_os("DEEPSEEK_SCHEMA_ORACLE").is_none() {
        assert!(n_ok > 120 && n_err > 40, "{n_ok} grammars, {n_err} errors");
    }
}

/// Where upstream emits bytes that are not UTF-8 (a quantifier after a non-ASCII character
/// repeats its last byte: `"\xC3" "\xA9"+`), the character is repeated whole.
#[test]
fn non_ascii_pattern_characters_repeat_whole() {
    let g = schema::json_schema_to_grammar(&serde_json::json!({"type": "string", "pattern": "^aé{2}ü+$"})).unwrap().grammar;
    assert!(g.starts_with("root ::= \"\\\"\" (\"a\" \"é\"{2,2} \"ü\"+) \"\\\"\"\n"), "{g}");
    parses_with_root(&g).unwrap();
}
