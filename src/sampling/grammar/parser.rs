//! The GBNF parser: grammar text → flat rules, with the dialect, the rewrites of repetitions
//! into generated rules, the symbol numbering and the accept/reject decisions of upstream
//! b11312's `llama_grammar_parser`. Works on bytes (a grammar from C need not be UTF-8) and
//! stops at the first NUL, as the C string it stands for would. Errors carry the byte offset
//! they refer to; `ParseError::describe` turns it into a line and column.
//!
//! Bounds beyond upstream's (which would exhaust the stack or loop): groups nest at most
//! `MAX_NESTING` deep, `{m,n}` with n < m is an error.

use std::collections::BTreeMap;

use super::{Elem, Ty};
use crate::tokenizer::Vocab;

/// Upstream's MAX_REPETITION_THRESHOLD.
const MAX_REPETITION: u64 = 2000;
/// Deepest nesting of parenthesised groups.
pub(crate) const MAX_NESTING: usize = 512;

#[derive(Debug, Clone, PartialEq)]
pub struct ParseError {
    pub msg: String,
    /// Byte offset into the grammar text the message refers to.
    pub offset: usize,
}

impl ParseError {
    /// "msg at line L, column C" (1-based; the column counts bytes), with the text that follows.
    pub fn describe(&self, src: &[u8]) -> String {
        let off = self.offset.min(src.len());
        let before = &src[..off];
        let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
        let col = off - before.iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1) + 1;
        let rest: String = String::from_utf8_lossy(&src[off..]).chars().take(40).collect();
        format!("{} at line {line}, column {col}: '{}'", self.msg, rest.escape_debug())
    }
}

/// A parsed grammar: rules by id (each ends with `End`; alternatives separated by `Alt`) and the
/// symbol table (names, generated ones included, → rule id).
pub struct Parsed {
    pub rules: Vec<Vec<Elem>>,
    pub symbol_ids: BTreeMap<Vec<u8>, u32>,
}

struct Parser<'a> {
    src: &'a [u8],
    vocab: Option<&'a Vocab>,
    symbol_ids: BTreeMap<Vec<u8>, u32>,
    rules: Vec<Vec<Elem>>,
    depth: usize,
    /// Where each symbol was first referenced (for the undefined-rule errors).
    first_ref: std::collections::HashMap<u32, usize>,
}

type R<T> = Result<T, ParseError>;

fn err<T>(msg: impl Into<String>, offset: usize) -> R<T> {
    Err(ParseError { msg: msg.into(), offset })
}

fn is_digit(c: u8) -> bool {
    c.is_ascii_digit()
}

fn is_word_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'-'
}

impl<'a> Parser<'a> {
    fn at(&self, i: usize) -> u8 {
        self.src.get(i).copied().unwrap_or(0)
    }

    fn symbol_id(&mut self, name: &[u8]) -> u32 {
        let next = self.symbol_ids.len() as u32;
        *self.symbol_ids.entry(name.to_vec()).or_insert(next)
    }

    fn generate_symbol_id(&mut self, base: &[u8]) -> u32 {
        let next = self.symbol_ids.len() as u32;
        let mut name = base.to_vec();
        name.extend_from_slice(format!("_{next}").as_bytes());
        self.symbol_ids.insert(name, next);
        next
    }

    fn add_rule(&mut self, id: u32, rule: Vec<Elem>) {
        let id = id as usize;
        if self.rules.len() <= id {
            self.rules.resize(id + 1, Vec::new());
        }
        self.rules[id] = rule;
    }

    fn space(&self, mut pos: usize, newline_ok: bool) -> usize {
        loop {
            match self.at(pos) {
                b' ' | b'\t' => pos += 1,
                b'\r' | b'\n' if newline_ok => pos += 1,
                b'#' => {
                    while !matches!(self.at(pos), 0 | b'\r' | b'\n') {
                        pos += 1;
                    }
                }
                _ => return pos,
            }
        }
    }

    fn name_end(&self, pos: usize) -> R<usize> {
        let mut p = pos;
        while is_word_char(self.at(p)) {
            p += 1;
        }
        if p == pos {
            return err("expecting name", pos);
        }
        Ok(p)
    }

    fn int_end(&self, pos: usize) -> R<usize> {
        let mut p = pos;
        while is_digit(self.at(p)) {
            p += 1;
        }
        if p == pos {
            return err("expecting integer", pos);
        }
        Ok(p)
    }

    /// The digits at [pos, end) as an integer (std::stoull: out of range is an error).
    fn int_value(&self, pos: usize, end: usize) -> R<u64> {
        let mut v: u64 = 0;
        for &d in &self.src[pos..end] {
            v = v.checked_mul(10).and_then(|v| v.checked_add((d - b'0') as u64)).ok_or(ParseError { msg: "integer out of range".into(), offset: pos })?;
        }
        Ok(v)
    }

    fn hex(&self, pos: usize, size: usize) -> R<(u32, usize)> {
        let mut value: u32 = 0;
        let mut p = pos;
        while p < pos + size && self.at(p) != 0 {
            let c = self.at(p);
            let d = match c {
                b'a'..=b'f' => c - b'a' + 10,
                b'A'..=b'F' => c - b'A' + 10,
                b'0'..=b'9' => c - b'0',
                _ => break,
            };
            value = (value << 4).wrapping_add(d as u32);
            p += 1;
        }
        if p != pos + size {
            return err(format!("expecting {size} hex chars"), pos);
        }
        Ok((value, p))
    }

    /// One UTF-8 sequence as upstream's lenient decoder reads it (no validation; stops at NUL).
    fn utf8(&self, pos: usize) -> (u32, usize) {
        const LOOKUP: [usize; 16] = [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4];
        let first = self.at(pos);
        let len = LOOKUP[(first >> 4) as usize];
        let mask = (1u32 << (8 - len)) - 1;
        let mut value = first as u32 & mask;
        let mut p = pos + 1;
        while p < pos + len && self.at(p) != 0 {
            value = (value << 6) + (self.at(p) as u32 & 0x3F);
            p += 1;
        }
        (value, p)
    }

    fn char(&self, pos: usize) -> R<(u32, usize)> {
        if self.at(pos) == b'\\' {
            return match self.at(pos + 1) {
                b'x' => self.hex(pos + 2, 2),
                b'u' => self.hex(pos + 2, 4),
                b'U' => self.hex(pos + 2, 8),
                b't' => Ok((b'\t' as u32, pos + 2)),
                b'r' => Ok((b'\r' as u32, pos + 2)),
                b'n' => Ok((b'\n' as u32, pos + 2)),
                c @ (b'\\' | b'"' | b'[' | b']' | b'-') => Ok((c as u32, pos + 2)),
                _ => err("unknown escape", pos),
            };
        }
        if self.at(pos) != 0 {
            return Ok(self.utf8(pos));
        }
        err("unexpected end of input", pos)
    }

    /// `<[id]>` or `<text>` (one token of the vocabulary) at pos.
    fn token(&self, pos: usize) -> R<(u32, usize)> {
        let start = pos;
        if self.at(pos) != b'<' {
            return err("expecting '<'", pos);
        }
        let mut p = pos + 1;
        if self.at(p) == b'[' {
            p += 1;
            let end = self.int_end(p)?;
            let id = self.int_value(p, end)?;
            if id > u32::MAX as u64 {
                return err("parsed token id is too big", p);
            }
            p = end;
            if self.at(p) != b']' {
                return err("expecting ']'", p);
            }
            p += 1;
            if self.at(p) != b'>' {
                return err("expecting '>'", p);
            }
            return Ok((id as u32, p + 1));
        }
        let Some(vocab) = self.vocab else {
            return err("no vocab to parse token", start);
        };
        while self.at(p) != 0 && self.at(p) != b'>' {
            p += 1;
        }
        if self.at(p) != b'>' {
            return err("expecting '>'", p);
        }
        p += 1;
        let mut toks = Vec::new();
        vocab.tokenize(&self.src[start..p], false, true, &mut toks);
        if toks.len() != 1 {
            return err(format!("invalid token '{}'", String::from_utf8_lossy(&self.src[start..p])), start);
        }
        Ok((toks[0] as u32, p))
    }

    fn alternates(&mut self, pos: usize, rule_name: &[u8], rule_id: u32, nested: bool) -> R<usize> {
        let mut rule = Vec::new();
        let mut pos = self.sequence(pos, rule_name, &mut rule, nested)?;
        while self.at(pos) == b'|' {
            rule.push(Elem::new(Ty::Alt, 0));
            pos = self.space(pos + 1, true);
            pos = self.sequence(pos, rule_name, &mut rule, nested)?;
        }
        rule.push(Elem::new(Ty::End, 0));
        self.add_rule(rule_id, rule);
        Ok(pos)
    }

    /// S{min,max} (max = None: unbounded) applied to rule[last_sym_start..], as upstream rewrites it.
    fn repeat(&mut self, rule: &mut Vec<Elem>, last_sym_start: usize, n_prev_rules: &mut u64, min: u64, max: Option<u64>, rule_name: &[u8], pos: usize) -> R<()> {
        if last_sym_start == rule.len() {
            return err("expecting preceding item to */+/?/{", pos);
        }
        if let Some(max) = max {
            if max < min {
                return err(format!("repetition {{{min},{max}}} has a maximum below its minimum"), pos);
            }
        }
        let prev: Vec<Elem> = rule[last_sym_start..].to_vec();
        let total = match max {
            Some(m) if m > 0 => m,
            _ if min > 0 => min,
            _ => 1,
        };
        if n_prev_rules.saturating_mul(total) > MAX_REPETITION {
            return err("number of rules that are going to be repeated multiplied by the new repetition exceeds sane defaults, please reduce the number of repetitions or rule complexity", pos);
        }
        if min == 0 {
            rule.truncate(last_sym_start);
        } else {
            for _ in 1..min {
                rule.extend_from_slice(&prev);
            }
        }
        let n_opt = match max {
            None => 1,
            Some(m) => m - min,
        };
        let mut last_rec = 0u32;
        for i in 0..n_opt {
            let mut rec = prev.clone();
            let id = self.generate_symbol_id(rule_name);
            if i > 0 || max.is_none() {
                rec.push(Elem::new(Ty::RuleRef, if max.is_none() { id } else { last_rec }));
            }
            rec.push(Elem::new(Ty::Alt, 0));
            rec.push(Elem::new(Ty::End, 0));
            self.add_rule(id, rec);
            last_rec = id;
        }
        if n_opt > 0 {
            rule.push(Elem::new(Ty::RuleRef, last_rec));
        }
        *n_prev_rules = n_prev_rules.saturating_mul(total);
        Ok(())
    }

    fn sequence(&mut self, src: usize, rule_name: &[u8], rule: &mut Vec<Elem>, nested: bool) -> R<usize> {
        let mut last_sym_start = rule.len();
        let mut pos = src;
        let mut n_prev_rules: u64 = 1;
        loop {
            let c = self.at(pos);
            match c {
                0 => break,
                b'"' => {
                    pos += 1;
                    last_sym_start = rule.len();
                    n_prev_rules = 1;
                    while self.at(pos) != b'"' {
                        if self.at(pos) == 0 {
                            return err("unexpected end of input", pos);
                        }
                        let (ch, p) = self.char(pos)?;
                        pos = p;
                        rule.push(Elem::new(Ty::Char, ch));
                    }
                    pos = self.space(pos + 1, nested);
                }
                b'[' => {
                    pos += 1;
                    let mut start_ty = Ty::Char;
                    if self.at(pos) == b'^' {
                        pos += 1;
                        start_ty = Ty::CharNot;
                    }
                    last_sym_start = rule.len();
                    n_prev_rules = 1;
                    while self.at(pos) != b']' {
                        if self.at(pos) == 0 {
                            return err("unexpected end of input", pos);
                        }
                        let (ch, p) = self.char(pos)?;
                        pos = p;
                        let ty = if last_sym_start < rule.len() { Ty::CharAlt } else { start_ty };
                        rule.push(Elem::new(ty, ch));
                        if self.at(pos) == b'-' && self.at(pos + 1) != b']' {
                            if self.at(pos + 1) == 0 {
                                return err("unexpected end of input", pos + 1);
                            }
                            let (end, p) = self.char(pos + 1)?;
                            pos = p;
                            rule.push(Elem::new(Ty::CharRngUpper, end));
                        }
                    }
                    pos = self.space(pos + 1, nested);
                }
                b'<' | b'!' => {
                    let mut ty = Ty::Token;
                    if c == b'!' {
                        ty = Ty::TokenNot;
                        pos += 1;
                    }
                    let (id, end) = self.token(pos)?;
                    last_sym_start = rule.len();
                    n_prev_rules = 1;
                    rule.push(Elem::new(ty, id));
                    pos = self.space(end, nested);
                }
                c if is_word_char(c) => {
                    let end = self.name_end(pos)?;
                    let id = self.symbol_id(&self.src[pos..end].to_vec());
                    self.first_ref.entry(id).or_insert(pos);
                    pos = self.space(end, nested);
                    last_sym_start = rule.len();
                    n_prev_rules = 1;
                    rule.push(Elem::new(Ty::RuleRef, id));
                }
                b'(' => {
                    if self.depth >= MAX_NESTING {
                        return err(format!("groups nested more than {MAX_NESTING} deep"), pos);
                    }
                    pos = self.space(pos + 1, true);
                    let n_before = self.symbol_ids.len() as u64;
                    let sub = self.generate_symbol_id(rule_name);
                    self.depth += 1;
                    pos = self.alternates(pos, rule_name, sub, true)?;
                    self.depth -= 1;
                    // upstream computes this in uint32_t arithmetic
                    n_prev_rules = ((self.symbol_ids.len() as u32).wrapping_sub(n_before as u32)).max(1) as u64;
                    last_sym_start = rule.len();
                    rule.push(Elem::new(Ty::RuleRef, sub));
                    if self.at(pos) != b')' {
                        return err("expecting ')'", pos);
                    }
                    pos = self.space(pos + 1, nested);
                }
                b'.' => {
                    last_sym_start = rule.len();
                    n_prev_rules = 1;
                    rule.push(Elem::new(Ty::CharAny, 0));
                    pos = self.space(pos + 1, nested);
                }
                b'*' | b'+' | b'?' => {
                    let at = pos;
                    pos = self.space(pos + 1, nested);
                    let (min, max) = match c {
                        b'*' => (0, None),
                        b'+' => (1, None),
                        _ => (0, Some(1)),
                    };
                    self.repeat(rule, last_sym_start, &mut n_prev_rules, min, max, rule_name, at)?;
                }
                b'{' => {
                    let at = pos;
                    pos = self.space(pos + 1, nested);
                    if !is_digit(self.at(pos)) {
                        return err("expecting an int", pos);
                    }
                    let end = self.int_end(pos)?;
                    let min = self.int_value(pos, end)?;
                    pos = self.space(end, nested);
                    let mut max = None;
                    if self.at(pos) == b'}' {
                        max = Some(min);
                        pos = self.space(pos + 1, nested);
                    } else if self.at(pos) == b',' {
                        pos = self.space(pos + 1, nested);
                        if is_digit(self.at(pos)) {
                            let end = self.int_end(pos)?;
                            max = Some(self.int_value(pos, end)?);
                            pos = self.space(end, nested);
                        }
                        if self.at(pos) != b'}' {
                            return err("expecting '}'", pos);
                        }
                        pos = self.space(pos + 1, nested);
                    } else {
                        return err("expecting ','", pos);
                    }
                    if min > MAX_REPETITION {
                        return err("number of repetitions exceeds sane defaults, please reduce the number of repetitions", at);
                    }
                    if max.is_some_and(|m| m > MAX_REPETITION) {
                        max = None;
                    }
                    self.repeat(rule, last_sym_start, &mut n_prev_rules, min, max, rule_name, at)?;
                }
                _ => break,
            }
        }
        Ok(pos)
    }

    fn rule(&mut self, src: usize) -> R<usize> {
        let name_end = self.name_end(src)?;
        let mut pos = self.space(name_end, false);
        let name = self.src[src..name_end].to_vec();
        let id = self.symbol_id(&name);
        if !(self.at(pos) == b':' && self.at(pos + 1) == b':' && self.at(pos + 2) == b'=') {
            return err("expecting ::=", pos);
        }
        pos = self.space(pos + 3, true);
        pos = self.alternates(pos, &name, id, false)?;
        match self.at(pos) {
            b'\r' => pos += if self.at(pos + 1) == b'\n' { 2 } else { 1 },
            b'\n' => pos += 1,
            0 => {}
            _ => return err("expecting newline or end", pos),
        }
        Ok(self.space(pos, true))
    }

    fn parse(&mut self) -> R<()> {
        let mut pos = self.space(0, true);
        while self.at(pos) != 0 {
            pos = self.rule(pos)?;
        }
        let end = self.src.len();
        let name_of = |id: u32| self.symbol_ids.iter().find(|(_, &v)| v == id).map(|(n, _)| String::from_utf8_lossy(n).into_owned());
        let at = |id: u32| self.first_ref.get(&id).copied().unwrap_or(end);
        for (i, rule) in self.rules.iter().enumerate() {
            if rule.is_empty() {
                return err(format!("Undefined rule ('{}' is used but not defined)", name_of(i as u32).unwrap_or_default()), at(i as u32));
            }
            for e in rule {
                if e.ty == Ty::RuleRef && (e.value as usize >= self.rules.len() || self.rules[e.value as usize].is_empty()) {
                    if let Some(name) = name_of(e.value) {
                        return err(format!("Undefined rule identifier '{name}'"), at(e.value));
                    }
                }
            }
        }
        Ok(())
    }
}

/// Parses GBNF text (up to its first NUL). `vocab` resolves `<token>` references.
pub fn parse(src: &[u8], vocab: Option<&Vocab>) -> Result<Parsed, ParseError> {
    let src = &src[..src.iter().position(|&b| b == 0).unwrap_or(src.len())];
    let mut p = Parser { src, vocab, symbol_ids: BTreeMap::new(), rules: Vec::new(), depth: 0, first_ref: Default::default() };
    p.parse()?;
    Ok(Parsed { rules: p.rules, symbol_ids: p.symbol_ids })
}
