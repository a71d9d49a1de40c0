//! deepseek-cli: generate text or chat with a GGUF model on the CPU, streaming tokens as they
//! come, then a summary (load time, prompt and generation speed, peak memory; `--json` for
//! scripts). Uses the Rust API (model, context, tokenizer, sampling), not the C one; chats are
//! rendered by deepseek-chat as deepseek-server renders them.
//! Exit codes: 0 success, 1 runtime failure, 2 bad arguments, a missing model or an unusable
//! chat template.

mod answer;
mod args;
// Shared with deepseek-server, which includes the same file.
mod fetch;
mod prompt;
mod session;

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use deepseek::model::Model;

use answer::Answer;
use args::{Args, Parsed};
use session::Session;

/// Set by Ctrl-C to stop the current answer. A signal handler can reach no other state, hence
/// this one process-wide flag (in the binary, not the library).
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigint(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::Relaxed);
}

/// Ctrl-C sets INTERRUPTED instead of killing the process; without SA_RESTART, a blocking read
/// of stdin returns EINTR so that Ctrl-C at the prompt can end the program.
fn install_sigint() {
    // SAFETY: a zeroed sigaction is valid; the handler only stores to an atomic
    // (async-signal-safe).
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigint as *const () as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGINT, &sa, std::ptr::null_mut());
    }
}

/// Reads one line from stdin byte by byte with read(2): None at end of input or on Ctrl-C.
fn read_line() -> Option<String> {
    let mut line = Vec::new();
    loop {
        let mut b = 0u8;
        // SAFETY: reads at most one byte into a local.
        let n = unsafe { libc::read(0, (&mut b as *mut u8).cast(), 1) };
        if n < 0 || INTERRUPTED.load(Ordering::Relaxed) {
            return None;
        }
        if n == 0 {
            return if line.is_empty() { None } else { Some(String::from_utf8_lossy(&line).into_owned()) };
        }
        if b == b'\n' {
            return Some(String::from_utf8_lossy(&line).into_owned());
        }
        line.push(b);
    }
}

/// Peak resident memory (VmHWM) in MiB.
fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| l.split_whitespace().nth(1)).and_then(|kb| kb.parse::<f64>().ok()))
        .map_or(0.0, |kb| kb / 1024.0)
}

fn per_second(n: usize, t: std::time::Duration) -> f64 {
    if t.as_secs_f64() > 0.0 {
        n as f64 / t.as_secs_f64()
    } else {
        0.0
    }
}

fn json_string(s: &str) -> String {
    let mut o = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => o += "\\\"",
            '\\' => o += "\\\\",
            '\n' => o += "\\n",
            '\r' => o += "\\r",
            '\t' => o += "\\t",
            c if (c as u32) < 0x20 => o += &format!("\\u{:04x}", c as u32),
            c => o.push(c),
        }
    }
    o + "\""
}

fn load(a: &Args) -> Result<(Arc<Model>, f64), (i32, String)> {
    let path = fetch::resolve(&a.model, a.json).map_err(|e| (2, e))?;
    let tty = std::io::stderr().is_terminal() && !a.json;
    let t0 = Instant::now();
    let name = path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
    let mut bar = |p: f32| {
        if tty {
            let filled = (p * 30.0).round() as usize;
            eprint!("\rloading {name} [{}{}] {:3.0}%", "#".repeat(filled), " ".repeat(30 - filled.min(30)), p * 100.0);
        }
        true
    };
    let model = Model::load_with_progress(deepseek::gguf::Source::File(&path), !a.no_mmap, true, &mut bar).map_err(|e| (1, format!("{}: {e}", path.display())))?;
    let secs = t0.elapsed().as_secs_f64();
    if tty {
        eprintln!(" done in {secs:.2} s ({} MiB)", model.size_bytes >> 20);
    }
    Ok((Arc::new(model), secs))
}

fn summary(a: &Args, s: &session::Stats, load_s: f64, text: Option<&str>) {
    let pp = per_second(s.prompt_tokens, s.prompt_time);
    let tg = per_second(s.gen_tokens, s.gen_time);
    if a.json {
        println!(
            "{{\"model\": {}, \"load_s\": {:.3}, \"prompt_tokens\": {}, \"prompt_s\": {:.3}, \"prompt_tok_per_s\": {:.2}, \"generated_tokens\": {}, \"generation_s\": {:.3}, \"generation_tok_per_s\": {:.2}, \"peak_rss_mib\": {:.1}, \"text\": {}}}",
            json_string(&a.model),
            load_s,
            s.prompt_tokens,
            s.prompt_time.as_secs_f64(),
            pp,
            s.gen_tokens,
            s.gen_time.as_secs_f64(),
            tg,
            peak_rss_mib(),
            json_string(text.unwrap_or(""))
        );
    } else {
        eprintln!(
            "\nload {load_s:.2} s | prompt {} tokens, {pp:.1} tok/s | generation {} tokens, {tg:.1} tok/s | peak memory {:.0} MiB",
            s.prompt_tokens,
            s.gen_tokens,
            peak_rss_mib()
        );
    }
}

fn run_prompt(a: &Args) -> Result<(), (i32, String)> {
    let (model, load_s) = load(a)?;
    let mut s = Session::new(model, a).map_err(|e| (1, e))?;
    let n = s.feed(&a.prompt).map_err(|e| (1, e))?;
    if n == 0 {
        return Err((1, "the prompt tokenized to nothing".into()));
    }
    if a.verbose_prompt {
        eprintln!("prompt ({n} tokens): {}", json_string(&a.prompt));
    }
    let mut out = std::io::stdout().lock();
    if !a.json {
        let _ = out.write_all(a.prompt.as_bytes());
        let _ = out.flush();
    }
    let text = s
        .generate(a.n_predict.unwrap_or(128), &INTERRUPTED, |piece| {
            if !a.json {
                let _ = out.write_all(piece);
                let _ = out.flush();
            }
        })
        .map_err(|e| (1, e))?;
    if !a.json {
        let _ = out.write_all(b"\n");
    }
    drop(out);
    summary(a, &s.stats, load_s, Some(&String::from_utf8_lossy(&text)));
    Ok(())
}

fn run_chat(a: &Args) -> Result<(), (i32, String)> {
    let (model, load_s) = load(a)?;
    let (format, which) = prompt::choose(a, &model).map_err(|e| (2, e))?;
    let mut s = Session::new(model, a).map_err(|e| (1, e))?;
    let color = std::io::stdout().is_terminal();
    install_sigint();
    eprintln!("chat template: {which} — type a message, Ctrl-C stops an answer, Ctrl-D (or Ctrl-C here) quits");
    let mut history = Vec::new();
    loop {
        eprint!("> ");
        let Some(line) = read_line() else { break };
        if line.trim().is_empty() {
            continue;
        }
        history.push(prompt::message("user", &line, ""));
        let text = match format.render(&history) {
            Ok(text) => text,
            // A template may refuse a conversation (raise_exception): the turn is not taken.
            Err(e) => {
                eprintln!("deepseek-cli: {e}");
                history.pop();
                continue;
            }
        };
        // The whole conversation each turn: the context keeps what it already holds of it.
        let (n, new) = s.set_prompt(&text).map_err(|e| (1, e))?;
        if a.verbose_prompt {
            eprintln!("prompt ({n} tokens, {new} decoded): {}", json_string(&text));
        }
        let mut out = std::io::stdout().lock();
        let mut answer = Answer::new(text.trim_end().ends_with("<think>"), a.hide_think, color);
        let mut shown = Vec::new();
        s.generate(a.n_predict.unwrap_or(512), &INTERRUPTED, |piece| {
            shown.clear();
            answer.push(piece, &mut shown);
            let _ = out.write_all(&shown);
            let _ = out.flush();
        })
        .map_err(|e| (1, e))?;
        shown.clear();
        answer.finish(&mut shown);
        let _ = out.write_all(&shown);
        let _ = out.write_all(b"\n");
        let _ = out.flush();
        if INTERRUPTED.swap(false, Ordering::Relaxed) {
            eprintln!("[stopped]");
        }
        // The answer goes back to the template with its reasoning apart, for the template to
        // keep or drop (DeepSeek-R1's drops it from past turns), and its content as written.
        history.push(prompt::message("assistant", &answer.content, &answer.reasoning));
    }
    eprintln!();
    summary(a, &s.stats, load_s, None);
    Ok(())
}

fn main() {
    let args = match args::parse(std::env::args().skip(1)) {
        Ok(Parsed::Run(a)) => a,
        Ok(Parsed::Help) => {
            println!("{}", args::USAGE);
            return;
        }
        Err(e) => {
            eprintln!("deepseek-cli: {e}");
            std::process::exit(2);
        }
    };
    let result = if args.chat { run_chat(&args) } else { run_prompt(&args) };
    if let Err((code, e)) = result {
        eprintln!("deepseek-cli: {e}");
        std::process::exit(code);
    }
}
