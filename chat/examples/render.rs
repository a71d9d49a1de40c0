//! Renders a chat template with a JSON context: `render TEMPLATE.jinja CONTEXT.json`.
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let src = std::fs::read_to_string(&a[1]).expect("template");
    let ctx: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&a[2]).expect("context")).expect("JSON");
    match deepseek_chat::jinja::Template::new(&src).and_then(|t| t.render(&ctx)) {
        Ok(s) => print!("{s}"),
        Err(e) => {
            eprintln!("error: {e:?}");
            std::process::exit(1)
        }
    }
}
