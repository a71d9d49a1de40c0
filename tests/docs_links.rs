//! The documentation holds together (issue 53): README.md fits on a screen (at most 150 lines,
//! none longer than 200 characters), every relative link in README.md and docs/*.md names a file
//! that exists — and, with a `#fragment`, a heading of that file under GitHub's anchor rules —
//! and every test, file and report that docs/GUARANTEES.md and docs/BENCHMARKS.md cite exists.
//! No model is needed.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// README.md and every Markdown file in docs/.
fn documents() -> Vec<PathBuf> {
    let mut out = vec![root().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    out.extend(docs);
    out
}

/// The text outside fenced code blocks and inline code spans, line by line (links inside code
/// are not links).
fn prose(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            out.push(String::new());
            continue;
        }
        if fenced || line.starts_with("    ") && !line.trim_start().starts_with(['-', '|']) {
            out.push(String::new());
            continue;
        }
        // Drop inline code spans.
        let mut kept = String::new();
        let mut in_code = false;
        for c in line.chars() {
            if c == '`' {
                in_code = !in_code;
            } else if !in_code {
                kept.push(c);
            }
        }
        out.push(kept);
    }
    out
}

/// The targets of inline links `[text](target)` in prose (images too).
fn links(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (n, line) in prose(text).iter().enumerate() {
        let mut rest = line.as_str();
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            let Some(end) = after.find(')') else { break };
            let target = after[..end].split_whitespace().next().unwrap_or("").to_string();
            out.push((n + 1, target));
            rest = &after[end..];
        }
    }
    out
}

/// GitHub's anchor for a heading: lower case, punctuation other than `-` and `_` dropped,
/// spaces to `-`; a repeated anchor gets `-1`, `-2`, ...
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let title = line.trim_start_matches('#').trim();
        let slug: String = title
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let mut name = slug.clone();
        let mut k = 1;
        while seen.contains(&name) {
            name = format!("{slug}-{k}");
            k += 1;
        }
        seen.insert(name);
    }
    seen
}

#[test]
fn readme_fits_on_a_screen() {
    let readme = read(&root().join("README.md"));
    let n = readme.lines().count();
    assert!(n <= 150, "README.md has {n} lines: at most 150 (the rest belongs in docs/)");
    for (i, line) in readme.lines().enumerate() {
        assert!(line.chars().count() <= 200, "README.md:{}: {} characters, at most 200", i + 1, line.chars().count());
    }
}

#[test]
fn every_relative_link_resolves() {
    let mut bad = Vec::new();
    let mut checked = 0;
    for doc in documents() {
        let text = read(&doc);
        let dir = doc.parent().unwrap();
        for (line, target) in links(&text) {
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (path, fragment) = match target.split_once('#') {
                Some((p, f)) => (p, Some(f)),
                None => (target.as_str(), None),
            };
            let file = if path.is_empty() { doc.clone() } else { dir.join(path) };
            let at = format!("{}:{line}: {target}", doc.strip_prefix(root()).unwrap().display());
            if !file.exists() {
                bad.push(format!("{at}: no such file"));
                continue;
            }
            if let Some(f) = fragment {
                if file.extension().is_some_and(|e| e == "md") && !anchors(&read(&file)).contains(f) {
                    bad.push(format!("{at}: no heading with that anchor"));
                }
            }
        }
    }
    assert!(checked >= 20, "only {checked} relative links found: is the scanner broken?");
    assert!(bad.is_empty(), "broken links:\n{}", bad.join("\n"));
}

/// What docs/GUARANTEES.md and docs/BENCHMARKS.md cite in code spans: files of the repository
/// (`tests/soak.rs`, `c_tests/malformed.c`, `bench/results/….md`) and test functions
/// (`tests/soak.rs::create_use_free_returns_everything`: a `fn` of that name in that file).
#[test]
fn cited_tests_and_reports_exist() {
    let mut bad = Vec::new();
    let mut checked = 0;
    for name in ["GUARANTEES.md", "BENCHMARKS.md"] {
        let text = read(&root().join("docs").join(name));
        for (n, line) in text.lines().enumerate() {
            for (k, span) in line.split('`').enumerate() {
                if k % 2 == 0 || span.contains(' ') || span.contains("YYYY") || span.contains('…') {
                    continue;
                }
                let (path, func) = match span.split_once("::") {
                    Some((p, f)) => (p, Some(f)),
                    None => (span, None),
                };
                let cited = ["tests/", "c_tests/", "src/", "scripts/", "bench/"].iter().any(|d| path.starts_with(d))
                    && path.rsplit('/').next().is_some_and(|f| f.contains('.'));
                if !cited {
                    continue;
                }
                checked += 1;
                let file = root().join(path);
                if !file.is_file() {
                    bad.push(format!("docs/{name}:{}: {path}: no such file", n + 1));
                } else if let Some(f) = func {
                    if !read(&file).contains(&format!("fn {f}(")) {
                        bad.push(format!("docs/{name}:{}: {path} has no fn {f}", n + 1));
                    }
                }
            }
        }
    }
    assert!(checked >= 20, "only {checked} citations found: is the scanner broken?");
    assert!(bad.is_empty(), "cited but missing:\n{}", bad.join("\n"));
}

#[test]
fn the_scanner_reads_links_and_anchors_as_github_does() {
    let text = "# Using `ds_engine`, again!\n## 2. LD_PRELOAD in front\n## Serving\n## Serving\n```\n[not](a-link.md)\n```\nsee [x](USING.md#serving-1) and `[code](no.md)`\n";
    let a = anchors(text);
    for want in ["using-ds_engine-again", "2-ld_preload-in-front", "serving", "serving-1"] {
        assert!(a.contains(want), "{want} not in {a:?}");
    }
    assert_eq!(links(text), vec![(8, "USING.md#serving-1".to_string())]);
}
