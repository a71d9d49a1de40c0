//! No import circles between the library's modules (issue 53): a module is a file or directory
//! under `src/`; module X depends on a sibling Y (both children of one parent) when code anywhere
//! inside X names a path inside Y — in a `use` tree or inline (`crate::a::b::f()`,
//! `super::b::T`). The sibling graphs must have no cycle, at every level of the tree.
//!
//! Test code (`#[cfg(test)]` modules and items) is left out: it may reach across the layers.
//! A path that stops at a module's re-export (`crate::gguf::GgufFile`) depends on that module,
//! which is the parent of the file that defines the item, not a sibling of it.
//!
//! `KNOWN` lists the circles not yet broken, so the test fails on a new one and on a listed one
//! that is gone (then remove it from the list).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The circles still in the tree: "parent: sibling, sibling, ..." (the members sorted).
const KNOWN: &[&str] = &[];

type Module = Vec<String>;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file under `src/` with its module path (`src/api/types.rs` → `["api", "types"]`).
fn modules(dir: &Path, out: &mut BTreeMap<Module, PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            modules(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path.strip_prefix(root().join("src")).unwrap().with_extension("");
            let mut m: Module = rel.iter().map(|s| s.to_string_lossy().into_owned()).collect();
            if m.last().is_some_and(|s| s == "mod" || s == "lib") {
                m.pop();
            }
            out.insert(m, path);
        }
    }
}

/// The source without comments and with string and char literals emptied, so that neither a
/// path in a doc comment nor one in a string counts.
fn strip(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        let rest = &src[i..];
        if rest.starts_with("//") {
            i += rest.find('\n').unwrap_or(rest.len());
        } else if rest.starts_with("/*") {
            // Rust block comments nest.
            let (mut depth, mut k) = (0usize, i);
            while k < b.len() {
                if src[k..].starts_with("/*") {
                    depth += 1;
                    k += 2;
                } else if src[k..].starts_with("*/") {
                    depth -= 1;
                    k += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    k += 1;
                }
            }
            i = k;
            out.push(' ');
        } else if (rest.starts_with("r\"") || rest.starts_with("r#")) && !prev_is_ident(b, i) {
            let hashes = rest[1..].bytes().take_while(|&c| c == b'#').count();
            if rest.as_bytes().get(1 + hashes) != Some(&b'"') {
                out.push('r');
                i += 1;
                continue;
            }
            let close = format!("\"{}", "#".repeat(hashes));
            let body = 2 + hashes;
            i += body + rest[body..].find(&close).expect("unterminated raw string") + close.len();
            out.push_str("\"\"");
        } else if b[i] == b'"' {
            let mut k = i + 1;
            while b[k] != b'"' {
                k += if b[k] == b'\\' { 2 } else { 1 };
            }
            i = k + 1;
            out.push_str("\"\"");
        } else if b[i] == b'\'' {
            // A char literal ('x', '\n', '\u{..}'), else a lifetime or a label.
            let end = if rest.as_bytes().get(1) == Some(&b'\\') {
                rest[2..].find('\'').map(|k| k + 3)
            } else {
                rest.char_indices().nth(2).filter(|&(_, c)| c == '\'').map(|(k, _)| k + 1)
            };
            match end {
                Some(n) => {
                    i += n;
                    out.push_str("' '");
                }
                None => {
                    out.push('\'');
                    i += 1;
                }
            }
        } else {
            let c = rest.chars().next().unwrap();
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

fn prev_is_ident(b: &[u8], i: usize) -> bool {
    i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// The index just past the block that opens at `open` (a `{`).
fn block_end(b: &[u8], open: usize) -> usize {
    let mut depth = 0;
    for (k, &c) in b.iter().enumerate().skip(open) {
        if c == b'{' {
            depth += 1;
        } else if c == b'}' {
            depth -= 1;
            if depth == 0 {
                return k + 1;
            }
        }
    }
    b.len()
}

/// The source with every `#[cfg(test)]` item removed; the names of `#[cfg(test)] mod x;` files.
fn without_test_items(src: &str) -> (String, Vec<String>) {
    let b = src.as_bytes();
    let (mut out, mut test_mods, mut i) = (String::new(), Vec::new(), 0);
    while let Some(k) = src[i..].find("#[cfg(test)]") {
        let start = i + k;
        out.push_str(&src[i..start]);
        let item = start + "#[cfg(test)]".len();
        let semi = src[item..].find(';').map(|n| item + n);
        let brace = src[item..].find('{').map(|n| item + n);
        i = match (semi, brace) {
            (Some(s), b2) if b2.is_none_or(|b2| s < b2) => {
                let decl = src[item..s].split_whitespace().collect::<Vec<_>>();
                if let Some(p) = decl.iter().position(|w| *w == "mod") {
                    test_mods.push(decl[p + 1].to_string());
                }
                s + 1
            }
            (_, Some(o)) => block_end(b, o),
            _ => b.len(),
        };
    }
    out.push_str(&src[i..]);
    (out, test_mods)
}

/// Expands a `use` tree (`a::{b, c::{d, e}}`) into its paths.
fn expand(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        return vec![tree.to_string()];
    };
    let close = tree.rfind('}').expect("unbalanced use tree");
    let (prefix, inner) = (&tree[..open], &tree[open + 1..close]);
    let (mut parts, mut depth, mut cur) = (Vec::new(), 0, String::new());
    for c in inner.chars() {
        match c {
            ',' if depth == 0 => parts.push(std::mem::take(&mut cur)),
            '{' => {
                depth += 1;
                cur.push(c)
            }
            '}' => {
                depth -= 1;
                cur.push(c)
            }
            _ => cur.push(c),
        }
    }
    parts.push(cur);
    parts.iter().filter(|p| !p.trim().is_empty()).flat_map(|p| expand(p)).map(|q| format!("{prefix}{q}")).collect()
}

/// The paths the code names: `use` trees, and inline paths that start at `crate`, `super` or
/// `self`; each with the inline module (`mod tests { ... }`) it is written in.
fn paths(src: &str) -> Vec<(Vec<String>, String)> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    // Inline modules: (name, end of its block).
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut i = 0;
    while i < b.len() {
        while inline.last().is_some_and(|&(_, end)| i >= end) {
            inline.pop();
        }
        let at_word = !prev_is_ident(b, i);
        let rest = &src[i..];
        let scope = || inline.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
        if at_word && rest.starts_with("mod ") {
            let name: String = rest[4..].trim_start().bytes().take_while(|&c| is_ident(c)).map(char::from).collect();
            let after = i + 4 + rest[4..].find(name.as_str()).unwrap() + name.len();
            let next = src[after..].trim_start();
            if next.starts_with('{') {
                let open = after + src[after..].find('{').unwrap();
                inline.push((name, block_end(b, open)));
                i = open + 1;
                continue;
            }
        }
        if at_word && rest.starts_with("use ") {
            let end = i + rest.find(';').expect("use without ;");
            for p in expand(&src[i + 4..end]) {
                out.push((scope(), p));
            }
            i = end + 1;
            continue;
        }
        if at_word && (rest.starts_with("crate::") || rest.starts_with("super::") || rest.starts_with("self::")) {
            let len = rest.bytes().take_while(|&c| is_ident(c) || c == b':').count();
            out.push((scope(), rest[..len].to_string()));
            i += len;
            continue;
        }
        i += 1;
    }
    out
}

/// The deepest module a path names, from the file's module `m` (and the inline modules
/// `scope` inside it); None for a path into another crate.
fn resolve(mods: &BTreeMap<Module, PathBuf>, m: &Module, scope: &[String], path: &str) -> Option<Module> {
    let segs: Vec<&str> = path.split("::").map(|s| s.split(" as ").next().unwrap().trim()).filter(|s| !s.is_empty()).collect();
    let mut base: Module = m.iter().chain(scope).cloned().collect();
    let mut rest = &segs[..];
    match segs.first() {
        Some(&"crate") => {
            base.clear();
            rest = &segs[1..];
        }
        Some(&"super") | Some(&"self") => {
            while let Some(&s) = rest.first() {
                match s {
                    "super" => {
                        base.pop();
                    }
                    "self" => {}
                    _ => break,
                }
                rest = &rest[1..];
            }
        }
        _ => return None,
    }
    // Inline modules are part of their file's module.
    while !base.is_empty() && !mods.contains_key(&base) {
        base.pop();
    }
    for s in rest {
        let mut next = base.clone();
        next.push(s.to_string());
        if !mods.contains_key(&next) {
            break;
        }
        base = next;
    }
    Some(base)
}

/// Each parent's sibling graph: parent → (child → {child it depends on}), with one example
/// (file module → module named) per edge for the message.
type Graphs = BTreeMap<Module, BTreeMap<String, BTreeMap<String, (Module, Module)>>>;

fn graphs() -> Graphs {
    let mut mods = BTreeMap::new();
    modules(&root().join("src"), &mut mods);
    // Drop the `#[cfg(test)] mod x;` files and everything under them.
    let mut test_only = BTreeSet::new();
    for (m, file) in &mods {
        let (_, tm) = without_test_items(&strip(&std::fs::read_to_string(file).unwrap()));
        for t in tm {
            let mut child = m.clone();
            child.push(t);
            test_only.insert(child);
        }
    }
    mods.retain(|m, _| !test_only.iter().any(|t| m.starts_with(t)));
    let mut g: Graphs = BTreeMap::new();
    for (m, file) in &mods {
        let (src, _) = without_test_items(&strip(&std::fs::read_to_string(file).unwrap()));
        for (scope, p) in paths(&src) {
            let Some(t) = resolve(&mods, m, &scope, &p) else { continue };
            let k = m.iter().zip(&t).take_while(|(a, b)| a == b).count();
            if k == m.len() || k == t.len() {
                continue; // the module itself, an ancestor or a descendant
            }
            g.entry(m[..k].to_vec()).or_default().entry(m[k].clone()).or_default().entry(t[k].clone()).or_insert((m.clone(), t.clone()));
        }
    }
    g
}

/// The strongly connected components of more than one node (Tarjan).
fn circles(adj: &BTreeMap<String, BTreeMap<String, (Module, Module)>>) -> Vec<Vec<String>> {
    struct State<'a> {
        adj: &'a BTreeMap<String, BTreeMap<String, (Module, Module)>>,
        index: BTreeMap<String, usize>,
        low: BTreeMap<String, usize>,
        stack: Vec<String>,
        out: Vec<Vec<String>>,
    }
    fn visit(s: &mut State, v: &str) {
        let n = s.index.len();
        s.index.insert(v.to_string(), n);
        s.low.insert(v.to_string(), n);
        s.stack.push(v.to_string());
        let next: Vec<String> = s.adj.get(v).map(|e| e.keys().cloned().collect()).unwrap_or_default();
        for w in next {
            if !s.index.contains_key(&w) {
                visit(s, &w);
                let lw = s.low[&w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if s.stack.contains(&w) {
                let iw = s.index[&w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            loop {
                let w = s.stack.pop().unwrap();
                let done = w == v;
                comp.push(w);
                if done {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                s.out.push(comp);
            }
        }
    }
    let mut s = State { adj, index: BTreeMap::new(), low: BTreeMap::new(), stack: Vec::new(), out: Vec::new() };
    let nodes: BTreeSet<String> = adj.iter().flat_map(|(k, v)| std::iter::once(k.clone()).chain(v.keys().cloned())).collect();
    for v in &nodes {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.out
}

#[test]
fn no_new_import_circles() {
    let g = graphs();
    let mut found = BTreeMap::new();
    for (parent, adj) in &g {
        for comp in circles(adj) {
            let name = format!("{}: {}", if parent.is_empty() { "crate".to_string() } else { parent.join("::") }, comp.join(", "));
            let mut why = Vec::new();
            for a in &comp {
                for (b, (from, to)) in &adj[a] {
                    if comp.contains(b) {
                        why.push(format!("    {} names {}", from.join("::"), to.join("::")));
                    }
                }
            }
            found.insert(name, why.join("\n"));
        }
    }
    let known: BTreeSet<String> = KNOWN.iter().map(|s| s.to_string()).collect();
    let new: Vec<String> = found.iter().filter(|(k, _)| !known.contains(*k)).map(|(k, v)| format!("{k}\n{v}")).collect();
    let gone: Vec<&String> = known.iter().filter(|k| !found.contains_key(*k)).collect();
    assert!(new.is_empty(), "import circles between modules (break them: move what both use into a module below them):\n{}", new.join("\n"));
    assert!(gone.is_empty(), "these circles are gone: remove them from KNOWN: {gone:?}");
}

/// The scanner sees what it must: a circle made on purpose in a scratch tree is found, and
/// comments, strings and test code do not count.
#[test]
fn the_scanner_finds_paths_and_skips_comments_strings_and_tests() {
    let src = strip("use super::a::{b, c::D}; // use crate::x;\nfn f() { let s = \"crate::y::z\"; crate::k::m(); }\n#[cfg(test)]\nmod tests { use crate::t::u; }\n#[cfg(test)]\nmod golden;\n");
    let (src, test_mods) = without_test_items(&src);
    assert_eq!(test_mods, vec!["golden".to_string()]);
    let ps: Vec<String> = paths(&src).into_iter().map(|(_, p)| p).collect();
    assert_eq!(ps, vec!["super::a::b", "super::a::c::D", "crate::k::m"]);
    let mods: BTreeMap<Module, PathBuf> = [vec![], vec!["q".into()], vec!["q".into(), "a".into()], vec!["q".into(), "b".into()]]
        .into_iter()
        .map(|m| (m, PathBuf::new()))
        .collect();
    let qb = vec!["q".to_string(), "b".to_string()];
    assert_eq!(resolve(&mods, &qb, &[], "super::a::f"), Some(vec!["q".to_string(), "a".to_string()]));
    assert_eq!(resolve(&mods, &qb, &["tests".to_string()], "super::super::a"), Some(vec!["q".to_string(), "a".to_string()]));
    assert_eq!(resolve(&mods, &qb, &[], "std::mem"), None);
    let mut adj: BTreeMap<String, BTreeMap<String, (Module, Module)>> = BTreeMap::new();
    for (a, b) in [("x", "y"), ("y", "z"), ("z", "x"), ("z", "w")] {
        adj.entry(a.into()).or_default().insert(b.into(), (vec![], vec![]));
    }
    assert_eq!(circles(&adj), vec![vec!["x".to_string(), "y".to_string(), "z".to_string()]]);
}
