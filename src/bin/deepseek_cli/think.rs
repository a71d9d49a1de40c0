//! Shows an answer's `<think>…</think>` section dimmed (or hides it), streaming: bytes that
//! could still be the start of a tag are held back until the next piece decides.

const OPEN: &[u8] = b"<think>";
const CLOSE: &[u8] = b"</think>";
const DIM: &[u8] = b"\x1b[2m";
const RESET: &[u8] = b"\x1b[0m";

pub struct ThinkFilter {
    hide: bool,
    color: bool,
    inside: bool,
    pending: Vec<u8>,
}

/// How many trailing bytes of `buf` are a proper prefix of `tag`.
fn partial_tag(buf: &[u8], tag: &[u8]) -> usize {
    (1..tag.len()).rev().find(|&n| buf.len() >= n && buf[buf.len() - n..] == tag[..n]).unwrap_or(0)
}

impl ThinkFilter {
    pub fn new(hide: bool, color: bool) -> ThinkFilter {
        ThinkFilter { hide, color, inside: false, pending: Vec::new() }
    }

    fn emit(&self, bytes: &[u8], out: &mut Vec<u8>) {
        if !(self.inside && self.hide) {
            out.extend_from_slice(bytes);
        }
    }

    /// Feeds a piece; appends what should be shown now to `out`.
    pub fn push(&mut self, piece: &[u8], out: &mut Vec<u8>) {
        self.pending.extend_from_slice(piece);
        loop {
            let tag = if self.inside { CLOSE } else { OPEN };
            if let Some(at) = self.pending.windows(tag.len()).position(|w| w == tag) {
                let before: Vec<u8> = self.pending.drain(..at + tag.len()).collect();
                if self.inside {
                    self.emit(&before, out);
                    if self.color && !self.hide {
                        out.extend_from_slice(RESET);
                    }
                    self.inside = false;
                } else {
                    self.emit(&before[..at], out);
                    self.inside = true;
                    if self.color && !self.hide {
                        out.extend_from_slice(DIM);
                    }
                    self.emit(tag, out);
                }
                continue;
            }
            let keep = partial_tag(&self.pending, tag);
            let ready: Vec<u8> = self.pending.drain(..self.pending.len() - keep).collect();
            self.emit(&ready, out);
            return;
        }
    }

    /// Ends the answer: flushes held-back bytes and resets the style.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        let rest = std::mem::take(&mut self.pending);
        self.emit(&rest, out);
        if self.inside && self.color && !self.hide {
            out.extend_from_slice(RESET);
        }
        self.inside = false;
    }
}

/// The answer without its think section, for the conversation history (DeepSeek-R1's advice).
pub fn strip_think(answer: &str) -> &str {
    match answer.find("</think>") {
        Some(end) => answer[end + CLOSE.len()..].trim_start(),
        None => answer,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dims_and_hides_across_split_pieces() {
        let pieces: [&[u8]; 5] = [b"<thi", b"nk>plan</th", b"ink>", b"\n\nAnswer", b" <x"];
        let mut shown = Vec::new();
        let mut f = ThinkFilter::new(false, true);
        pieces.iter().for_each(|p| f.push(p, &mut shown));
        f.finish(&mut shown);
        assert_eq!(shown, b"\x1b[2m<think>plan</think>\x1b[0m\n\nAnswer <x");
        let mut hidden = Vec::new();
        let mut f = ThinkFilter::new(true, true);
        pieces.iter().for_each(|p| f.push(p, &mut hidden));
        f.finish(&mut hidden);
        assert_eq!(hidden, b"\n\nAnswer <x");
    }
}
