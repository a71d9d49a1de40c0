//! Our rendering of every template of llama.cpp b11312's `models/templates/` against
//! upstream llama-server's `/apply-template` on the same conversations
//! (`tests/data/chat/apply/upstream.jsonl`, recorded by `tests/data/gen/apply_template.py`).
//! Where upstream answered a prompt we must give the same bytes; where it answered an error we
//! must refuse too. The pairs that still differ are listed in `known-differences.txt`; each
//! listed pair must still differ (fix one and the list must shrink), every other pair must agree.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use deepseek_chat::request::{inputs, ServerDefaults};
use deepseek_chat::template::ChatTemplate;
use serde_json::Value;

fn data() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/chat")
}

/// Dates a template may print (strftime_now, date_string), replaced by a marker so that a
/// recording made on one day compares with a render made on another.
const DATE_FORMATS: &[&str] = &["%d %b %Y", "%b %d %Y", "%Y-%m-%d", "%d %B %Y", "%B %d, %Y", "%B %d %Y", "%Y-%m-%d %H:%M", "%A, %B %d, %Y"];

fn without_dates(text: &str, at: i64) -> String {
    let mut t = text.to_string();
    for f in DATE_FORMATS.iter().rev() {
        if let Ok(d) = deepseek_chat::time::strftime_at(f, at) {
            t = t.replace(&d, "<DATE>");
        }
    }
    t
}

/// "2026-12-07T13:16:49Z" as seconds since 1970 (the civil-from-days algorithm).
fn unix_of(t: &str) -> i64 {
    let n = |a: usize, b: usize| t[a..b].parse::<i64>().unwrap();
    let (y, m, d) = (n(0, 4), n(5, 7), n(8, 10));
    let (y, m) = if m <= 2 { (y - 1, m + 9) } else { (y, m - 3) };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + d - 1;
    let days = era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468;
    days * 86_400 + n(11, 13) * 3600 + n(14, 16) * 60 + n(17, 19)
}

#[test]
fn apply_template_equals_upstream_llama_server() {
    let dir = data().join("apply");
    let meta: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("meta.json")).expect("meta.json")).unwrap();
    let recorded_at = unix_of(meta["recorded_utc"].as_str().expect("recorded_utc"));
    let bos = meta["bos_token"].as_str().unwrap_or("");
    let eos = meta["eos_token"].as_str().unwrap_or("");
    let add_bos = meta["add_bos"].as_bool().unwrap_or(false);
    let add_eos = meta["add_eos"].as_bool().unwrap_or(false);
    let convs: Vec<Value> = serde_json::from_str(&std::fs::read_to_string(dir.join("conversations.json")).unwrap()).unwrap();
    let bodies: BTreeMap<String, Value> = convs.iter().map(|c| (c["name"].as_str().unwrap().to_string(), c["body"].clone())).collect();
    let known: BTreeSet<String> = std::fs::read_to_string(dir.join("known-differences.txt"))
        .unwrap_or_default()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
    let mut templates: BTreeMap<String, Result<ChatTemplate, String>> = BTreeMap::new();
    let (mut same, mut differ, mut fixed, mut broken) = (0, 0, Vec::new(), Vec::new());
    for line in std::fs::read_to_string(dir.join("upstream.jsonl")).unwrap().lines() {
        let rec: Value = serde_json::from_str(line).unwrap();
        let (Some(name), Some(conv)) = (rec["template"].as_str(), rec["conversation"].as_str()) else { continue };
        let t = templates.entry(name.to_string()).or_insert_with(|| {
            let src = std::fs::read_to_string(data().join("upstream-templates").join(name)).unwrap();
            ChatTemplate::new(&src, bos, eos, add_bos, add_eos).map_err(|e| e.message)
        });
        let body = bodies[conv].as_object().unwrap();
        let ours: Result<String, String> = match t {
            Err(e) => Err(e.clone()),
            Ok(t) => inputs(body, &ServerDefaults::llama_server(Default::default(), true, t)).map_err(|e| e.message).and_then(|i| t.apply(&i).map(|r| r.prompt).map_err(|e| e.message)),
        };
        let agrees = match (rec["status"].as_u64(), &ours) {
            (Some(200), Ok(p)) => without_dates(p, now) == without_dates(rec["prompt"].as_str().unwrap_or(""), recorded_at),
            (Some(200), Err(_)) => false,
            (_, Ok(_)) => false,
            (_, Err(_)) => true,
        };
        let key = format!("{name} {conv}");
        match (agrees, known.contains(&key)) {
            (true, false) => same += 1,
            (false, true) => differ += 1,
            (true, true) => fixed.push(key),
            (false, false) => {
                let want = rec.get("prompt").cloned().unwrap_or_else(|| rec["error"].clone());
                broken.push(format!("{key}\n  upstream: {want}\n  ours:     {ours:?}"));
            }
        }
    }
    // The capabilities upstream's server reported for each template (its /props
    // `chat_template_caps`), which decide how a conversation is adapted before rendering.
    let mut caps_differ = Vec::new();
    for (name, t) in &templates {
        let (Ok(t), Some(up)) = (t, meta["templates"][name.as_str()].get("chat_template_caps")) else { continue };
        if &t.caps.to_json() != up {
            caps_differ.push(format!("{name}: ours {} upstream {up}", t.caps.to_json()));
        }
    }
    assert!(caps_differ.is_empty(), "template capabilities differ from upstream's:\n{}", caps_differ.join("\n"));
    eprintln!("apply-template vs upstream: {same} agree, {differ} known to differ, {} newly agree, {} newly differ", fixed.len(), broken.len());
    assert!(same > 0, "no recorded pair was compared");
    assert!(fixed.is_empty(), "these pairs agree now: take them out of known-differences.txt:\n{}", fixed.join("\n"));
    assert!(broken.is_empty(), "{} pairs differ from upstream:\n{}", broken.len(), broken.join("\n"));
}
