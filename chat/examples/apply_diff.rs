//! For each recorded pair, whether our /apply-template answer is upstream's, and both where not
//! (tests/data/chat/apply; dates are compared as rendered, unlike the test):
//! `apply_diff [TEMPLATE_SUBSTRING] [CONVERSATION]`; `apply_diff --caps` prints the templates
//! whose capabilities differ from upstream's.
use deepseek_chat::request::{inputs, ServerDefaults};
use deepseek_chat::template::ChatTemplate;
use serde_json::Value;

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let want_t = a.get(1).cloned().unwrap_or_default();
    let want_c = a.get(2).cloned();
    let data = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/chat");
    let dir = data.join("apply");
    let meta: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("meta.json")).unwrap()).unwrap();
    let s = |k: &str| meta[k].as_str().unwrap_or("").to_string();
    let b = |k: &str| meta[k].as_bool().unwrap_or(false);
    if want_t == "--caps" {
        for (name, v) in meta["templates"].as_object().unwrap() {
            let src = std::fs::read_to_string(data.join("upstream-templates").join(name)).unwrap();
            let t = ChatTemplate::new(&src, &s("bos_token"), &s("eos_token"), b("add_bos"), b("add_eos")).unwrap();
            let ours = t.caps.to_json();
            let up = &v["chat_template_caps"];
            if &ours != up {
                let d: Vec<String> = up.as_object().unwrap().iter().filter(|(k, x)| ours[k.as_str()] != **x).map(|(k, x)| format!("{k}: upstream {x}")).collect();
                println!("{name}: {}", d.join(", "));
            }
        }
        return;
    }
    let convs: Vec<Value> = serde_json::from_str(&std::fs::read_to_string(dir.join("conversations.json")).unwrap()).unwrap();
    for line in std::fs::read_to_string(dir.join("upstream.jsonl")).unwrap().lines() {
        let rec: Value = serde_json::from_str(line).unwrap();
        let (Some(name), Some(conv)) = (rec["template"].as_str(), rec["conversation"].as_str()) else { continue };
        if !name.contains(&want_t) || want_c.as_deref().is_some_and(|c| c != conv) {
            continue;
        }
        let src = std::fs::read_to_string(data.join("upstream-templates").join(name)).unwrap();
        let body = convs.iter().find(|c| c["name"] == conv).unwrap()["body"].as_object().unwrap().clone();
        let ours = ChatTemplate::new(&src, &s("bos_token"), &s("eos_token"), b("add_bos"), b("add_eos")).map_err(|e| e.message).and_then(|t| {
            inputs(&body, &ServerDefaults::llama_server(Default::default(), true, &t)).map_err(|e| e.message).and_then(|i| t.apply(&i).map(|r| r.prompt).map_err(|e| e.message))
        });
        let up = rec.get("prompt").and_then(Value::as_str).map(str::to_string).ok_or_else(|| rec["error"].to_string());
        let same = match (&up, &ours) { (Ok(x), Ok(y)) => x == y, (Err(_), Err(_)) => true, _ => false };
        println!("=== {name} {conv}: {}", if same { "SAME" } else { "DIFF" });
        if !same {
            println!("--- upstream:\n{}\n--- ours:\n{}\n", up.unwrap_or_else(|e| format!("ERROR {e}")), ours.unwrap_or_else(|e| format!("ERROR {e}")));
        }
    }
}
