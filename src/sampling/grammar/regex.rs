//! The trigger patterns of lazy grammars: a small regular-expression engine over bytes with the
//! ECMAScript syntax and leftmost-first semantics that upstream's `std::regex` gives them, for
//! what llama.cpp's chat formats generate (escaped literals, `[\s\S]*?`, classes, groups,
//! `(?:…)`, `(?=…)`/`(?!…)`, alternation, greedy and lazy quantifiers, `^`, `$`, `\b`).
//! Anything else (back-references, look-behind, named groups, `\p{…}`) is refused with a reason
//! rather than misread. Matching is a Pike VM: time O(pattern × input), no backtracking blow-up.

/// Largest compiled program (counted repetitions are expanded).
const MAX_PROGRAM: usize = 20_000;

#[derive(Clone, Debug)]
enum Inst {
    Byte(u8),
    Class(Box<[u64; 4]>),
    Split(usize, usize),
    Jmp(usize),
    Save(usize),
    Start,
    End,
    WordBoundary(bool),
    Look { negate: bool, prog: usize },
    Match,
}

#[derive(Clone, Debug)]
enum Node {
    Empty,
    Byte(u8),
    Class([u64; 4]),
    Cat(Vec<Node>),
    Alt(Vec<Node>),
    Group(Option<usize>, Box<Node>),
    Look(bool, Box<Node>),
    Repeat { node: Box<Node>, min: u32, max: Option<u32>, greedy: bool },
    Start,
    End,
    WordBoundary(bool),
}

/// A compiled pattern (the text kept for `reset`).
#[derive(Clone, Debug)]
pub struct Regex {
    pub pattern: String,
    progs: Vec<Vec<Inst>>,
    n_groups: usize,
}

fn set(c: &mut [u64; 4], b: u8) {
    c[b as usize / 64] |= 1 << (b as usize % 64);
}
fn has(c: &[u64; 4], b: u8) -> bool {
    c[b as usize / 64] >> (b as usize % 64) & 1 == 1
}
fn class_of(f: impl Fn(u8) -> bool) -> [u64; 4] {
    let mut c = [0u64; 4];
    for b in 0..=255u8 {
        if f(b) {
            set(&mut c, b);
        }
    }
    c
}
fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}
fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0B | 0x0C | b'\r')
}

struct P<'a> {
    s: &'a [u8],
    i: usize,
    n_groups: usize,
    depth: usize,
}

impl P<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }
    fn err<T>(&self, what: &str) -> Result<T, String> {
        Err(format!("{what} at offset {} of trigger pattern '{}'", self.i, String::from_utf8_lossy(self.s)))
    }

    fn alt(&mut self) -> Result<Node, String> {
        self.depth += 1;
        if self.depth > 200 {
            return self.err("groups nested too deep");
        }
        let mut alts = vec![self.seq()?];
        while self.peek() == Some(b'|') {
            self.i += 1;
            alts.push(self.seq()?);
        }
        self.depth -= 1;
        Ok(if alts.len() == 1 { alts.pop().unwrap() } else { Node::Alt(alts) })
    }

    fn seq(&mut self) -> Result<Node, String> {
        let mut items = Vec::new();
        while let Some(c) = self.peek() {
            if c == b'|' || c == b')' {
                break;
            }
            let atom = self.atom()?;
            let atom = self.quant(atom)?;
            items.push(atom);
        }
        Ok(match items.len() {
            0 => Node::Empty,
            1 => items.pop().unwrap(),
            _ => Node::Cat(items),
        })
    }

    fn number(&mut self) -> Option<u32> {
        let start = self.i;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.i += 1;
        }
        std::str::from_utf8(&self.s[start..self.i]).ok()?.parse().ok()
    }

    fn quant(&mut self, atom: Node) -> Result<Node, String> {
        let (min, max) = match self.peek() {
            Some(b'*') => (0, None),
            Some(b'+') => (1, None),
            Some(b'?') => (0, Some(1)),
            Some(b'{') => {
                self.i += 1;
                let Some(min) = self.number() else { return self.err("expecting a number after '{'") };
                let max = if self.peek() == Some(b',') {
                    self.i += 1;
                    if self.peek() == Some(b'}') {
                        None
                    } else {
                        match self.number() {
                            Some(m) => Some(m),
                            None => return self.err("expecting a number or '}' in a repetition"),
                        }
                    }
                } else {
                    Some(min)
                };
                if self.peek() != Some(b'}') {
                    return self.err("expecting '}'");
                }
                if max.is_some_and(|m| m < min) {
                    return self.err("repetition maximum below its minimum");
                }
                if min > 1000 || max.is_some_and(|m| m > 1000) {
                    return self.err("repetition count above 1000");
                }
                (min, max)
            }
            _ => return Ok(atom),
        };
        self.i += 1;
        if matches!(atom, Node::Start | Node::End | Node::WordBoundary(_) | Node::Look(..)) {
            return self.err("nothing to repeat");
        }
        let greedy = if self.peek() == Some(b'?') {
            self.i += 1;
            false
        } else {
            true
        };
        Ok(Node::Repeat { node: Box::new(atom), min, max, greedy })
    }

    fn hex(&mut self, n: usize) -> Result<u32, String> {
        let Some(h) = self.s.get(self.i..self.i + n) else { return self.err("truncated hex escape") };
        let Ok(v) = u32::from_str_radix(std::str::from_utf8(h).unwrap_or("x"), 16) else { return self.err("invalid hex escape") };
        self.i += n;
        Ok(v)
    }

    /// After a backslash: a class (\d \w \s and negations) or one byte.
    fn escape(&mut self, in_class: bool) -> Result<Result<[u64; 4], u8>, String> {
        let Some(c) = self.peek() else { return self.err("pattern ends with a backslash") };
        self.i += 1;
        Ok(match c {
            b'd' => Ok(class_of(|b| b.is_ascii_digit())),
            b'D' => Ok(class_of(|b| !b.is_ascii_digit())),
            b'w' => Ok(class_of(is_word)),
            b'W' => Ok(class_of(|b| !is_word(b))),
            b's' => Ok(class_of(is_space)),
            b'S' => Ok(class_of(|b| !is_space(b))),
            b'n' => Err(b'\n'),
            b't' => Err(b'\t'),
            b'r' => Err(b'\r'),
            b'f' => Err(0x0C),
            b'v' => Err(0x0B),
            b'0' => Err(0),
            b'b' if in_class => Err(0x08),
            b'x' => Err(self.hex(2)? as u8),
            b'u' => {
                let v = self.hex(4)?;
                if v > 0x7F {
                    return self.err("\\u escape beyond ASCII in a byte pattern");
                }
                Err(v as u8)
            }
            b'1'..=b'9' => return self.err("back-references are not supported"),
            b'p' | b'P' | b'k' | b'c' => return self.err("unsupported escape"),
            c if c.is_ascii_alphanumeric() => return self.err("unknown escape"),
            c => Err(c),
        })
    }

    fn class(&mut self) -> Result<Node, String> {
        // after '['
        let mut negate = false;
        if self.peek() == Some(b'^') {
            negate = true;
            self.i += 1;
        }
        let mut c = [0u64; 4];
        loop {
            let Some(b) = self.peek() else { return self.err("unterminated character class") };
            if b == b']' {
                self.i += 1;
                break;
            }
            self.i += 1;
            let lo = if b == b'\\' {
                match self.escape(true)? {
                    Ok(cls) => {
                        for k in 0..4 {
                            c[k] |= cls[k];
                        }
                        continue;
                    }
                    Err(b) => b,
                }
            } else {
                b
            };
            if self.peek() == Some(b'-') && self.s.get(self.i + 1).is_some_and(|&n| n != b']') {
                self.i += 1;
                let hb = self.peek().unwrap();
                self.i += 1;
                let hi = if hb == b'\\' {
                    match self.escape(true)? {
                        Ok(_) => return self.err("a class escape cannot end a range"),
                        Err(b) => b,
                    }
                } else {
                    hb
                };
                if hi < lo {
                    return self.err("range out of order in character class");
                }
                for x in lo..=hi {
                    set(&mut c, x);
                }
            } else {
                set(&mut c, lo);
            }
        }
        if negate {
            for w in &mut c {
                *w = !*w;
            }
        }
        Ok(Node::Class(c))
    }

    fn atom(&mut self) -> Result<Node, String> {
        let c = self.peek().unwrap();
        self.i += 1;
        Ok(match c {
            b'(' => {
                let kind = if self.s[self.i..].starts_with(b"?:") {
                    self.i += 2;
                    0
                } else if self.s[self.i..].starts_with(b"?=") {
                    self.i += 2;
                    1
                } else if self.s[self.i..].starts_with(b"?!") {
                    self.i += 2;
                    2
                } else if self.peek() == Some(b'?') {
                    return self.err("unsupported group syntax (look-behind or named group)");
                } else {
                    3
                };
                let group = if kind == 3 {
                    self.n_groups += 1;
                    Some(self.n_groups)
                } else {
                    None
                };
                let inner = self.alt()?;
                if self.peek() != Some(b')') {
                    return self.err("expecting ')'");
                }
                self.i += 1;
                match kind {
                    1 => Node::Look(false, Box::new(inner)),
                    2 => Node::Look(true, Box::new(inner)),
                    _ => Node::Group(group, Box::new(inner)),
                }
            }
            b'[' => self.class()?,
            b'.' => Node::Class(class_of(|b| b != b'\n' && b != b'\r')),
            b'^' => Node::Start,
            b'$' => Node::End,
            b'\\' => match self.peek() {
                Some(b'b') => {
                    self.i += 1;
                    Node::WordBoundary(false)
                }
                Some(b'B') => {
                    self.i += 1;
                    Node::WordBoundary(true)
                }
                _ => match self.escape(false)? {
                    Ok(cls) => Node::Class(cls),
                    Err(b) => Node::Byte(b),
                },
            },
            b'*' | b'+' | b'?' => return self.err("nothing to repeat"),
            b'{' => return self.err("unexpected '{'"),
            b => Node::Byte(b),
        })
    }
}

struct Compiler {
    progs: Vec<Vec<Inst>>,
}

impl Compiler {
    fn emit(&mut self, p: usize, i: Inst) -> Result<usize, String> {
        let prog = &mut self.progs[p];
        if prog.len() >= MAX_PROGRAM {
            return Err("trigger pattern too large once compiled".into());
        }
        prog.push(i);
        Ok(prog.len() - 1)
    }
    fn pc(&self, p: usize) -> usize {
        self.progs[p].len()
    }
    fn patch(&mut self, p: usize, at: usize, i: Inst) {
        self.progs[p][at] = i;
    }

    fn node(&mut self, p: usize, n: &Node) -> Result<(), String> {
        match n {
            Node::Empty => {}
            Node::Byte(b) => {
                self.emit(p, Inst::Byte(*b))?;
            }
            Node::Class(c) => {
                self.emit(p, Inst::Class(Box::new(*c)))?;
            }
            Node::Cat(v) => {
                for x in v {
                    self.node(p, x)?;
                }
            }
            Node::Alt(v) => {
                let mut jumps = Vec::new();
                for (k, x) in v.iter().enumerate() {
                    if k + 1 < v.len() {
                        let split = self.emit(p, Inst::Jmp(0))?;
                        self.node(p, x)?;
                        jumps.push(self.emit(p, Inst::Jmp(0))?);
                        let next = self.pc(p);
                        self.patch(p, split, Inst::Split(split + 1, next));
                    } else {
                        self.node(p, x)?;
                    }
                }
                let end = self.pc(p);
                for j in jumps {
                    self.patch(p, j, Inst::Jmp(end));
                }
            }
            Node::Group(g, inner) => {
                if let Some(g) = g {
                    self.emit(p, Inst::Save(2 * g))?;
                }
                self.node(p, inner)?;
                if let Some(g) = g {
                    self.emit(p, Inst::Save(2 * g + 1))?;
                }
            }
            Node::Look(negate, inner) => {
                let sub = self.progs.len();
                self.progs.push(Vec::new());
                self.node(sub, inner)?;
                self.emit(sub, Inst::Match)?;
                self.emit(p, Inst::Look { negate: *negate, prog: sub })?;
            }
            Node::Start => {
                self.emit(p, Inst::Start)?;
            }
            Node::End => {
                self.emit(p, Inst::End)?;
            }
            Node::WordBoundary(neg) => {
                self.emit(p, Inst::WordBoundary(*neg))?;
            }
            Node::Repeat { node, min, max, greedy } => {
                for _ in 0..*min {
                    self.node(p, node)?;
                }
                let split = |a: usize, b: usize| if *greedy { Inst::Split(a, b) } else { Inst::Split(b, a) };
                match max {
                    None => {
                        let l = self.emit(p, Inst::Jmp(0))?;
                        self.node(p, node)?;
                        self.emit(p, Inst::Jmp(l))?;
                        let end = self.pc(p);
                        self.patch(p, l, split(l + 1, end));
                    }
                    Some(m) => {
                        let mut holes = Vec::new();
                        for _ in *min..*m {
                            holes.push(self.emit(p, Inst::Jmp(0))?);
                            self.node(p, node)?;
                        }
                        let end = self.pc(p);
                        for h in holes {
                            self.patch(p, h, split(h + 1, end));
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

type Caps = Vec<Option<usize>>;

struct Vm<'a> {
    re: &'a Regex,
    input: &'a [u8],
    mark: Vec<Vec<usize>>,
    generation: usize,
    counter: usize,
}

impl Vm<'_> {
    fn add(&mut self, p: usize, list: &mut Vec<(usize, Caps)>, pc: usize, i: usize, mut caps: Caps) {
        if self.mark[p][pc] == self.generation {
            return;
        }
        self.mark[p][pc] = self.generation;
        match &self.re.progs[p][pc] {
            Inst::Jmp(x) => self.add(p, list, *x, i, caps),
            Inst::Split(x, y) => {
                let (x, y) = (*x, *y);
                self.add(p, list, x, i, caps.clone());
                self.add(p, list, y, i, caps);
            }
            Inst::Save(n) => {
                if *n < caps.len() {
                    caps[*n] = Some(i);
                }
                self.add(p, list, pc + 1, i, caps)
            }
            Inst::Start => {
                if i == 0 {
                    self.add(p, list, pc + 1, i, caps)
                }
            }
            Inst::End => {
                if i == self.input.len() {
                    self.add(p, list, pc + 1, i, caps)
                }
            }
            Inst::WordBoundary(neg) => {
                let before = i > 0 && is_word(self.input[i - 1]);
                let after = i < self.input.len() && is_word(self.input[i]);
                if (before != after) != *neg {
                    self.add(p, list, pc + 1, i, caps)
                }
            }
            Inst::Look { negate, prog } => {
                let (negate, prog) = (*negate, *prog);
                let found = self.run(prog, i, false, false).is_some();
                if found != negate {
                    self.add(p, list, pc + 1, i, caps)
                }
            }
            _ => list.push((pc, caps)),
        }
    }

    fn fresh(&mut self) -> usize {
        self.counter += 1;
        self.counter
    }

    /// Runs program `p` from `from`: anchored there, or searching onwards; with `full`, a match
    /// must end at the end of the input. Returns the captures of the leftmost-first match.
    fn run(&mut self, p: usize, from: usize, search: bool, full: bool) -> Option<Caps> {
        let ncap = 2 * (self.re.n_groups + 1);
        let n = self.input.len();
        let saved = self.generation;
        let mut clist: Vec<(usize, Caps)> = Vec::new();
        let mut matched: Option<Caps> = None;
        let mut gen = self.fresh();
        for i in from..=n {
            if matched.is_none() && (search || i == from) {
                let mut caps = vec![None; ncap];
                caps[0] = Some(i);
                self.generation = gen;
                self.add(p, &mut clist, 0, i, caps);
            }
            if clist.is_empty() {
                if matched.is_some() || !search {
                    break;
                }
                gen = self.fresh();
                continue;
            }
            let next_gen = self.fresh();
            let mut next = Vec::new();
            for (pc, mut caps) in std::mem::take(&mut clist) {
                let advance = match &self.re.progs[p][pc] {
                    Inst::Byte(b) => i < n && self.input[i] == *b,
                    Inst::Class(c) => i < n && has(c, self.input[i]),
                    Inst::Match => {
                        if !full || i == n {
                            caps[1] = Some(i);
                            matched = Some(caps);
                            break;
                        }
                        false
                    }
                    _ => false,
                };
                if advance {
                    self.generation = next_gen;
                    self.add(p, &mut next, pc + 1, i + 1, caps);
                }
            }
            gen = next_gen;
            clist = next;
            if clist.is_empty() && matched.is_some() {
                break;
            }
        }
        self.generation = saved;
        matched
    }
}

impl Regex {
    pub fn new(pattern: &str) -> Result<Regex, String> {
        let mut p = P { s: pattern.as_bytes(), i: 0, n_groups: 0, depth: 0 };
        let ast = p.alt()?;
        if p.i != p.s.len() {
            return p.err("unmatched ')'");
        }
        let mut c = Compiler { progs: vec![Vec::new()] };
        c.node(0, &ast)?;
        c.emit(0, Inst::Match)?;
        Ok(Regex { pattern: pattern.to_string(), progs: c.progs, n_groups: p.n_groups })
    }

    fn vm<'a>(&'a self, input: &'a [u8]) -> Vm<'a> {
        Vm { re: self, input, mark: self.progs.iter().map(|p| vec![0; p.len()]).collect(), generation: 0, counter: 0 }
    }

    /// std::regex_match: the captures of a match of the whole input.
    pub fn full_match(&self, input: &[u8]) -> Option<Vec<Option<(usize, usize)>>> {
        self.vm(input).run(0, 0, false, true).map(pairs)
    }

    /// std::regex_search: the captures of the leftmost-first match.
    pub fn search(&self, input: &[u8]) -> Option<Vec<Option<(usize, usize)>>> {
        self.vm(input).run(0, 0, true, false).map(pairs)
    }

    /// upstream's llama_grammar_trigger_pattern::find: where the constrained text starts (the
    /// first capturing group that matched something, else the match), or None.
    pub fn find(&self, input: &[u8]) -> Option<usize> {
        let start = |caps: Vec<Option<(usize, usize)>>| caps.iter().skip(1).flatten().find(|(s, e)| e > s).map(|(s, _)| *s).or(caps[0].map(|(s, _)| s));
        let b = self.pattern.as_bytes();
        if b.first() == Some(&b'^') && b.last() == Some(&b'$') {
            if let Some(c) = self.full_match(input) {
                return start(c);
            }
        }
        self.search(input).and_then(start)
    }
}

fn pairs(caps: Caps) -> Vec<Option<(usize, usize)>> {
    caps.chunks(2).map(|c| match (c[0], c[1]) {
        (Some(s), Some(e)) if e >= s => Some((s, e)),
        _ => None,
    }).collect()
}

/// upstream's escaping of a trigger word (`[.^$|()*+?[]{}\` get a backslash).
pub fn escape(word: &[u8]) -> String {
    let mut s = Vec::with_capacity(word.len() * 2);
    for &b in word {
        if b".^$|()*+?[]{}\\".contains(&b) {
            s.push(b'\\');
        }
        s.push(b);
    }
    String::from_utf8_lossy(&s).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Matching is held to std::regex by tests/grammar.rs (trigger_patterns_match_as_std_regex).
    #[test]
    fn unsupported_syntax_is_refused() {
        for p in [r"(a)\1", r"(?<=a)b", r"(?<n>a)", r"\p{L}", r"a{3,1}", r"(a", r"a)", r"*a", r"[b-a]"] {
            assert!(Regex::new(p).is_err(), "{p} was accepted");
        }
        assert!(Regex::new(r"[\s\S]*?(<tool_call>|\{)[\s\S]*").is_ok());
    }
}
