//! An answer as it streams to the terminal: token pieces joined into whole UTF-8 characters,
//! the reasoning split off by deepseek-chat's `ThinkSplit` (the server's splitter) and shown
//! between `<think>` tags, dimmed, or hidden; content and reasoning kept apart for the history.

use deepseek_chat::reasoning::{Split, ThinkSplit};
use deepseek_chat::text::Utf8Stream;

const DIM: &[u8] = b"\x1b[2m";
const RESET: &[u8] = b"\x1b[0m";

pub struct Answer {
    split: ThinkSplit,
    /// Bytes of a character cut across pieces.
    utf8: Utf8Stream,
    hide: bool,
    color: bool,
    opened: bool,
    closed: bool,
    pub reasoning: String,
    pub content: String,
}

impl Answer {
    /// `inside`: the prompt ends with `<think>`, so the answer starts as reasoning.
    pub fn new(inside: bool, hide: bool, color: bool) -> Answer {
        Answer { split: ThinkSplit::new(inside), utf8: Utf8Stream::default(), hide, color, opened: false, closed: false, reasoning: String::new(), content: String::new() }
    }

    fn close(&mut self, out: &mut Vec<u8>) {
        if self.opened && !self.closed && !self.hide {
            out.extend_from_slice(b"</think>");
            if self.color {
                out.extend_from_slice(RESET);
            }
        }
        self.closed = true;
    }

    fn show(&mut self, s: Split, out: &mut Vec<u8>) {
        if !s.reasoning.is_empty() {
            if !self.opened && !self.hide {
                if self.color {
                    out.extend_from_slice(DIM);
                }
                out.extend_from_slice(b"<think>");
            }
            self.opened = true;
            if !self.hide {
                out.extend_from_slice(s.reasoning.as_bytes());
            }
            self.reasoning.push_str(&s.reasoning);
        }
        if !s.content.is_empty() {
            if self.opened && !self.closed {
                self.close(out);
                if !self.hide {
                    // The splitter drops the whitespace after `</think>`.
                    out.push(b'\n');
                }
            }
            out.extend_from_slice(s.content.as_bytes());
            self.content.push_str(&s.content);
        }
    }

    /// Feeds a piece; appends what to show now to `out`.
    pub fn push(&mut self, piece: &[u8], out: &mut Vec<u8>) {
        let text = self.utf8.push(piece);
        let mut s = Split::default();
        self.split.push(&text, &mut s);
        self.show(s, out);
    }

    /// Ends the answer: what was held back is shown, the style reset.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        let rest = self.utf8.finish();
        let mut s = Split::default();
        self.split.push(&rest, &mut s);
        self.split.finish(&mut s);
        self.show(s, out);
        self.close(out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(pieces: &[&[u8]], inside: bool, hide: bool) -> (Vec<u8>, String, String) {
        let mut a = Answer::new(inside, hide, true);
        let mut shown = Vec::new();
        pieces.iter().for_each(|p| a.push(p, &mut shown));
        a.finish(&mut shown);
        (shown, a.reasoning, a.content)
    }

    #[test]
    fn dims_and_hides_across_split_pieces() {
        let pieces: [&[u8]; 5] = [b"<thi", b"nk>plan</th", b"ink>", b"\n\nAnswer", b" <x"];
        let (shown, reasoning, content) = run(&pieces, false, false);
        assert_eq!(shown, b"\x1b[2m<think>plan</think>\x1b[0m\nAnswer <x");
        assert_eq!((reasoning.as_str(), content.as_str()), ("plan", "Answer <x"));
        let (hidden, _, _) = run(&pieces, false, true);
        assert_eq!(hidden, b"Answer <x");
    }

    #[test]
    fn a_prompt_that_opened_the_section_and_characters_cut_across_pieces() {
        let text = "étape</think>réponse 🎉".as_bytes();
        let pieces: Vec<&[u8]> = text.iter().map(std::slice::from_ref).collect();
        let (shown, reasoning, content) = run(&pieces, true, false);
        assert_eq!(String::from_utf8(shown).unwrap(), "\x1b[2m<think>étape</think>\x1b[0m\nréponse 🎉");
        assert_eq!((reasoning.as_str(), content.as_str()), ("étape", "réponse 🎉"));
        // An answer that stops inside the section still resets the style.
        let (shown, _, content) = run(&[b"still thinking"], true, false);
        assert_eq!(shown, b"\x1b[2m<think>still thinking</think>\x1b[0m");
        assert!(content.is_empty());
        // A character cut off by the end of the answer is one U+FFFD.
        let (_, _, content) = run(&[b"ok \xf0\x9f"], false, false);
        assert_eq!(content, "ok \u{FFFD}");
    }
}
