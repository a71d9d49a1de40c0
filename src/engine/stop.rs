//! Stop strings over a stream of token pieces: holds back the tokens whose text might be the
//! start of a stop string, releases them as soon as it cannot be, and on a match releases
//! only the text before it (the token in which the stop string begins, cut to the bytes before
//! it). Buffers are sized at construction; pushing allocates nothing.

pub struct StopMatcher {
    stops: Vec<Vec<u8>>,
    max_len: usize,
    /// Held tokens and their piece lengths, oldest first.
    held: Vec<(i32, u32)>,
    /// The held tokens' text.
    text: Vec<u8>,
}

impl StopMatcher {
    pub fn new(stops: Vec<Vec<u8>>) -> StopMatcher {
        let max_len = stops.iter().map(|s| s.len()).max().unwrap_or(0);
        StopMatcher { stops, max_len, held: Vec::with_capacity(if max_len > 0 { 64 } else { 0 }), text: Vec::with_capacity(if max_len > 0 { 2 * max_len + 256 } else { 0 }) }
    }

    /// Tokens held back now.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Adds a token; `release(token, n_bytes)` receives every token that is now certain
    /// output, in order. Returns true when a stop string completed: the text from its start on
    /// is not released, and nothing is held any more.
    pub fn push(&mut self, token: i32, piece: &[u8], mut release: impl FnMut(i32, u32)) -> bool {
        if self.stops.is_empty() {
            release(token, piece.len() as u32);
            return false;
        }
        self.text.extend_from_slice(piece);
        self.held.push((token, piece.len() as u32));
        if let Some(at) = self.earliest_match() {
            let mut off = 0usize;
            for &(t, n) in &self.held {
                if off >= at {
                    break;
                }
                let take = (n as usize).min(at - off);
                release(t, take as u32);
                off += n as usize;
            }
            self.held.clear();
            self.text.clear();
            return true;
        }
        let cut = self.text.len() - self.partial_suffix();
        let (mut off, mut k) = (0usize, 0usize);
        while k < self.held.len() && off + self.held[k].1 as usize <= cut {
            release(self.held[k].0, self.held[k].1);
            off += self.held[k].1 as usize;
            k += 1;
        }
        self.held.drain(..k);
        self.text.drain(..off);
        false
    }

    /// Releases the oldest held token even though a stop string might still start in it
    /// (when the output buffer could not take the held tokens otherwise).
    pub fn release_oldest(&mut self, mut release: impl FnMut(i32, u32)) {
        if let Some(&(t, n)) = self.held.first() {
            release(t, n);
            self.held.remove(0);
            self.text.drain(..n as usize);
        }
    }

    /// Releases everything held (the request ends for another reason).
    pub fn flush(&mut self, mut release: impl FnMut(i32, u32)) {
        self.held.iter().for_each(|&(t, n)| release(t, n));
        self.held.clear();
        self.text.clear();
    }

    /// Drops everything held.
    pub fn discard(&mut self) {
        self.held.clear();
        self.text.clear();
    }

    fn earliest_match(&self) -> Option<usize> {
        self.stops.iter().filter_map(|s| self.text.windows(s.len()).position(|w| w == &s[..])).min()
    }

    /// The length of the longest end of the held text that begins some stop string.
    fn partial_suffix(&self) -> usize {
        let most = self.text.len().min(self.max_len.saturating_sub(1));
        (1..=most).rev().find(|&l| self.stops.iter().any(|s| s.starts_with(&self.text[self.text.len() - l..]))).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs pieces through a matcher; returns the released text and whether it stopped.
    fn run(stops: &[&str], pieces: &[&str]) -> (String, bool, Vec<i32>) {
        let mut m = StopMatcher::new(stops.iter().map(|s| s.as_bytes().to_vec()).collect());
        let (mut out, mut ids) = (Vec::new(), Vec::new());
        for (i, p) in pieces.iter().enumerate() {
            let stopped = m.push(i as i32, p.as_bytes(), |t, n| {
                out.extend_from_slice(&pieces[t as usize].as_bytes()[..n as usize]);
                ids.push(t);
            });
            if stopped {
                return (String::from_utf8(out).unwrap(), true, ids);
            }
        }
        m.flush(|t, n| {
            out.extend_from_slice(&pieces[t as usize].as_bytes()[..n as usize]);
            ids.push(t);
        });
        (String::from_utf8(out).unwrap(), false, ids)
    }

    #[test]
    fn text_before_the_stop_string_is_released_and_nothing_after() {
        assert_eq!(run(&["END"], &["a", "bE", "N", "Dx", "y"]), ("ab".into(), true, vec![0, 1]));
        assert_eq!(run(&["\n\n"], &["one", "\n", "\ntwo"]), ("one".into(), true, vec![0]));
        assert_eq!(run(&["."], &["abc.", "d"]), ("abc".into(), true, vec![0]));
        // A stop string at the very start releases nothing.
        assert_eq!(run(&["x"], &["xy"]), ("".into(), true, vec![]));
    }

    #[test]
    fn a_partial_match_that_fails_is_released_in_full() {
        assert_eq!(run(&["END"], &["a", "EN", "d", "b"]), ("aENdb".into(), false, vec![0, 1, 2, 3]));
        // The earliest of several stop strings wins.
        assert_eq!(run(&["cd", "b"], &["a", "bcd"]), ("a".into(), true, vec![0]));
    }

    #[test]
    fn tokens_are_held_only_while_they_might_start_a_stop_string() {
        let mut m = StopMatcher::new(vec![b"<|end|>".to_vec()]);
        let mut released = Vec::new();
        assert!(!m.push(0, b"hello", |t, _| released.push(t)));
        assert_eq!(released, [0]);
        assert!(!m.push(1, b" <|e", |t, _| released.push(t)));
        assert_eq!((released.len(), m.held()), (1, 1));
        assert!(!m.push(2, b"nd", |t, _| released.push(t)));
        assert_eq!(m.held(), 2);
        assert!(!m.push(3, b"!", |t, _| released.push(t)));
        assert_eq!((released, m.held()), (vec![0, 1, 2, 3], 0));
    }

    #[test]
    fn without_stop_strings_everything_passes_at_once() {
        assert_eq!(run(&[], &["a", "b"]), ("ab".into(), false, vec![0, 1]));
    }
}
