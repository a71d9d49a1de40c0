//! A chain of samplers applied in order, with upstream's sampling-time counters. Generic over
//! the member type so the C API can chain its handles (including user-defined samplers).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{init, Candidates, Sampler, TokenData};
use crate::model::Model;

pub struct Chain<M> {
    pub members: Vec<M>,
    /// When set, sampling time is not measured (counts still are), as upstream.
    pub no_perf: bool,
    pub t_sample: Duration,
    pub n_sample: i32,
    /// The candidate buffer reused by every `sample` call on this chain.
    pub candidates: Vec<TokenData>,
    /// Why the chain cannot sample (a NULL member was added: some sampler's init failed).
    pub broken: Option<String>,
}

impl<M> Chain<M> {
    pub fn new(no_perf: bool) -> Chain<M> {
        Chain { members: Vec::new(), no_perf, t_sample: Duration::ZERO, n_sample: 0, candidates: Vec::new(), broken: None }
    }

    fn timed<R>(&mut self, f: impl FnOnce(&mut Self) -> R) -> R {
        let start = (!self.no_perf).then(Instant::now);
        let r = f(self);
        if let Some(s) = start {
            self.t_sample += s.elapsed();
        }
        r
    }

    pub fn reset_perf(&mut self) {
        self.t_sample = Duration::ZERO;
        self.n_sample = 0;
    }
}

impl<M: Sampler> Chain<M> {
    pub fn accept(&mut self, token: i32) {
        self.timed(|c| c.members.iter_mut().for_each(|m| m.accept(token)));
        self.n_sample += 1;
    }

    pub fn apply(&mut self, cur: &mut Candidates<'_>) {
        self.timed(|c| c.members.iter_mut().for_each(|m| m.apply(cur)));
    }

    pub fn reset(&mut self) {
        self.members.iter_mut().for_each(|m| m.reset());
    }

    /// The seed of the last member that reports one (upstream's llama_sampler_get_seed).
    pub fn seed(&self) -> Option<u32> {
        self.members.iter().rev().find_map(|m| m.seed())
    }
}

/// Fills `buf` with one candidate per vocabulary entry from a logits row.
pub fn fill_candidates(buf: &mut Vec<TokenData>, logits: &[f32]) {
    buf.clear();
    buf.extend(logits.iter().enumerate().map(|(i, &logit)| TokenData { id: i as i32, logit, p: 0.0 }));
}

/// Applies `sampler` to a logits row, accepts and returns the chosen token: the engine's
/// llama_sampler_sample.
pub fn sample(sampler: &mut dyn Sampler, logits: &[f32], buf: &mut Vec<TokenData>) -> Result<i32, String> {
    fill_candidates(buf, logits);
    let mut cur = Candidates::new(buf);
    sampler.apply(&mut cur);
    if cur.selected < 0 || cur.selected as usize >= cur.len() {
        return Err(format!("the sampler chose no token (selected = {} of {} candidates); end the chain with greedy, dist or mirostat", cur.selected, cur.len()));
    }
    let token = cur.data[cur.selected as usize].id;
    sampler.accept(token);
    Ok(token)
}

/// `sample` under a grammar, as llama.cpp's common sampler does it (`common_sampler_sample`
/// without `grammar_first`): the chain picks a token from the whole row; if `grammar` rejects
/// it, the row is filled again, the grammar applied first and the chain run again. Both accept
/// the token. So the emitted token is always one the grammar allows, and the cost of the
/// grammar's full pass is paid only when the unconstrained choice breaks it.
pub fn sample_constrained(sampler: &mut dyn Sampler, grammar: &mut dyn Sampler, logits: &[f32], buf: &mut Vec<TokenData>) -> Result<i32, String> {
    fn chosen(cur: &Candidates<'_>) -> Result<i32, String> {
        if cur.selected < 0 || cur.selected as usize >= cur.len() {
            return Err(format!("the sampler chose no token (selected = {} of {} candidates); end the chain with greedy, dist or mirostat", cur.selected, cur.len()));
        }
        Ok(cur.data[cur.selected as usize].id)
    }
    fill_candidates(buf, logits);
    let mut cur = Candidates::new(buf);
    sampler.apply(&mut cur);
    let mut token = chosen(&cur)?;
    // The grammar decides the picked token alone (upstream's rejection check).
    let mut one = [TokenData { id: token, logit: 1.0, p: 0.0 }];
    grammar.apply(&mut Candidates::new(&mut one));
    if one[0].logit == f32::NEG_INFINITY {
        fill_candidates(buf, logits);
        let mut cur = Candidates::new(buf);
        grammar.apply(&mut cur);
        sampler.apply(&mut cur);
        token = chosen(&cur)?;
    }
    grammar.accept(token);
    sampler.accept(token);
    Ok(token)
}

impl Sampler for BoxChain {
    fn name(&self) -> &'static std::ffi::CStr {
        c"chain"
    }
    fn accept(&mut self, token: i32) {
        Chain::accept(self, token)
    }
    fn apply(&mut self, cur: &mut Candidates<'_>) {
        Chain::apply(self, cur)
    }
    fn reset(&mut self) {
        Chain::reset(self)
    }
    fn clone_box(&self) -> Box<dyn Sampler + Send> {
        let mut c = BoxChain::new(self.no_perf);
        c.members = self.members.iter().map(|m| m.clone_box()).collect();
        Box::new(c)
    }
    fn seed(&self) -> Option<u32> {
        Chain::seed(self)
    }
}

/// A chain of engine samplers: what the CLI builds.
pub type BoxChain = Chain<Box<dyn Sampler + Send>>;

impl Sampler for Box<dyn Sampler + Send> {
    fn name(&self) -> &'static std::ffi::CStr {
        (**self).name()
    }
    fn accept(&mut self, token: i32) {
        (**self).accept(token)
    }
    fn apply(&mut self, cur: &mut Candidates<'_>) {
        (**self).apply(cur)
    }
    fn reset(&mut self) {
        (**self).reset()
    }
    fn clone_box(&self) -> Box<dyn Sampler + Send> {
        (**self).clone_box()
    }
    fn seed(&self) -> Option<u32> {
        (**self).seed()
    }
}

/// One entry of the common sampler's `samplers` list: upstream's `common_sampler_type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SamplerKind {
    Dry,
    TopK,
    TopP,
    MinP,
    TypicalP,
    Temperature,
    Xtc,
    Infill,
    Penalties,
    TopNSigma,
    AdaptiveP,
}

impl SamplerKind {
    pub const ALL: [SamplerKind; 11] = [
        SamplerKind::Dry,
        SamplerKind::TopK,
        SamplerKind::TopP,
        SamplerKind::MinP,
        SamplerKind::TypicalP,
        SamplerKind::Temperature,
        SamplerKind::Xtc,
        SamplerKind::Infill,
        SamplerKind::Penalties,
        SamplerKind::TopNSigma,
        SamplerKind::AdaptiveP,
    ];

    /// Upstream's default order (`common_params_sampling::samplers`, "edskypmxt").
    pub const DEFAULT_ORDER: [SamplerKind; 9] = [
        SamplerKind::Penalties,
        SamplerKind::Dry,
        SamplerKind::TopNSigma,
        SamplerKind::TopK,
        SamplerKind::TypicalP,
        SamplerKind::TopP,
        SamplerKind::MinP,
        SamplerKind::Xtc,
        SamplerKind::Temperature,
    ];

    /// The canonical name (upstream's `common_sampler_type_to_str`).
    pub fn name(self) -> &'static str {
        match self {
            SamplerKind::Dry => "dry",
            SamplerKind::TopK => "top_k",
            SamplerKind::TypicalP => "typ_p",
            SamplerKind::TopP => "top_p",
            SamplerKind::TopNSigma => "top_n_sigma",
            SamplerKind::MinP => "min_p",
            SamplerKind::Temperature => "temperature",
            SamplerKind::Xtc => "xtc",
            SamplerKind::Infill => "infill",
            SamplerKind::Penalties => "penalties",
            SamplerKind::AdaptiveP => "adaptive_p",
        }
    }

    /// The one-letter name (upstream's `common_sampler_type_to_chr`).
    pub fn chr(self) -> char {
        match self {
            SamplerKind::Dry => 'd',
            SamplerKind::TopK => 'k',
            SamplerKind::TypicalP => 'y',
            SamplerKind::TopP => 'p',
            SamplerKind::TopNSigma => 's',
            SamplerKind::MinP => 'm',
            SamplerKind::Temperature => 't',
            SamplerKind::Xtc => 'x',
            SamplerKind::Infill => 'i',
            SamplerKind::Penalties => 'e',
            SamplerKind::AdaptiveP => 'a',
        }
    }

    /// A name as upstream's `common_sampler_types_from_names` reads it, ignoring ASCII case:
    /// the canonical name; for one with '_', also its kebab-case ("top-k") and its form
    /// without the underscores ("topk"); and the aliases "nucleus", "temp" and "typ".
    pub fn from_name(name: &str) -> Option<SamplerKind> {
        let name = name.to_ascii_lowercase();
        match name.as_str() {
            "nucleus" => return Some(SamplerKind::TopP),
            "temp" => return Some(SamplerKind::Temperature),
            "typ" => return Some(SamplerKind::TypicalP),
            _ => {}
        }
        SamplerKind::ALL.into_iter().find(|k| {
            let canonical = k.name();
            name == canonical || (canonical.contains('_') && (name == canonical.replace('_', "-") || name == canonical.replace('_', "")))
        })
    }

    /// A letter as upstream's `common_sampler_types_from_chars` reads it (case matters).
    pub fn from_char(c: char) -> Option<SamplerKind> {
        SamplerKind::ALL.into_iter().find(|k| k.chr() == c)
    }

    /// A list of names (llama-server's `samplers` as a JSON array). Upstream skips a name it
    /// does not know with a warning; here it is an error naming every such name.
    pub fn from_names<S: AsRef<str>>(names: &[S]) -> Result<Vec<SamplerKind>, String> {
        let unknown: Vec<&str> = names.iter().map(|n| n.as_ref()).filter(|n| SamplerKind::from_name(n).is_none()).collect();
        if !unknown.is_empty() {
            let known: Vec<&str> = SamplerKind::ALL.iter().map(|k| k.name()).collect();
            return Err(format!("samplers: unknown sampler name(s) {} (known: {}, and their aliases)", quoted(&unknown), known.join(", ")));
        }
        Ok(names.iter().filter_map(|n| SamplerKind::from_name(n.as_ref())).collect())
    }

    /// A string of letters (llama-server's `samplers` as a JSON string, the CLI's
    /// `--sampling-seq`, e.g. "edskypmxt"). Unknown letters are an error naming them.
    pub fn from_chars(chars: &str) -> Result<Vec<SamplerKind>, String> {
        let unknown: Vec<String> = chars.chars().filter(|&c| SamplerKind::from_char(c).is_none()).map(String::from).collect();
        if !unknown.is_empty() {
            let known: String = SamplerKind::ALL.iter().map(|k| k.chr()).collect();
            let unknown: Vec<&str> = unknown.iter().map(String::as_str).collect();
            return Err(format!("samplers: unknown sampler letter(s) {} (known: {known})", quoted(&unknown)));
        }
        Ok(chars.chars().filter_map(SamplerKind::from_char).collect())
    }

    /// Names separated by ';' (the CLI's `--samplers`), read as [`SamplerKind::from_names`].
    pub fn from_list(list: &str) -> Result<Vec<SamplerKind>, String> {
        let names: Vec<&str> = list.split(';').collect();
        SamplerKind::from_names(&names)
    }
}

fn quoted(items: &[&str]) -> String {
    items.iter().map(|s| format!("'{s}'")).collect::<Vec<_>>().join(", ")
}

/// The CPU sampling settings of llama.cpp's common sampler (`common_params_sampling` of
/// b11312, common/common.h), with its defaults ([`Default`]); [`CommonParams::build`] makes
/// the chain `common_sampler_init` (common/sampling.cpp) makes from them. Grammar and
/// reasoning budget are not here: the engine and the server add those around the chain.
#[derive(Clone, Debug, PartialEq)]
pub struct CommonParams {
    /// Upstream's `temp`. ≤ 0: only the best candidate survives the temperature step (greedy).
    pub temperature: f32,
    /// ≤ 0: off.
    pub top_k: i32,
    /// ≥ 1: off.
    pub top_p: f32,
    /// ≤ 0: off.
    pub min_p: f32,
    /// Upstream's `penalty_repeat`. 1: off.
    pub repeat_penalty: f32,
    /// Upstream's `penalty_last_n`: the penalty window. 0: off; -1: the context size.
    pub repeat_last_n: i32,
    /// [`super::rng::DEFAULT_SEED`]: a random seed for each seeded sampler.
    pub seed: u32,
    /// Upstream's `penalty_freq`. 0: off.
    pub frequency_penalty: f32,
    /// Upstream's `penalty_present`. 0: off.
    pub presence_penalty: f32,
    /// The fewest candidates top-p, min-p, typical and XTC leave (0: no minimum).
    pub min_keep: i32,
    /// Locally typical sampling (upstream's `typ_p`, llama-server's `typical_p`). ≥ 1: off.
    pub typ_p: f32,
    /// ≤ 0: off.
    pub top_n_sigma: f32,
    /// XTC's chance of removing the top candidates. ≤ 0: off.
    pub xtc_probability: f32,
    /// XTC removes candidates above this probability (all but the last). > 0.5: off.
    pub xtc_threshold: f32,
    /// Dynamic temperature: the temperature ranges over [temperature - range, temperature +
    /// range] with the entropy. ≤ 0: off.
    pub dynatemp_range: f32,
    pub dynatemp_exponent: f32,
    /// DRY's penalty multiplier. 0: off.
    pub dry_multiplier: f32,
    /// DRY's exponential base. < 1: off.
    pub dry_base: f32,
    /// Repeats longer than this are penalized by DRY.
    pub dry_allowed_length: i32,
    /// How many tokens DRY scans. 0: off; -1: the context size.
    pub dry_penalty_last_n: i32,
    /// Texts that break a DRY repeat (each mapped onto the vocabulary).
    pub dry_sequence_breakers: Vec<String>,
    /// 0: the `samplers` chain; 1: Mirostat; 2: Mirostat 2.0 (temperature then mirostat,
    /// replacing the whole `samplers` list, as upstream).
    pub mirostat: i32,
    pub mirostat_tau: f32,
    pub mirostat_eta: f32,
    /// The adaptive-p sampler's target (negative: off). Only used when `samplers` names
    /// adaptive_p, which this library does not implement (refused by `check`).
    pub adaptive_target: f32,
    pub adaptive_decay: f32,
    /// Every end-of-generation token gets a bias of -inf (appended to `logit_bias`), as
    /// llama-server does for `ignore_eos`.
    pub ignore_eos: bool,
    /// (token, bias) pairs added to the logits before every other sampler.
    pub logit_bias: Vec<(i32, f32)>,
    /// The samplers in the order applied when `mirostat` is 0; a draw from the distribution
    /// always ends the chain.
    pub samplers: Vec<SamplerKind>,
}

impl Default for CommonParams {
    /// Upstream's `common_params_sampling` defaults.
    fn default() -> CommonParams {
        CommonParams {
            temperature: 0.80,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.00,
            repeat_last_n: 64,
            seed: super::rng::DEFAULT_SEED,
            frequency_penalty: 0.00,
            presence_penalty: 0.00,
            min_keep: 0,
            typ_p: 1.00,
            top_n_sigma: -1.00,
            xtc_probability: 0.00,
            xtc_threshold: 0.10,
            dynatemp_range: 0.00,
            dynatemp_exponent: 1.00,
            dry_multiplier: 0.0,
            dry_base: 1.75,
            dry_allowed_length: 2,
            dry_penalty_last_n: 64,
            dry_sequence_breakers: ["\n", ":", "\"", "*"].map(String::from).to_vec(),
            mirostat: 0,
            mirostat_tau: 5.00,
            mirostat_eta: 0.10,
            adaptive_target: -1.0,
            adaptive_decay: 0.90,
            ignore_eos: false,
            logit_bias: Vec::new(),
            samplers: SamplerKind::DEFAULT_ORDER.to_vec(),
        }
    }
}

impl CommonParams {
    /// Refuses values no sampler can use, naming the field. (Values that upstream reads as
    /// "off", such as top_k ≤ 0 or dry_base < 1, are accepted.)
    pub fn check(&self) -> Result<(), String> {
        let floats = [
            ("temperature", self.temperature),
            ("top_p", self.top_p),
            ("min_p", self.min_p),
            ("repeat_penalty", self.repeat_penalty),
            ("frequency_penalty", self.frequency_penalty),
            ("presence_penalty", self.presence_penalty),
            ("typ_p", self.typ_p),
            ("top_n_sigma", self.top_n_sigma),
            ("xtc_probability", self.xtc_probability),
            ("xtc_threshold", self.xtc_threshold),
            ("dynatemp_range", self.dynatemp_range),
            ("dynatemp_exponent", self.dynatemp_exponent),
            ("dry_multiplier", self.dry_multiplier),
            ("dry_base", self.dry_base),
            ("mirostat_tau", self.mirostat_tau),
            ("mirostat_eta", self.mirostat_eta),
            ("adaptive_target", self.adaptive_target),
            ("adaptive_decay", self.adaptive_decay),
        ];
        if let Some((name, v)) = floats.iter().find(|(_, v)| !v.is_finite()) {
            return Err(format!("{name} = {v} must be a finite number"));
        }
        if self.top_p < 0.0 {
            return Err(format!("top_p = {} must be at least 0 (1 or more is off)", self.top_p));
        }
        if self.min_p > 1.0 {
            return Err(format!("min_p = {} must be at most 1 (0 or less is off)", self.min_p));
        }
        // As common_sampler_init: the penalty divides positive logits.
        if self.repeat_penalty <= 0.0 || !(1.0 / self.repeat_penalty).is_finite() {
            return Err(format!("repeat_penalty = {} must be positive (1 is off)", self.repeat_penalty));
        }
        if self.repeat_last_n < -1 {
            return Err(format!("repeat_last_n = {} must be -1 (whole context), 0 (off) or positive", self.repeat_last_n));
        }
        if self.min_keep < 0 {
            return Err(format!("min_keep = {} must not be negative (0 is no minimum)", self.min_keep));
        }
        for (name, v) in [("xtc_probability", self.xtc_probability), ("xtc_threshold", self.xtc_threshold)] {
            if !(0.0..=1.0).contains(&v) {
                return Err(format!("{name} = {v} must lie in [0, 1]"));
            }
        }
        if self.dry_allowed_length < 0 {
            return Err(format!("dry_allowed_length = {} must not be negative", self.dry_allowed_length));
        }
        if self.dry_penalty_last_n < -1 {
            return Err(format!("dry_penalty_last_n = {} must be -1 (whole context), 0 (off) or positive", self.dry_penalty_last_n));
        }
        // Upstream skips an empty breaker with a warning.
        if let Some(i) = self.dry_sequence_breakers.iter().position(String::is_empty) {
            return Err(format!("dry_sequence_breakers[{i}] is empty; a sequence breaker must hold at least one character"));
        }
        if !(0..=2).contains(&self.mirostat) {
            return Err(format!("mirostat = {} must be 0 (off), 1 (Mirostat) or 2 (Mirostat 2.0)", self.mirostat));
        }
        if self.adaptive_target > 1.0 {
            return Err(format!("adaptive_target = {} must be at most 1 (negative is off)", self.adaptive_target));
        }
        if !(0.0..=0.99).contains(&self.adaptive_decay) {
            return Err(format!("adaptive_decay = {} must lie in [0, 0.99]", self.adaptive_decay));
        }
        if self.mirostat == 0 && self.samplers.contains(&SamplerKind::AdaptiveP) {
            return Err("samplers: adaptive_p is not implemented by this library".into());
        }
        // A +inf bias would meet the other logits' -inf as NaN; -inf (never pick) is allowed.
        if let Some(&(t, b)) = self.logit_bias.iter().find(|(t, b)| *t < 0 || b.is_nan() || *b == f32::INFINITY) {
            return Err(format!("logit_bias: token {t} with bias {b}: a token must not be negative and a bias must be a number below +inf"));
        }
        Ok(())
    }

    /// The chain upstream's `common_sampler_init` makes: the logit bias (when there is any),
    /// then with `mirostat` 0 each of `samplers` in order (a disabled one as its named no-op,
    /// e.g. "?top-k") and a seeded draw from the distribution; with `mirostat` 1 or 2 the
    /// temperature and that Mirostat instead. `n_ctx` is the window of repeat_last_n = -1 and
    /// dry_penalty_last_n = -1. Checks the parameters first ([`CommonParams::check`]); the
    /// logit bias's tokens must lie in the vocabulary.
    pub fn build(&self, model: &Arc<Model>, n_ctx: usize) -> Result<BoxChain, String> {
        self.check()?;
        let vocab = &model.vocab;
        let n_vocab = vocab.n_tokens();
        let mut c = BoxChain::new(true);

        // The request's biases, llama-server's end-of-generation biases for ignore_eos, then
        // (upstream) the model's suppress tokens, which no model this library runs has.
        if let Some(&(t, _)) = self.logit_bias.iter().find(|(t, _)| *t as usize >= n_vocab) {
            return Err(format!("logit_bias: token {t} is not in the vocabulary ({n_vocab} tokens)"));
        }
        let mut biases = self.logit_bias.clone();
        if self.ignore_eos {
            if vocab.eos() < 0 {
                return Err("ignore_eos: the model has no end-of-sequence token".into());
            }
            biases.extend(vocab.eog_ids().map(|t| (t, f32::NEG_INFINITY)));
        }
        if model.file.get("tokenizer.ggml.suppress_tokens").is_some() {
            return Err("the model has tokenizer.ggml.suppress_tokens, which this library does not support".into());
        }
        if !biases.is_empty() {
            c.members.push(init::logit_bias(biases));
        }

        let window = |n: i32| if n < 0 { n_ctx.min(i32::MAX as usize) as i32 } else { n };
        let min_keep = self.min_keep as usize;
        match self.mirostat {
            0 => {
                let breakers: Vec<&[u8]> = self.dry_sequence_breakers.iter().map(|b| b.as_bytes()).collect();
                for kind in &self.samplers {
                    c.members.push(match kind {
                        SamplerKind::Dry => init::dry(vocab, self.dry_multiplier, self.dry_base, self.dry_allowed_length, window(self.dry_penalty_last_n), &breakers),
                        SamplerKind::TopK => init::top_k(self.top_k),
                        SamplerKind::TopP => init::top_p(self.top_p, min_keep),
                        SamplerKind::TopNSigma => init::top_n_sigma(self.top_n_sigma),
                        SamplerKind::MinP => init::min_p(self.min_p, min_keep),
                        SamplerKind::Xtc => init::xtc(self.xtc_probability, self.xtc_threshold, min_keep, self.seed),
                        SamplerKind::TypicalP => init::typical(self.typ_p, min_keep),
                        SamplerKind::Temperature => init::temp_ext(self.temperature, self.dynatemp_range, self.dynatemp_exponent),
                        SamplerKind::Infill => init::infill(model),
                        SamplerKind::Penalties => init::penalties(window(self.repeat_last_n), self.repeat_penalty, self.frequency_penalty, self.presence_penalty),
                        SamplerKind::AdaptiveP => unreachable!("refused by check"),
                    });
                }
                c.members.push(init::dist(self.seed));
            }
            1 => {
                c.members.push(init::temp(self.temperature));
                c.members.push(init::mirostat(n_vocab.min(i32::MAX as usize) as i32, self.seed, self.mirostat_tau, self.mirostat_eta, 100));
            }
            _ => {
                c.members.push(init::temp(self.temperature));
                c.members.push(init::mirostat_v2(self.seed, self.mirostat_tau, self.mirostat_eta));
            }
        }
        Ok(c)
    }
}
