//! Grammar-constrained sampling (GBNF), with the semantics of upstream b11312's
//! `llama-grammar.cpp`: the parser (`parser`), the pushdown stacks and their advance over code
//! points (`stacks`), the filter that walks the vocabulary's token-piece trie under the current
//! stacks (`matcher`), the lazy-trigger regular expressions (`regex`) and the sampler itself
//! (`sampler`).
//!
//! Ownership: a `Grammar` (the rules, immutable) is shared by a sampler and its clones through an
//! `Arc`; each sampler owns its stacks, its transition cache and its trigger buffer. The
//! token-piece trie belongs to the vocabulary (`Vocab::grammar_trie`, built once on first use and
//! freed with the model). Nothing here is global. Every structure that grows with the input is
//! bounded (`stacks::Limits`): exceeding a bound is an error, never an OOM.

pub mod matcher;
pub mod parser;
pub mod regex;
pub mod sampler;
pub mod stacks;

/// The kind of a grammar element (upstream's `llama_gretype`, same numbering).
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ty {
    End = 0,
    Alt = 1,
    RuleRef = 2,
    Char = 3,
    CharNot = 4,
    CharRngUpper = 5,
    CharAlt = 6,
    CharAny = 7,
    Token = 8,
    TokenNot = 9,
}

/// One grammar element: a kind and its value (code point, rule id or token id).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Elem {
    pub ty: Ty,
    pub value: u32,
}

impl Elem {
    pub const fn new(ty: Ty, value: u32) -> Elem {
        Elem { ty, value }
    }
    pub fn is_end_of_sequence(self) -> bool {
        matches!(self.ty, Ty::End | Ty::Alt)
    }
    pub fn is_token(self) -> bool {
        matches!(self.ty, Ty::Token | Ty::TokenNot)
    }
}

/// A parsed, checked grammar: every rule's elements back to back in one array (a stack holds
/// positions into it), the start of each rule, and the initial stacks of the root rule.
pub struct Grammar {
    pub elems: Vec<Elem>,
    pub rule_start: Vec<u32>,
    pub initial: stacks::StackSet,
    pub limits: stacks::Limits,
}

/// Why a grammar was refused.
#[derive(Debug)]
pub struct GrammarError(pub String);

impl Grammar {
    /// Parses `src` (GBNF) with `root` as the start rule, as upstream's `llama_grammar_init_impl`:
    /// parse errors (with line and column), a missing root, left recursion.
    pub fn new(src: &[u8], root: &[u8], vocab: Option<&crate::tokenizer::Vocab>, limits: stacks::Limits) -> Result<Grammar, GrammarError> {
        let parsed = parser::parse(src, vocab).map_err(|e| GrammarError(format!("error parsing grammar: {}", e.describe(src))))?;
        if parsed.rules.is_empty() {
            return Err(GrammarError("failed to parse grammar: it has no rules".into()));
        }
        let Some(&root_id) = parsed.symbol_ids.get(root) else {
            return Err(GrammarError(format!("grammar does not contain a '{}' symbol", String::from_utf8_lossy(root))));
        };
        let rules = parsed.rules;
        if let Some(i) = left_recursion(&rules)? {
            let name = parsed.symbol_ids.iter().find(|(_, &v)| v as usize == i).map(|(n, _)| String::from_utf8_lossy(n).into_owned()).unwrap_or_default();
            return Err(GrammarError(format!("unsupported grammar, left recursion detected for nonterminal at index {i} ('{name}')")));
        }
        let mut elems = Vec::new();
        let mut rule_start = Vec::with_capacity(rules.len());
        for r in &rules {
            rule_start.push(elems.len() as u32);
            elems.extend_from_slice(r);
        }
        let mut g = Grammar { elems, rule_start, initial: stacks::StackSet::default(), limits };
        g.initial = g.initial_stacks(root_id).map_err(GrammarError)?;
        Ok(g)
    }
}

/// Upstream's `llama_grammar_detect_left_recursion` over every rule: the index of the first rule
/// found left-recursive. Iterative (a deep chain of rules cannot overflow the stack).
fn left_recursion(rules: &[Vec<Elem>]) -> Result<Option<usize>, GrammarError> {
    let n = rules.len();
    let mut visited = vec![false; n];
    let mut in_progress = vec![false; n];
    let mut may_be_empty = vec![false; n];
    // frame: (rule, next element index, recurse_into_nonterminal)
    for start in 0..n {
        if visited[start] {
            continue;
        }
        let mut frames: Vec<(usize, usize, bool)> = Vec::new();
        let enter = |r: usize, in_progress: &mut Vec<bool>, may_be_empty: &mut Vec<bool>, frames: &mut Vec<(usize, usize, bool)>| -> bool {
            if in_progress[r] {
                return true;
            }
            in_progress[r] = true;
            let rule = &rules[r];
            let mut at_start = true;
            for e in rule {
                if e.is_end_of_sequence() {
                    if at_start {
                        may_be_empty[r] = true;
                        break;
                    }
                    at_start = true;
                } else {
                    at_start = false;
                }
            }
            frames.push((r, 0, true));
            false
        };
        if enter(start, &mut in_progress, &mut may_be_empty, &mut frames) {
            return Ok(Some(start));
        }
        // Each frame resumes its scan; a child's result is applied when the child returns.
        let mut returned: Option<usize> = None;
        while let Some(&mut (r, ref mut i, ref mut recurse)) = frames.last_mut() {
            if let Some(child) = returned.take() {
                if !may_be_empty[child] {
                    *recurse = false;
                }
                *i += 1;
            }
            let rule = &rules[r];
            let mut descend = None;
            while *i < rule.len() {
                let e = rule[*i];
                if e.ty == Ty::RuleRef && *recurse {
                    descend = Some(e.value as usize);
                    break;
                } else if e.is_end_of_sequence() {
                    *recurse = true;
                } else {
                    *recurse = false;
                }
                *i += 1;
            }
            match descend {
                Some(c) => {
                    if c >= n {
                        return Err(GrammarError(format!("invalid grammar: rule {r} references undefined rule {c}")));
                    }
                    if visited[c] {
                        // finished before without finding recursion; its may_be_empty is known
                        returned = Some(c);
                        continue;
                    }
                    if enter(c, &mut in_progress, &mut may_be_empty, &mut frames) {
                        return Ok(Some(start));
                    }
                }
                None => {
                    frames.pop();
                    in_progress[r] = false;
                    visited[r] = true;
                    returned = Some(r);
                }
            }
        }
    }
    Ok(None)
}
