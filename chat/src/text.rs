//! Turning a stream of token pieces into text: whole UTF-8 characters only (a piece may end
//! inside one), for the server's JSON and the CLI's terminal alike.

/// Collects bytes and hands out the longest valid UTF-8 prefix; an incomplete character at
/// the end waits for the next piece, invalid bytes become U+FFFD.
#[derive(Default)]
pub struct Utf8Stream {
    pending: Vec<u8>,
}

impl Utf8Stream {
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(s) => {
                    out.push_str(s);
                    self.pending.clear();
                    return out;
                }
                Err(e) => {
                    let good = e.valid_up_to();
                    // SAFETY: from_utf8 reported these bytes valid.
                    out.push_str(unsafe { std::str::from_utf8_unchecked(&self.pending[..good]) });
                    match e.error_len() {
                        // Incomplete at the end: keep it for the next piece.
                        None => {
                            self.pending.drain(..good);
                            return out;
                        }
                        Some(bad) => {
                            out.push('\u{FFFD}');
                            self.pending.drain(..good + bad);
                        }
                    }
                }
            }
        }
    }

    /// What is left at the end (an incomplete character: U+FFFD).
    pub fn finish(&mut self) -> String {
        let rest = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        rest
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_waits_for_whole_characters() {
        let text = "héllo 世界 🎉";
        let bytes = text.as_bytes();
        for cut in 1..bytes.len() {
            let mut u = Utf8Stream::default();
            let mut got = u.push(&bytes[..cut]);
            got += &u.push(&bytes[cut..]);
            got += &u.finish();
            assert_eq!(got, text, "cut at {cut}");
        }
        let mut u = Utf8Stream::default();
        assert_eq!(u.push(b"a\xffb\xe4\xb8"), "a\u{FFFD}b");
        assert_eq!(u.finish(), "\u{FFFD}");
    }
}
