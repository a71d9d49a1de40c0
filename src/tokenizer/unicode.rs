//! Unicode helpers with upstream's exact behaviour (llama.cpp `src/unicode.cpp`): the lenient
//! UTF-8 decoder, the category/whitespace flags from `unicode-data.cpp`, `unicode_tolower` as far
//! as the pre-tokenizers use it, and GPT-2's byte ↔ unicode mapping.
//!
//! Everything here is immutable; the one lazily built table is read-only after construction.

use once_cell::sync::Lazy;

use super::unicode_table::{CATEGORY_RANGES, LOWER_TO_ASCII, WHITESPACE};

pub(crate) const UNDEFINED: u16 = 0x0001;
pub(crate) const NUMBER: u16 = 0x0002;
pub(crate) const LETTER: u16 = 0x0004;
#[allow(dead_code)]
pub(crate) const SEPARATOR: u16 = 0x0008;
pub(crate) const ACCENT_MARK: u16 = 0x0010;
pub(crate) const PUNCTUATION: u16 = 0x0020;
pub(crate) const SYMBOL: u16 = 0x0040;
#[allow(dead_code)]
pub(crate) const CONTROL: u16 = 0x0080;
pub(crate) const WHITESPACE_FLAG: u16 = 0x0100;

/// One past the largest codepoint that has flags.
pub(crate) const MAX_CODEPOINTS: u32 = 0x11_0000;

/// Flags of the Basic Multilingual Plane, indexed directly; the other planes use a binary search.
static BMP_FLAGS: Lazy<Box<[u16]>> = Lazy::new(|| {
    let mut t = vec![0u16; 0x1_0000].into_boxed_slice();
    for (i, &(start, flags)) in CATEGORY_RANGES.iter().enumerate() {
        if start >= 0x1_0000 {
            break;
        }
        let end = CATEGORY_RANGES.get(i + 1).map_or(0x1_0000, |r| r.0.min(0x1_0000));
        for f in &mut t[start as usize..end as usize] {
            *f = flags as u16;
        }
    }
    for &c in WHITESPACE.iter() {
        if c < 0x1_0000 {
            t[c as usize] |= WHITESPACE_FLAG;
        }
    }
    t
});

/// `unicode_cpt_flags_from_cpt` restricted to the category bits and the whitespace bit.
/// Codepoints beyond U+10FFFF are UNDEFINED, as upstream.
#[inline]
pub fn flags(cpt: u32) -> u16 {
    if cpt < 0x1_0000 {
        return BMP_FLAGS[cpt as usize];
    }
    if cpt >= MAX_CODEPOINTS {
        return UNDEFINED;
    }
    let i = CATEGORY_RANGES.partition_point(|r| r.0 <= cpt) - 1;
    let mut f = CATEGORY_RANGES[i].1 as u16;
    if WHITESPACE.binary_search(&cpt).is_ok() {
        f |= WHITESPACE_FLAG;
    }
    f
}

#[allow(dead_code)]
#[inline]
pub fn is_whitespace(cpt: u32) -> bool {
    flags(cpt) & WHITESPACE_FLAG != 0
}

/// `unicode_tolower`, exact whenever the result is ASCII (the only results the callers test).
#[inline]
pub fn to_lower_ascii(cpt: u32) -> u32 {
    match LOWER_TO_ASCII.binary_search_by_key(&cpt, |p| p.0) {
        Ok(i) => LOWER_TO_ASCII[i].1 as u32,
        Err(_) => cpt,
    }
}

/// `unicode_cpts_from_utf8`: decodes leniently. A byte that does not start a complete sequence
/// (stray continuation byte, truncated sequence, 0xF8..0xFF) becomes U+FFFD and decoding resumes
/// at the next byte. Overlong forms and surrogates decode to their (non-canonical) value, as
/// upstream does. Upstream would abort on values above U+10FFFF (when re-encoding them); those
/// become U+FFFD here (one per 4-byte sequence).
pub fn decode_utf8(bytes: &[u8], out: &mut Vec<u32>) {
    out.clear();
    out.reserve(bytes.len());
    let n = bytes.len();
    let cont = |i: usize| i < n && bytes[i] & 0xC0 == 0x80;
    let mut i = 0;
    while i < n {
        let b = bytes[i];
        if b & 0x80 == 0 {
            out.push(b as u32);
            i += 1;
        } else if b & 0x40 == 0 {
            out.push(0xFFFD);
            i += 1;
        } else if b & 0x20 == 0 {
            if i + 1 >= n || !cont(i + 1) {
                out.push(0xFFFD);
                i += 1;
            } else {
                out.push(((b as u32 & 0x1F) << 6) | (bytes[i + 1] as u32 & 0x3F));
                i += 2;
            }
        } else if b & 0x10 == 0 {
            if i + 2 >= n || !cont(i + 1) || !cont(i + 2) {
                out.push(0xFFFD);
                i += 1;
            } else {
                out.push(((b as u32 & 0x0F) << 12) | ((bytes[i + 1] as u32 & 0x3F) << 6) | (bytes[i + 2] as u32 & 0x3F));
                i += 3;
            }
        } else if b & 0x08 == 0 {
            if i + 3 >= n || !cont(i + 1) || !cont(i + 2) || !cont(i + 3) {
                out.push(0xFFFD);
                i += 1;
            } else {
                let c = ((b as u32 & 0x07) << 18)
                    | ((bytes[i + 1] as u32 & 0x3F) << 12)
                    | ((bytes[i + 2] as u32 & 0x3F) << 6)
                    | (bytes[i + 3] as u32 & 0x3F);
                out.push(if c < MAX_CODEPOINTS { c } else { 0xFFFD });
                i += 4;
            }
        } else {
            out.push(0xFFFD);
            i += 1;
        }
    }
}

/// `unicode_cpt_to_utf8` for codepoints ≤ U+10FFFF (surrogates are encoded like any value).
#[inline]
pub fn encode_utf8(cpt: u32, out: &mut Vec<u8>) {
    if cpt <= 0x7F {
        out.push(cpt as u8);
    } else if cpt <= 0x7FF {
        out.extend_from_slice(&[0xC0 | ((cpt >> 6) & 0x1F) as u8, 0x80 | (cpt & 0x3F) as u8]);
    } else if cpt <= 0xFFFF {
        out.extend_from_slice(&[
            0xE0 | ((cpt >> 12) & 0x0F) as u8,
            0x80 | ((cpt >> 6) & 0x3F) as u8,
            0x80 | (cpt & 0x3F) as u8,
        ]);
    } else {
        out.extend_from_slice(&[
            0xF0 | ((cpt >> 18) & 0x07) as u8,
            0x80 | ((cpt >> 12) & 0x3F) as u8,
            0x80 | ((cpt >> 6) & 0x3F) as u8,
            0x80 | (cpt & 0x3F) as u8,
        ]);
    }
}

/// GPT-2's byte → codepoint table (`unicode_byte_to_utf8_map`): printable Latin-1 bytes map to
/// themselves, the other 68 bytes to U+0100.. in byte order.
pub static BYTE_TO_CPT: Lazy<[u32; 256]> = Lazy::new(|| {
    let mut t = [0u32; 256];
    let mut n = 0;
    for b in 0..256u32 {
        let printable = (0x21..=0x7E).contains(&b) || (0xA1..=0xAC).contains(&b) || (0xAE..=0xFF).contains(&b);
        t[b as usize] = if printable {
            b
        } else {
            n += 1;
            255 + n
        };
    }
    t
});

/// [`BYTE_TO_CPT`] inverted: for each codepoint below 0x144, its byte + 1, or 0 (a constant
/// table: `cpt_to_byte` runs for every character of every token at load, where a search of
/// the 256 entries took a third of the vocabulary's load).
static CPT_TO_BYTE: Lazy<[u16; 0x144]> = Lazy::new(|| {
    let mut t = [0u16; 0x144];
    for (b, &c) in BYTE_TO_CPT.iter().enumerate() {
        t[c as usize] = b as u16 + 1;
    }
    t
});

/// Inverse of [`BYTE_TO_CPT`] (`unicode_utf8_to_byte`); None for codepoints outside its image.
#[inline]
pub fn cpt_to_byte(cpt: u32) -> Option<u8> {
    match CPT_TO_BYTE.get(cpt as usize) {
        Some(&b) if b > 0 => Some((b - 1) as u8),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table inverts BYTE_TO_CPT exactly: every byte back from its codepoint, and no other
    /// codepoint below 0x200 maps to a byte.
    #[test]
    fn cpt_to_byte_inverts_the_byte_table() {
        for b in 0..=255u8 {
            assert_eq!(cpt_to_byte(BYTE_TO_CPT[b as usize]), Some(b));
        }
        for c in 0..0x200u32 {
            let want = BYTE_TO_CPT.iter().position(|&x| x == c).map(|b| b as u8);
            assert_eq!(cpt_to_byte(c), want, "codepoint {c:#x}");
        }
    }

    #[test]
    fn decode_like_upstream() {
        let mut v = Vec::new();
        decode_utf8(b"a\xC3\xA9\xE4\xB8\x80\xF0\x9F\x98\x80", &mut v);
        assert_eq!(v, vec![0x61, 0xE9, 0x4E00, 0x1F600]);
        decode_utf8(b"\x80\xC3", &mut v);
        assert_eq!(v, vec![0xFFFD, 0xFFFD]);
        decode_utf8(b"\xE4\xB8a", &mut v);
        assert_eq!(v, vec![0xFFFD, 0xFFFD, 0x61]);
        decode_utf8(b"\xC0\x80", &mut v); // overlong NUL decodes to 0, as upstream
        assert_eq!(v, vec![0]);
        decode_utf8(b"\xFF", &mut v);
        assert_eq!(v, vec![0xFFFD]);
    }

    #[test]
    fn flags_basic() {
        assert_eq!(flags('a' as u32) & LETTER, LETTER);
        assert_eq!(flags('7' as u32) & NUMBER, NUMBER);
        assert!(is_whitespace(' ' as u32) && is_whitespace(0x3000) && is_whitespace(0x85));
        assert!(!is_whitespace(0x1C));
        assert_eq!(flags(0x4E00) & LETTER, LETTER);
        assert_eq!(flags(0x1F600) & SYMBOL, SYMBOL);
        assert_eq!(flags(0x110000), UNDEFINED);
        assert_eq!(flags(0x0301) & ACCENT_MARK, ACCENT_MARK);
    }

    #[test]
    fn byte_map() {
        assert_eq!(BYTE_TO_CPT[b' ' as usize], 0x120); // 'Ġ'
        assert_eq!(BYTE_TO_CPT[b'\n' as usize], 0x10A); // 'Ċ'
        assert_eq!(BYTE_TO_CPT[b'a' as usize], 'a' as u32);
        for b in 0..256 {
            assert_eq!(cpt_to_byte(BYTE_TO_CPT[b]), Some(b as u8));
        }
    }
}
