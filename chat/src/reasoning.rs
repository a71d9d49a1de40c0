//! An answer's reasoning (`<think>…</think>`, DeepSeek-R1's and Qwen3's) split from its
//! content as it streams, also when a tag arrives cut across pieces: what llama-server's
//! `reasoning_format: "deepseek"` returns as `reasoning_content`.

const OPEN: &str = "<think>";
const CLOSE: &str = "</think>";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum State {
    /// Nothing but whitespace seen: a `<think>` may still open the answer.
    Start,
    Reasoning,
    /// Just after `</think>`: whitespace is dropped.
    AfterThink,
    Content,
}

/// Splits an answer into reasoning and content as it streams.
pub struct ThinkSplit {
    state: State,
    pending: String,
}

/// Text for each of the two fields.
#[derive(Default, Debug, PartialEq, Eq)]
pub struct Split {
    pub reasoning: String,
    pub content: String,
}

/// Bytes at the end of `s` that are a proper prefix of `tag`.
fn partial_suffix(s: &str, tag: &str) -> usize {
    (1..tag.len()).rev().find(|&n| s.len() >= n && s.is_char_boundary(s.len() - n) && tag.starts_with(&s[s.len() - n..])).unwrap_or(0)
}

impl ThinkSplit {
    /// `inside`: the prompt already opened the think section (it ends with `<think>`).
    pub fn new(inside: bool) -> ThinkSplit {
        ThinkSplit { state: if inside { State::Reasoning } else { State::Start }, pending: String::new() }
    }

    pub fn push(&mut self, text: &str, out: &mut Split) {
        self.pending.push_str(text);
        loop {
            match self.state {
                State::Start => {
                    let t = self.pending.trim_start();
                    if let Some(rest) = t.strip_prefix(OPEN) {
                        self.pending = rest.to_string();
                        self.state = State::Reasoning;
                    } else if OPEN.starts_with(t) {
                        return; // empty or a beginning of the tag: wait
                    } else {
                        self.state = State::Content;
                    }
                }
                State::Reasoning => {
                    if let Some(at) = self.pending.find(CLOSE) {
                        out.reasoning.push_str(&self.pending[..at]);
                        self.pending.drain(..at + CLOSE.len());
                        self.state = State::AfterThink;
                        continue;
                    }
                    let keep = partial_suffix(&self.pending, CLOSE);
                    let cut = self.pending.len() - keep;
                    out.reasoning.push_str(&self.pending[..cut]);
                    self.pending.drain(..cut);
                    return;
                }
                State::AfterThink => {
                    let t = self.pending.trim_start();
                    if t.is_empty() {
                        self.pending.clear();
                        return;
                    }
                    self.pending = t.to_string();
                    self.state = State::Content;
                }
                State::Content => {
                    out.content.push_str(&self.pending);
                    self.pending.clear();
                    return;
                }
            }
        }
    }

    /// The end of the answer: what was held back goes where it was heading.
    pub fn finish(&mut self, out: &mut Split) {
        let rest = std::mem::take(&mut self.pending);
        match self.state {
            State::Reasoning => out.reasoning.push_str(&rest),
            State::Start | State::Content => out.content.push_str(&rest),
            State::AfterThink => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split_all(pieces: &[&str], inside: bool) -> Split {
        let mut s = ThinkSplit::new(inside);
        let mut out = Split::default();
        for p in pieces {
            s.push(p, &mut out);
        }
        s.finish(&mut out);
        out
    }

    #[test]
    fn think_section_becomes_reasoning_across_split_tags() {
        let whole = "<think>\nplan it</think>\n\nThe answer.";
        let want = Split { reasoning: "\nplan it".into(), content: "The answer.".into() };
        assert_eq!(split_all(&[whole], false), want);
        // Every way of cutting the text in two, and one byte at a time.
        for cut in 1..whole.len() {
            assert_eq!(split_all(&[&whole[..cut], &whole[cut..]], false), want, "cut at {cut}");
        }
        let bytes: Vec<String> = whole.chars().map(String::from).collect();
        let refs: Vec<&str> = bytes.iter().map(String::as_str).collect();
        assert_eq!(split_all(&refs, false), want);
    }

    #[test]
    fn no_think_is_all_content_and_an_open_prompt_is_all_reasoning_until_closed() {
        assert_eq!(split_all(&["Hello", " <thin", "g>"], false), Split { reasoning: "".into(), content: "Hello <thing>".into() });
        assert_eq!(split_all(&["  <thi"], false), Split { reasoning: "".into(), content: "  <thi".into() });
        assert_eq!(split_all(&["step 1, ", "step 2"], true), Split { reasoning: "step 1, step 2".into(), content: "".into() });
        assert_eq!(split_all(&["a</thi", "nk>b"], true), Split { reasoning: "a".into(), content: "b".into() });
        // A '<' that is not the closing tag goes out as reasoning once decided.
        assert_eq!(split_all(&["x <y", "z"], true), Split { reasoning: "x <yz".into(), content: "".into() });
    }

}
