//! Pre-tokenizers: split a text (as codepoints) into words before BPE, exactly as llama.cpp's
//! `unicode_regex_split` does for each `tokenizer.ggml.pre`.
//!
//! Upstream applies a list of regexes in turn, each one splitting every piece left by the
//! previous one (matches and the gaps between them both become pieces). Four regexes have
//! hand-written splitters upstream (gpt2, llama3, qwen2, qwen35) and are ported line by line. The
//! others go through `std::regex` (ECMAScript, leftmost match, alternatives tried in order, greedy
//! quantifiers with backtracking) either on a "collapsed" text (regexes that use `\p{..}`: every
//! non-ASCII codepoint becomes one byte standing for its category, non-ASCII whitespace becomes
//! 0x0B) or on the codepoints themselves (non-ASCII whitespace again replaced by 0x0B). Each of
//! those regexes is implemented here as a hand-written matcher with the same result; each check
//! at a position where no match starts costs O(1), so every splitter runs in linear time.
//!
//! No allocation beyond the output vectors; nothing here is stateful.

use super::unicode::{flags, to_lower_ascii, ACCENT_MARK, LETTER, NUMBER, PUNCTUATION, SYMBOL, WHITESPACE_FLAG};

/// One regex of a pre-tokenizer's list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Split {
    /// `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)` (upstream's custom splitter)
    Gpt2,
    /// `(?i:'s|..)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
    Llama3,
    /// as Llama3 with `\p{N}` instead of `\p{N}{1,3}`
    Qwen2,
    /// as Qwen2 with letters extended by marks: `[\p{L}\p{M}]+`
    Qwen35,
    /// `[\r\n]`
    CrLf,
    /// `\s?[CLASS]+` over codepoints
    WsClassRun(&'static [(u32, u32)]),
    /// `[CLASS]+` over codepoints
    ClassRun(&'static [(u32, u32)]),
    /// `\s+$`
    TrailingWs,
    /// `\p{N}+`
    NumRun,
    /// `\p{N}`
    NumOne,
    /// `\p{N}{1,3}`
    Num3,
    /// `\s?\p{L}+`
    WsLetters,
    /// `\s?\p{P}+`
    WsPunct,
    /// `[\p{P}\$\+<=>\^~\|]+`, with a backtick too when the flag is set (falcon)
    PunctRun(bool),
    /// `[0-9][0-9][0-9]`
    Digits3,
    /// DeepSeek-V3's main regex:
    /// `[!-/:-@\[-`{-~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
    DeepSeekV3,
}

/// deepseek-llm: `\s?[A-Za-zµÀ-ÖØ-öø-ƺ...]+` (Latin, Greek, Cyrillic, ... letters)
pub(super) static DEEPSEEK_LLM_LETTERS: &[(u32, u32)] = &[
    (0x41, 0x5A), (0x61, 0x7A), (0xB5, 0xB5), (0xC0, 0xD6), (0xD8, 0xF6), (0xF8, 0x1BA), (0x1BC, 0x1BF),
    (0x1C4, 0x293), (0x295, 0x2AF), (0x370, 0x373), (0x376, 0x377), (0x37B, 0x37D), (0x37F, 0x37F),
    (0x386, 0x386), (0x388, 0x38A), (0x38C, 0x38C), (0x38E, 0x3A1), (0x3A3, 0x3F5), (0x3F7, 0x481),
    (0x48A, 0x52F), (0x531, 0x556), (0x10A0, 0x10C5), (0x13A0, 0x13F5), (0x13F8, 0x13FD), (0x1C90, 0x1CBA),
    (0x1CBD, 0x1CBF), (0x1D00, 0x1D2B), (0x1D6B, 0x1D77), (0x1D79, 0x1D9A), (0x1E00, 0x1F15), (0x1F18, 0x1F1D),
    (0x1F20, 0x1F45), (0x1F48, 0x1F4D), (0x1F50, 0x1F57), (0x1F59, 0x1F59), (0x1F5B, 0x1F5B), (0x1F5D, 0x1F5D),
    (0x1F5F, 0x1F7D), (0x1F80, 0x1FB4), (0x1FB6, 0x1FBC), (0x1FBE, 0x1FBE), (0x1FC2, 0x1FC4), (0x1FC6, 0x1FCC),
    (0x1FD0, 0x1FD3), (0x1FD6, 0x1FDB), (0x1FE0, 0x1FEC), (0x1FF2, 0x1FF4), (0x1FF6, 0x1FFC), (0x2102, 0x2102),
    (0x2107, 0x2107), (0x210A, 0x2113), (0x2115, 0x2115), (0x2119, 0x211D), (0x2124, 0x2124), (0x2126, 0x2126),
    (0x2128, 0x2128), (0x212A, 0x212D), (0x212F, 0x2134), (0x2139, 0x2139), (0x213C, 0x213F), (0x2145, 0x2149),
    (0x214E, 0x214E), (0x2183, 0x2184), (0x2C00, 0x2C7B), (0x2C7E, 0x2CE4), (0x2CEB, 0x2CEE), (0x2CF2, 0x2CF3),
    (0xA640, 0xA66D), (0xA680, 0xA69B), (0xA722, 0xA76F), (0xA771, 0xA787), (0xA78B, 0xA78E), (0xAB70, 0xABBF),
    (0xFB00, 0xFB06), (0xFB13, 0xFB17), (0xFF21, 0xFF3A), (0xFF41, 0xFF5A), (0x10400, 0x1044F), (0x104B0, 0x104D3),
    (0x104D8, 0x104FB), (0x10C80, 0x10CB2), (0x10CC0, 0x10CF2), (0x118A0, 0x118DF), (0x1E900, 0x1E943),
];

/// deepseek-llm: `\s?[!-/:-~！-／：-～‘-‟　-。]+`
pub(super) static DEEPSEEK_LLM_PUNCT: [(u32, u32); 6] =
    [(0x21, 0x2F), (0x3A, 0x7E), (0xFF01, 0xFF0F), (0xFF1A, 0xFF5E), (0x2018, 0x201F), (0x3000, 0x3002)];

/// deepseek-llm and deepseek-coder: `[一-龥ࠀ-一가-퟿]+`
pub(super) static DEEPSEEK_CJK: [(u32, u32); 3] = [(0x4E00, 0x9FA5), (0x800, 0x4E00), (0xAC00, 0xD7FF)];

/// deepseek-v3: `[一-龥぀-ゟ゠-ヿ]+`
pub(super) static DEEPSEEK_V3_CJK: [(u32, u32); 3] = [(0x4E00, 0x9FA5), (0x3040, 0x309F), (0x30A0, 0x30FF)];

/// The regex list of each supported pre-tokenizer family.
pub(super) fn steps(pre: PreType) -> &'static [Split] {
    use Split::*;
    static DEFAULT: [Split; 4] = [PunctRun(false), Gpt2, NumRun, Digits3];
    static LLAMA3: [Split; 1] = [Llama3];
    static DEEPSEEK_LLM: [Split; 6] = [
        CrLf,
        WsClassRun(DEEPSEEK_LLM_LETTERS),
        WsClassRun(&DEEPSEEK_LLM_PUNCT),
        TrailingWs,
        ClassRun(&DEEPSEEK_CJK),
        NumRun,
    ];
    static DEEPSEEK_CODER: [Split; 5] = [CrLf, WsLetters, WsPunct, ClassRun(&DEEPSEEK_CJK), NumOne];
    static DEEPSEEK_V3: [Split; 3] = [Num3, ClassRun(&DEEPSEEK_V3_CJK), DeepSeekV3];
    static FALCON: [Split; 3] = [PunctRun(true), Gpt2, Digits3];
    static STARCODER: [Split; 2] = [NumOne, Gpt2];
    static GPT2: [Split; 1] = [Gpt2];
    static QWEN2: [Split; 1] = [Qwen2];
    static QWEN35: [Split; 1] = [Qwen35];
    match pre {
        PreType::Default => &DEFAULT,
        PreType::Llama3 => &LLAMA3,
        PreType::DeepSeekLlm => &DEEPSEEK_LLM,
        PreType::DeepSeekCoder => &DEEPSEEK_CODER,
        PreType::DeepSeekV3 => &DEEPSEEK_V3,
        PreType::Falcon => &FALCON,
        PreType::StarCoder => &STARCODER,
        PreType::Gpt2 => &GPT2,
        PreType::Qwen2 => &QWEN2,
        PreType::Qwen35 => &QWEN35,
    }
}

/// The pre-tokenizer families implemented (each is one regex list upstream).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum PreType {
    Default,
    Llama3,
    DeepSeekLlm,
    DeepSeekCoder,
    DeepSeekV3,
    Falcon,
    StarCoder,
    Gpt2,
    Qwen2,
    Qwen35,
}

/// Splits `cpts` into words: returns the word lengths (in codepoints), in order, covering all of
/// `cpts`.
pub(super) fn split(cpts: &[u32], steps: &[Split]) -> Vec<usize> {
    let mut pieces = if cpts.is_empty() { Vec::new() } else { vec![cpts.len()] };
    let mut next = Vec::with_capacity(cpts.len() / 4 + 1);
    for &step in steps {
        next.clear();
        let mut start = 0;
        for &len in &pieces {
            split_piece(cpts, start, start + len, step, &mut next);
            start += len;
        }
        std::mem::swap(&mut pieces, &mut next);
    }
    pieces
}

fn split_piece(cpts: &[u32], ini: usize, end: usize, step: Split, out: &mut Vec<usize>) {
    use Split::*;
    let t = Text { cpts, ini, end };
    match step {
        Gpt2 => split_gpt2(&t, out),
        Llama3 => split_llama3_like(&t, LetterRule::Letters, NumberRule::UpToThree, out),
        Qwen2 => split_llama3_like(&t, LetterRule::Letters, NumberRule::One, out),
        Qwen35 => split_llama3_like(&t, LetterRule::LettersAndMarks, NumberRule::One, out),
        TrailingWs => {
            let mut s = end;
            while s > ini && wide_is_space(wide(cpts[s - 1])) {
                s -= 1;
            }
            if s > ini {
                out.push(s - ini);
            }
            if s < end {
                out.push(end - s);
            }
        }
        _ => regex_iterate(&t, out, |p| match_at(&t, p, step)),
    }
}

/// The piece being split, with upstream's out-of-range conventions.
struct Text<'a> {
    cpts: &'a [u32],
    ini: usize,
    end: usize,
}

const OUT_OF_RANGE: u32 = 0xFFFF_FFFF;

impl Text<'_> {
    #[inline]
    fn cpt(&self, pos: usize) -> u32 {
        if pos >= self.ini && pos < self.end {
            self.cpts[pos]
        } else {
            OUT_OF_RANGE
        }
    }
    /// Flags, or 0 outside the piece (upstream's empty `unicode_cpt_flags{}`). Inside, flags are
    /// never 0, so `flags != 0` is upstream's `as_uint()` test.
    #[inline]
    fn flags(&self, pos: usize) -> u16 {
        if pos >= self.ini && pos < self.end {
            flags(self.cpts[pos])
        } else {
            0
        }
    }
    /// The collapsed byte upstream's `std::regex` sees for the codepoint at `pos` (0 outside: it
    /// matches no class used here).
    #[inline]
    fn col(&self, pos: usize) -> u8 {
        if pos >= self.ini && pos < self.end {
            collapse(self.cpts[pos])
        } else {
            0
        }
    }
    /// The wide character upstream's `std::wregex` sees (OUT_OF_RANGE outside).
    #[inline]
    fn wide(&self, pos: usize) -> u32 {
        if pos >= self.ini && pos < self.end {
            wide(self.cpts[pos])
        } else {
            OUT_OF_RANGE
        }
    }
}

/// `regex_iterator` over one piece: leftmost matches, gaps between them kept as pieces.
fn regex_iterate(t: &Text, out: &mut Vec<usize>, mut match_at: impl FnMut(usize) -> Option<usize>) {
    let mut last = t.ini;
    let mut pos = t.ini;
    while pos < t.end {
        match match_at(pos) {
            Some(m_end) => {
                debug_assert!(m_end > pos && m_end <= t.end);
                if pos > last {
                    out.push(pos - last);
                }
                out.push(m_end - pos);
                last = m_end;
                pos = m_end;
            }
            None => pos += 1,
        }
    }
    if t.end > last {
        out.push(t.end - last);
    }
}

// ---- character classes as std::regex sees them ----

#[inline]
fn collapse(cpt: u32) -> u8 {
    if cpt < 0x80 {
        return cpt as u8;
    }
    let f = flags(cpt);
    if f & WHITESPACE_FLAG != 0 {
        return 0x0B;
    }
    match f & 0xFF {
        NUMBER => 0xD1,
        LETTER => 0xD2,
        PUNCTUATION => 0xD3,
        ACCENT_MARK => 0xD4,
        SYMBOL => 0xD5,
        _ => 0xD0,
    }
}

#[inline]
fn wide(cpt: u32) -> u32 {
    if cpt > 0x7F && flags(cpt) & WHITESPACE_FLAG != 0 {
        0x0B
    } else {
        cpt
    }
}

/// `\s` of std::regex in the "C" locale.
#[inline]
fn c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0B | 0x0C | b'\r')
}
#[inline]
fn wide_is_space(w: u32) -> bool {
    w < 0x80 && c_space(w as u8)
}
#[inline]
fn c_letter(b: u8) -> bool {
    b == 0xD2 || b.is_ascii_alphabetic()
}
#[inline]
fn c_number(b: u8) -> bool {
    b == 0xD1 || b.is_ascii_digit()
}
#[inline]
fn c_punct(b: u8) -> bool {
    b == 0xD3 || matches!(b, b'!'..=b'#' | b'%'..=b'*' | b','..=b'/' | b':' | b';' | b'?' | b'@' | b'['..=b']' | b'_' | b'{' | b'}')
}
#[inline]
fn c_symbol(b: u8) -> bool {
    b == 0xD5 || matches!(b, b'$' | b'+' | b'<'..=b'>' | b'^' | b'`' | b'|' | b'~')
}
#[inline]
fn c_mark(b: u8) -> bool {
    b == 0xD4
}
#[inline]
fn in_ranges(w: u32, ranges: &[(u32, u32)]) -> bool {
    ranges.iter().any(|&(a, b)| a <= w && w <= b)
}

/// End of the match starting at `p` (inside the piece), if a match starts there.
fn match_at(t: &Text, p: usize, step: Split) -> Option<usize> {
    use Split::*;
    let run = |mut q: usize, pred: &dyn Fn(usize) -> bool| {
        while q < t.end && pred(q) {
            q += 1;
        }
        q
    };
    match step {
        CrLf => matches!(t.cpts[p], 0x0A | 0x0D).then_some(p + 1),
        ClassRun(cls) => {
            let inc = |q: usize| in_ranges(t.wide(q), cls);
            inc(p).then(|| run(p, &inc))
        }
        WsClassRun(cls) => {
            let inc = |q: usize| in_ranges(t.wide(q), cls);
            if wide_is_space(t.wide(p)) && inc(p + 1) {
                Some(run(p + 1, &inc))
            } else if inc(p) {
                Some(run(p, &inc))
            } else {
                None
            }
        }
        NumRun => c_number(t.col(p)).then(|| run(p, &|q| c_number(t.col(q)))),
        NumOne => c_number(t.col(p)).then_some(p + 1),
        Num3 => c_number(t.col(p)).then(|| {
            let mut q = p + 1;
            while q < t.end && q < p + 3 && c_number(t.col(q)) {
                q += 1;
            }
            q
        }),
        WsLetters | WsPunct => {
            let cls = if step == WsLetters { c_letter } else { c_punct };
            if c_space(t.col(p)) && cls(t.col(p + 1)) {
                Some(run(p + 1, &|q| cls(t.col(q))))
            } else if cls(t.col(p)) {
                Some(run(p, &|q| cls(t.col(q))))
            } else {
                None
            }
        }
        PunctRun(backtick) => {
            let inc = |q: usize| {
                let b = t.col(q);
                c_punct(b) || matches!(b, b'$' | b'+' | b'<'..=b'>' | b'^' | b'~' | b'|') || (backtick && b == b'`')
            };
            inc(p).then(|| run(p, &inc))
        }
        Digits3 => (p + 3 <= t.end && (p..p + 3).all(|q| (0x30..=0x39).contains(&t.cpts[q]))).then_some(p + 3),
        DeepSeekV3 => match_deepseek_v3(t, p),
        Gpt2 | Llama3 | Qwen2 | Qwen35 | TrailingWs => unreachable!("not a std::regex splitter"),
    }
}

fn match_deepseek_v3(t: &Text, p: usize) -> Option<usize> {
    let c = t.col(p);
    let run = |mut q: usize, pred: &dyn Fn(u8) -> bool| {
        while q < t.end && pred(t.col(q)) {
            q += 1;
        }
        q
    };
    // [!-/:-@\[-`{-~][A-Za-z]+
    if c.is_ascii_punctuation() && t.col(p + 1).is_ascii_alphabetic() {
        return Some(run(p + 1, &|b| b.is_ascii_alphabetic()));
    }
    // [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+
    let lm = |b: u8| c_letter(b) || c_mark(b);
    let optional = !(c == b'\r' || c == b'\n' || c_letter(c) || c_punct(c) || c_symbol(c));
    if optional && lm(t.col(p + 1)) {
        return Some(run(p + 1, &lm));
    }
    if lm(c) {
        return Some(run(p, &lm));
    }
    // ' ?[\p{P}\p{S}]+[\r\n]*'
    let ps = |b: u8| c_punct(b) || c_symbol(b);
    let crlf = |b: u8| b == b'\r' || b == b'\n';
    if c == b' ' && ps(t.col(p + 1)) {
        let q = run(p + 1, &ps);
        return Some(run(q, &crlf));
    }
    if ps(c) {
        let q = run(p, &ps);
        return Some(run(q, &crlf));
    }
    if !c_space(c) {
        return None;
    }
    // \s*[\r\n]+ : through the last CR/LF of the whitespace run
    let ws_end = run(p, &c_space);
    if let Some(last) = (p..ws_end).rev().find(|&q| crlf(t.col(q))) {
        return Some(last + 1);
    }
    // \s+(?!\S) then \s+
    if ws_end == t.end {
        Some(ws_end)
    } else if ws_end - p >= 2 {
        Some(ws_end - 1)
    } else {
        Some(ws_end)
    }
}

// ---- upstream's custom splitters ----

/// Pushes the token [prev_end, end) if non-empty; returns its length.
struct Emitter<'o> {
    out: &'o mut Vec<usize>,
    prev_end: usize,
}

impl Emitter<'_> {
    #[inline]
    fn add(&mut self, end: usize) -> usize {
        debug_assert!(self.prev_end <= end);
        let len = end - self.prev_end;
        if len > 0 {
            self.out.push(len);
        }
        self.prev_end = end;
        len
    }
}

#[inline]
fn has(f: u16, bits: u16) -> bool {
    f & bits != 0
}

/// `'s|'t|'m|'d` (returns 2) or `'re|'ve|'ll` (returns 3) at `pos`; `lower` folds case first.
#[inline]
fn contraction(t: &Text, pos: usize, lower: bool) -> usize {
    if t.cpt(pos) != '\'' as u32 || pos + 1 >= t.end {
        return 0;
    }
    let fold = |c: u32| if lower { to_lower_ascii(c) } else { c };
    let next = fold(t.cpt(pos + 1));
    if [b's', b't', b'm', b'd'].iter().any(|&c| next == c as u32) {
        return 2;
    }
    if pos + 2 < t.end {
        let next2 = fold(t.cpt(pos + 2));
        let pair = |a: u8, b: u8| next == a as u32 && next2 == b as u32;
        if pair(b'r', b'e') || pair(b'v', b'e') || pair(b'l', b'l') {
            return 3;
        }
    }
    0
}

fn split_gpt2(t: &Text, out: &mut Vec<usize>) {
    let mut e = Emitter { out, prev_end: t.ini };
    let mut pos = t.ini;
    while pos < t.end {
        let cpt = t.cpt(pos);
        let f = t.flags(pos);

        let n = contraction(t, pos, false);
        if n > 0 {
            pos += e.add(pos + n);
            continue;
        }

        let is_space = cpt == ' ' as u32;
        let mut f2 = if is_space { t.flags(pos + 1) } else { f };
        // <space>?\p{L}+ , <space>?\p{N}+ , <space>?[^\s\p{L}\p{N}]+
        let classes: [&dyn Fn(u16) -> bool; 3] = [
            &|f| has(f, LETTER),
            &|f| has(f, NUMBER),
            &|f| !has(f, WHITESPACE_FLAG | LETTER | NUMBER) && f != 0,
        ];
        if let Some(cls) = classes.iter().find(|cls| cls(f2)) {
            pos += is_space as usize;
            while cls(f2) {
                pos += 1;
                f2 = t.flags(pos);
            }
            e.add(pos);
            continue;
        }

        let mut n_ws = 0;
        while has(t.flags(pos + n_ws), WHITESPACE_FLAG) {
            n_ws += 1;
        }
        // \s+(?!\S)
        if n_ws > 1 && t.cpt(pos + n_ws) != OUT_OF_RANGE {
            pos += n_ws - 1;
            e.add(pos);
            continue;
        }
        // \s+
        if n_ws > 0 {
            pos += n_ws;
            e.add(pos);
            continue;
        }
        // no match
        pos += 1;
        e.add(pos);
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum LetterRule {
    Letters,
    LettersAndMarks,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum NumberRule {
    One,
    UpToThree,
}

fn split_llama3_like(t: &Text, letters: LetterRule, numbers: NumberRule, out: &mut Vec<usize>) {
    let word = if letters == LetterRule::Letters { LETTER } else { LETTER | ACCENT_MARK };
    let mut e = Emitter { out, prev_end: t.ini };
    let mut pos = t.ini;
    let is_crlf = |c: u32| c == '\r' as u32 || c == '\n' as u32;
    while pos < t.end {
        let cpt = t.cpt(pos);
        let f = t.flags(pos);

        // (?i:'s|'t|'re|'ve|'m|'ll|'d)
        let n = contraction(t, pos, true);
        if n > 0 {
            pos += e.add(pos + n);
            continue;
        }

        // [^\r\n\p{L}\p{N}]?\p{L}+   (qwen35: [\p{L}\p{M}]+)
        if !(is_crlf(cpt) || has(f, NUMBER)) && (has(f, word) || has(t.flags(pos + 1), word)) {
            pos += 1;
            while has(t.flags(pos), word) {
                pos += 1;
            }
            e.add(pos);
            continue;
        }

        // \p{N}{1,3}   (qwen2: \p{N})
        if has(f, NUMBER) {
            match numbers {
                NumberRule::One => {
                    pos += 1;
                    e.add(pos);
                }
                NumberRule::UpToThree => {
                    let mut ini = pos;
                    while has(t.flags(pos), NUMBER) {
                        pos += 1;
                        if pos - ini >= 3 {
                            e.add(pos);
                            ini = pos;
                        }
                    }
                    e.add(pos);
                }
            }
            continue;
        }

        // <space>?[^\s\p{L}\p{N}]+[\r\n]*   (qwen35 also excludes \p{M})
        let other = |f: u16| !has(f, WHITESPACE_FLAG | word | NUMBER);
        let mut f2 = if cpt == ' ' as u32 { t.flags(pos + 1) } else { f };
        if other(f2) && f != 0 {
            pos += (cpt == ' ' as u32) as usize;
            while other(f2) && f2 != 0 {
                pos += 1;
                f2 = t.flags(pos);
            }
            while is_crlf(t.cpt(pos)) {
                pos += 1;
            }
            e.add(pos);
            continue;
        }

        let mut n_ws = 0;
        let mut last_end_crlf = 0;
        while has(t.flags(pos + n_ws), WHITESPACE_FLAG) {
            if is_crlf(t.cpt(pos + n_ws)) {
                last_end_crlf = pos + n_ws + 1;
            }
            n_ws += 1;
        }
        // \s*[\r\n]+
        if last_end_crlf > 0 {
            pos = last_end_crlf;
            e.add(pos);
            continue;
        }
        // \s+(?!\S)
        if n_ws > 1 && t.cpt(pos + n_ws) != OUT_OF_RANGE {
            pos += n_ws - 1;
            e.add(pos);
            continue;
        }
        // \s+
        if n_ws > 0 {
            pos += n_ws;
            e.add(pos);
            continue;
        }
        // no match
        pos += 1;
        e.add(pos);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str, pre: PreType) -> Vec<String> {
        let cpts: Vec<u32> = text.chars().map(|c| c as u32).collect();
        let mut start = 0;
        split(&cpts, steps(pre))
            .into_iter()
            .map(|n| {
                let w: String = cpts[start..start + n].iter().map(|&c| char::from_u32(c).unwrap()).collect();
                start += n;
                w
            })
            .collect()
    }

    #[test]
    fn gpt2_words() {
        assert_eq!(words("Hello world's  end 123!!", PreType::Gpt2), ["Hello", " world", "'s", " ", " end", " 123", "!!"]);
    }

    #[test]
    fn llama3_digits_and_newlines() {
        assert_eq!(words("a 1234567\n\n  x", PreType::Llama3), ["a", " ", "123", "456", "7", "\n\n", " ", " x"]);
    }

    #[test]
    fn qwen2_single_digits() {
        assert_eq!(words("x12 ", PreType::Qwen2), ["x", "1", "2", " "]);
    }

    #[test]
    fn deepseek_v3_main() {
        assert_eq!(words("#include <stdio.h>\n", PreType::DeepSeekV3), ["#include", " <", "stdio", ".h", ">\n"]);
        assert_eq!(words("中文abc 12345", PreType::DeepSeekV3), ["中文", "abc", " ", "123", "45"]);
    }

    #[test]
    fn deepseek_llm_trailing_space() {
        assert_eq!(words("Hi  ", PreType::DeepSeekLlm), ["Hi", "  "]);
        assert_eq!(words("a\n b", PreType::DeepSeekLlm), ["a", "\n", " b"]);
    }
}

#[cfg(test)]
mod differential {
    use super::*;

    /// Compares with llama.cpp's `unicode_regex_split` on fuzz texts (`fuzz.txt`: per text its byte
    /// length and bytes; `fuzz.out`: per text and pre-tokenizer the word lengths in bytes), made by
    /// tests/data/gen/pretok_fuzz.py (`scripts/regenerate-references.sh pretok`).
    #[test]
    #[ignore]
    fn pretok_matches_upstream() {
        let dir = std::env::var("DEEPSEEK_PRETOK_FUZZ_DIR").expect("set DEEPSEEK_PRETOK_FUZZ_DIR");
        let data = std::fs::read(format!("{dir}/fuzz.txt")).unwrap();
        let expect = std::fs::read_to_string(format!("{dir}/fuzz.out")).unwrap();
        let mut lines = expect.lines();
        let sets = [
            ("default", PreType::Default), ("llama3", PreType::Llama3), ("deepseek-llm", PreType::DeepSeekLlm),
            ("deepseek-coder", PreType::DeepSeekCoder), ("deepseek-v3", PreType::DeepSeekV3), ("falcon", PreType::Falcon),
            ("starcoder", PreType::StarCoder), ("gpt2", PreType::Gpt2), ("qwen2", PreType::Qwen2), ("qwen35", PreType::Qwen35),
        ];
        let mut i = 0;
        let (mut n, mut bad) = (0, 0);
        while i < data.len() {
            let nl = data[i..].iter().position(|&b| b == b'\n').unwrap() + i;
            let len: usize = std::str::from_utf8(&data[i..nl]).unwrap().parse().unwrap();
            let text = &data[nl + 1..nl + 1 + len];
            i = nl + 1 + len + 1;
            let mut cpts = Vec::new();
            crate::tokenizer::unicode::decode_utf8(text, &mut cpts);
            for (name, pre) in sets {
                let line = lines.next().unwrap();
                let mut it = line.split(' ');
                assert_eq!(it.next().unwrap(), name);
                let want: Vec<usize> = it.map(|x| x.parse().unwrap()).collect();
                let mut start = 0;
                let got: Vec<usize> = split(&cpts, steps(pre)).into_iter().map(|l| {
                    let mut b = Vec::new();
                    for &c in &cpts[start..start + l] { crate::tokenizer::unicode::encode_utf8(c, &mut b); }
                    start += l;
                    b.len()
                }).collect();
                n += 1;
                if got != want {
                    bad += 1;
                    if bad <= 12 {
                        eprintln!("{name}: {:?}\n  got  {:?}\n  want {:?}", String::from_utf8_lossy(text), got, want);
                    }
                }
            }
        }
        eprintln!("{}/{} identical", n - bad, n);
        assert_eq!(bad, 0);
    }
}
