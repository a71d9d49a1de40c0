//! Pushdown stacks over a grammar, as upstream's: a stack is the list of positions still to
//! match (top last), every stack in a set is advanced until its top is a terminal (a character
//! class or a token) or it is empty (the grammar may end there). A set is kept sorted and without
//! duplicates, so equal states compare equal (the matcher caches transitions between sets).
//! Also the UTF-8 decoder of pieces with upstream's lenient rules (partial sequences carried
//! from one token to the next).

use std::collections::HashSet;

use super::{Elem, Grammar, Ty};

/// Bounds on what a grammar state may grow to.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Distinct stacks in one state.
    pub max_stacks: usize,
    /// Positions on one stack.
    pub max_depth: usize,
    /// Stacks examined while advancing one stack (ambiguous grammars).
    pub max_advance: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { max_stacks: 4096, max_depth: 4096, max_advance: 100_000 }
    }
}

pub type Stack = Vec<u32>;

/// A set of stacks in canonical form (sorted, distinct).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct StackSet(pub Vec<Stack>);

impl StackSet {
    pub fn from_unsorted(mut v: Vec<Stack>) -> StackSet {
        v.sort_unstable();
        v.dedup();
        StackSet(v)
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    /// Whether some stack is empty: the grammar may end here (end-of-generation is allowed).
    pub fn can_end(&self) -> bool {
        self.0.iter().any(|s| s.is_empty())
    }
}

pub use crate::tokenizer::piece_trie::{Partial, Step, Utf8};

/// Decodes a whole piece after `p` (up to its first NUL, as upstream's C string): the complete
/// code points and the partial state at its end; an invalid piece gives no code points and
/// `n_remain = -1`, as upstream.
pub fn decode(piece: &[u8], p: Partial, out: &mut Vec<u32>) -> Partial {
    out.clear();
    let mut st = Utf8::start(p);
    for &b in piece {
        if b == 0 {
            break;
        }
        match st.step(b) {
            Step::Invalid => {
                out.clear();
                return Partial { value: 0, n_remain: -1 };
            }
            Step::More(s) => st = s,
            Step::Complete(cp, s) => {
                out.push(cp);
                st = s;
            }
        }
    }
    st.partial()
}

impl Grammar {
    #[inline]
    pub fn elem(&self, pos: u32) -> Elem {
        self.elems[pos as usize]
    }

    /// upstream's llama_grammar_match_char: whether `chr` satisfies the class at `pos`, and the
    /// position after the class.
    #[inline]
    pub fn match_char(&self, mut pos: u32, chr: u32) -> (bool, u32) {
        let first = self.elem(pos);
        let positive = matches!(first.ty, Ty::Char | Ty::CharAny);
        let mut found = false;
        loop {
            let e = self.elem(pos);
            let next = self.elem(pos + 1);
            if next.ty == Ty::CharRngUpper {
                found = found || (e.value <= chr && chr <= next.value);
                pos += 2;
            } else if e.ty == Ty::CharAny {
                found = true;
                pos += 1;
            } else {
                found = found || e.value == chr;
                pos += 1;
            }
            if self.elem(pos).ty != Ty::CharAlt {
                break;
            }
        }
        (found == positive, pos)
    }

    /// upstream's llama_grammar_match_partial_char: whether some completion of `p` could satisfy
    /// the class at `pos`.
    pub fn match_partial(&self, mut pos: u32, p: Partial) -> bool {
        let first = self.elem(pos);
        let positive = matches!(first.ty, Ty::Char | Ty::CharAny);
        let n = p.n_remain;
        if n < 0 || (n == 1 && p.value < 2) {
            return false;
        }
        let mut low = p.value << (n * 6);
        let high = low | ((1u32 << (n * 6)) - 1);
        if low == 0 {
            if n == 2 {
                low = 1 << 11;
            } else if n == 3 {
                low = 1 << 16;
            }
        }
        loop {
            let e = self.elem(pos);
            let next = self.elem(pos + 1);
            if next.ty == Ty::CharRngUpper {
                if e.value <= high && low <= next.value {
                    return positive;
                }
                pos += 2;
            } else if e.ty == Ty::CharAny {
                return true;
            } else {
                if low <= e.value && e.value <= high {
                    return positive;
                }
                pos += 1;
            }
            if self.elem(pos).ty != Ty::CharAlt {
                break;
            }
        }
        !positive
    }

    /// upstream's llama_grammar_advance_stack: every stack `stack` can become whose top is a
    /// terminal, or empty; appended to `out` (duplicates are removed by the caller).
    pub fn advance(&self, stack: Stack, out: &mut Vec<Stack>) -> Result<(), String> {
        let mut todo = vec![stack];
        let mut seen: HashSet<Stack> = HashSet::new();
        let mut steps = 0usize;
        while let Some(cur) = todo.pop() {
            steps += 1;
            if steps > self.limits.max_advance {
                return Err(format!("the grammar is too ambiguous: advancing one stack visited more than {} states", self.limits.max_advance));
            }
            if cur.len() > self.limits.max_depth {
                return Err(format!("the grammar's stack grew deeper than {} elements", self.limits.max_depth));
            }
            if seen.contains(&cur) {
                continue;
            }
            let Some(&top) = cur.last() else {
                out.push(cur.clone());
                seen.insert(cur);
                continue;
            };
            let e = self.elem(top);
            match e.ty {
                Ty::RuleRef => {
                    let mut sub = self.rule_start[e.value as usize];
                    loop {
                        let mut next = cur[..cur.len() - 1].to_vec();
                        if !self.elem(top + 1).is_end_of_sequence() {
                            next.push(top + 1);
                        }
                        if !self.elem(sub).is_end_of_sequence() {
                            next.push(sub);
                        }
                        todo.push(next);
                        while !self.elem(sub).is_end_of_sequence() {
                            sub += 1;
                        }
                        if self.elem(sub).ty == Ty::Alt {
                            sub += 1;
                        } else {
                            break;
                        }
                    }
                }
                Ty::Char | Ty::CharNot | Ty::CharAny | Ty::Token | Ty::TokenNot => out.push(cur.clone()),
                _ => return Err(format!("internal grammar state: a stack's top is a {:?} element", e.ty)),
            }
            seen.insert(cur);
        }
        Ok(())
    }

    fn check_size(&self, v: &[Stack]) -> Result<(), String> {
        if v.len() > self.limits.max_stacks {
            return Err(format!("the grammar is too ambiguous: more than {} parses are alive at once", self.limits.max_stacks));
        }
        Ok(())
    }

    /// The initial stacks: each alternative of the root rule, advanced.
    pub fn initial_stacks(&self, root: u32) -> Result<StackSet, String> {
        let mut out = Vec::new();
        let mut pos = self.rule_start[root as usize];
        loop {
            let mut stack = Vec::new();
            if !self.elem(pos).is_end_of_sequence() {
                stack.push(pos);
            }
            self.advance(stack, &mut out)?;
            while !self.elem(pos).is_end_of_sequence() {
                pos += 1;
            }
            if self.elem(pos).ty == Ty::Alt {
                pos += 1;
            } else {
                break;
            }
        }
        let set = StackSet::from_unsorted(out);
        self.check_size(&set.0)?;
        Ok(set)
    }

    /// upstream's llama_grammar_accept for one code point over every stack (token tops and
    /// empty stacks drop out).
    pub fn accept_char(&self, set: &StackSet, chr: u32) -> Result<StackSet, String> {
        let mut out = Vec::new();
        for s in &set.0 {
            let Some(&top) = s.last() else { continue };
            if self.elem(top).is_token() {
                continue;
            }
            let (ok, after) = self.match_char(top, chr);
            if ok {
                let mut next = s[..s.len() - 1].to_vec();
                if !self.elem(after).is_end_of_sequence() {
                    next.push(after);
                }
                self.advance(next, &mut out)?;
                self.check_size(&out)?;
            }
        }
        Ok(StackSet::from_unsorted(out))
    }

    /// upstream's llama_grammar_accept_token on the stacks: token tops advance when they match
    /// `token`, the other stacks take `cps` one by one.
    pub fn accept_token(&self, set: &StackSet, token: i32, cps: &[u32]) -> Result<StackSet, String> {
        let mut out = Vec::new();
        let mut chars = Vec::new();
        for s in &set.0 {
            let Some(&top) = s.last() else { continue };
            let e = self.elem(top);
            if e.is_token() {
                if match_token(e, token) {
                    let mut next = s[..s.len() - 1].to_vec();
                    if !self.elem(top + 1).is_end_of_sequence() {
                        next.push(top + 1);
                    }
                    self.advance(next, &mut out)?;
                }
            } else {
                chars.push(s.clone());
            }
        }
        let mut cur = StackSet(chars);
        for &c in cps {
            if cur.is_empty() {
                break;
            }
            cur = self.accept_char(&cur, c)?;
        }
        out.extend(cur.0);
        self.check_size(&out)?;
        Ok(StackSet::from_unsorted(out))
    }
}

#[inline]
pub fn match_token(e: Elem, token: i32) -> bool {
    match e.ty {
        Ty::Token => e.value == token as u32,
        Ty::TokenNot => e.value != token as u32,
        _ => false,
    }
}
