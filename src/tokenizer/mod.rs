//! tokenizer: the vocabulary of a GGUF model and llama.cpp's (b11312) tokenization rules —
//! loading (`llama_vocab::impl::load`), special-token partitioning, byte-level BPE with the
//! pre-tokenizer of `tokenizer.ggml.pre`, SentencePiece-style BPE (`tokenizer.ggml.model =
//! "llama"`), `token_to_piece` and `detokenize` — producing the same token ids and bytes.
//!
//! Owns: a [`Vocab`], immutable after [`Vocab::from_gguf`], `Send + Sync`, shared freely between
//! threads. Never: global mutable state, caches (BPE is fast enough without one: see the tests),
//! or anything model-specific beyond what upstream keys on token texts and names.
//!
//! # What the C layer must add on top (upstream's `llama_tokenize` / `llama_token_to_piece` /
//! `llama_detokenize` contracts)
//!
//! - `llama_tokenize(vocab, text, text_len, tokens, n_tokens_max, add_special, parse_special)`:
//!   upstream builds `std::string(text, text_len)` (a negative `text_len` throws, i.e. aborts the
//!   process; refuse it and return `i32::MIN`), tokenizes everything, then: if the result has
//!   ≥ `i32::MAX` tokens, logs an error and returns `i32::MIN`; if `n_tokens_max < n` returns
//!   `-n` and writes nothing; otherwise writes the n ids and returns n.
//! - `llama_token_to_piece(vocab, token, buf, length, lstrip, special)`: the piece is
//!   [`Vocab::token_to_piece`]'s output; if `length < piece.len()` return `-piece.len()` and write
//!   nothing, else copy it (no NUL terminator) and return its length. An id outside the vocabulary
//!   makes upstream throw `std::out_of_range` (process abort); return 0 instead.
//! - `llama_detokenize(vocab, tokens, n_tokens, text, text_len_max, remove_special,
//!   unparse_special)`: [`Vocab::detokenize`] returns the *raw* length (sum of the pieces, before
//!   the clean-up of spaces) and fills `out` with the final text. Upstream returns `-raw` when
//!   `raw > text_len_max` (having written into `text` the pieces that fitted, in order, up to the
//!   first one that did not), otherwise the clean text's length (≤ raw) after writing it. Vocab
//!   type NONE returns 0.
//! - `llama_vocab_get_text`/`get_score`/`get_attr` abort upstream for vocab type NONE or an id out
//!   of range; here they return None / 0.0 / 0 (UNDEFINED).
//!
//! Where upstream would abort (GGML_ASSERT / uncaught exception) we log an error and go on:
//! `add_special` with `add_bos`/`add_eos` set but no BOS/EOS id (the token is not added),
//! tokenizing with vocab type NONE (no tokens), an SPM byte without a byte token (skipped), and
//! codepoints above U+10FFFF in the input (read as U+FFFD).

mod bpe;
pub mod piece_trie;
mod pretok;
mod stdcompat;
mod unicode;
mod unicode_table;

use std::collections::{BTreeSet, BinaryHeap, HashMap};

use crate::gguf::{GgufArray, GgufFile, GgufValue};

use pretok::{PreType, Split};

pub(crate) const LLAMA_TOKEN_NULL: i32 = -1;

/// `enum llama_vocab_type`
pub(crate) const VOCAB_TYPE_NONE: i32 = 0;
pub(crate) const VOCAB_TYPE_SPM: i32 = 1;
pub(crate) const VOCAB_TYPE_BPE: i32 = 2;

/// `enum llama_token_attr` bits
pub(crate) const ATTR_UNDEFINED: u32 = 0;
pub(crate) const ATTR_UNKNOWN: u32 = 1 << 0;
pub(crate) const ATTR_UNUSED: u32 = 1 << 1;
pub(crate) const ATTR_NORMAL: u32 = 1 << 2;
pub(crate) const ATTR_CONTROL: u32 = 1 << 3;
pub(crate) const ATTR_USER_DEFINED: u32 = 1 << 4;
pub(crate) const ATTR_BYTE: u32 = 1 << 5;
pub(crate) const ATTR_LSTRIP: u32 = 1 << 7;
pub(crate) const ATTR_RSTRIP: u32 = 1 << 8;

/// `enum llama_token_type` (the GGUF `tokenizer.ggml.token_type` values)
const TOKEN_TYPE_NORMAL: i32 = 1;
const TOKEN_TYPE_UNKNOWN: i32 = 2;
const TOKEN_TYPE_CONTROL: i32 = 3;
const TOKEN_TYPE_USER_DEFINED: i32 = 4;
const TOKEN_TYPE_UNUSED: i32 = 5;
const TOKEN_TYPE_BYTE: i32 = 6;

const KEY_MODEL: &str = "tokenizer.ggml.model";
const KEY_PRE: &str = "tokenizer.ggml.pre";
const KEY_TOKENS: &str = "tokenizer.ggml.tokens";
const KEY_TYPES: &str = "tokenizer.ggml.token_type";
const KEY_SCORES: &str = "tokenizer.ggml.scores";
const KEY_MERGES: &str = "tokenizer.ggml.merges";

#[derive(Clone, Debug)]
struct TokenData {
    text: String,
    score: f32,
    attr: u32,
}

/// Special token ids (LLAMA_TOKEN_NULL = -1 when absent).
#[derive(Clone, Copy, Debug)]
struct SpecialIds {
    bos: i32,
    eos: i32,
    eot: i32,
    eom: i32,
    unk: i32,
    sep: i32,
    pad: i32,
    mask: i32,
    nl: i32,
    fim_pre: i32,
    fim_suf: i32,
    fim_mid: i32,
    fim_pad: i32,
    fim_rep: i32,
    fim_sep: i32,
}

/// Tokenizer flags (upstream's `impl` booleans).
#[derive(Clone, Copy, Debug, Default)]
struct Flags {
    add_space_prefix: bool,
    add_bos: bool,
    add_eos: bool,
    add_sep: bool,
    ignore_merges: bool,
    clean_spaces: bool,
    remove_extra_whitespaces: bool,
    escape_whitespaces: bool,
}

/// Trie over the texts of the special tokens, to find all their occurrences in one pass.
#[derive(Default)]
struct SpecialTrie {
    /// node → sorted (byte, child)
    children: Vec<Vec<(u8, u32)>>,
    /// node → token ending here, or -1
    token: Vec<i32>,
}

impl SpecialTrie {
    fn new() -> SpecialTrie {
        SpecialTrie { children: vec![Vec::new()], token: vec![-1] }
    }

    fn insert(&mut self, text: &[u8], id: i32) {
        let mut node = 0usize;
        for &b in text {
            let kids = &self.children[node];
            node = match kids.binary_search_by_key(&b, |k| k.0) {
                Ok(i) => kids[i].1 as usize,
                Err(i) => {
                    let child = self.token.len();
                    self.children.push(Vec::new());
                    self.token.push(-1);
                    self.children[node].insert(i, (b, child as u32));
                    child
                }
            };
        }
        self.token[node] = id;
    }

    /// token id → start offsets of its occurrences (overlapping ones included), ascending.
    fn occurrences(&self, text: &[u8]) -> HashMap<i32, Vec<usize>> {
        let mut occ: HashMap<i32, Vec<usize>> = HashMap::new();
        if self.children[0].is_empty() {
            return occ;
        }
        for start in 0..text.len() {
            let mut node = 0usize;
            for &b in &text[start..] {
                let kids = &self.children[node];
                match kids.binary_search_by_key(&b, |k| k.0) {
                    Ok(i) => node = kids[i].1 as usize,
                    Err(_) => break,
                }
                let t = self.token[node];
                if t >= 0 {
                    occ.entry(t).or_default().push(start);
                }
            }
        }
        occ
    }
}

/// A piece of the input after special-token partitioning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fragment {
    /// raw text: (offset, length), length ≥ 1
    Text(usize, usize),
    Token(i32),
}

/// The vocabulary and tokenizer of one model. Immutable after loading.
pub struct Vocab {
    vocab_type: i32,
    model_name: String,
    pre_name: String,
    /// the BPE pre-tokenizer's regex list (empty for other vocab types)
    pre_steps: &'static [Split],
    tokens: Vec<TokenData>,
    token_to_id: HashMap<Box<[u8]>, i32>,
    bpe: Option<bpe::BpeTable>,
    ids: SpecialIds,
    flags: Flags,
    eog: BTreeSet<i32>,
    /// upstream's `cache_special_tokens`: CONTROL | USER_DEFINED | UNKNOWN tokens, longest first
    special_cache: Vec<i32>,
    special_trie: SpecialTrie,
    /// `token_to_piece(id, special = true)` of every token (upstream's `cache_token_to_piece`)
    pieces: Vec<Box<[u8]>>,
    /// The trie of the pieces grammar samplers match (`grammar_trie`), built on first use and
    /// freed with the vocabulary (that is, with the model).
    grammar_trie: once_cell::sync::OnceCell<piece_trie::PieceTrie>,
}

/// Reading GGUF keys with llama_model_loader's strict typing: a key that exists with another
/// type than expected is an error, not "absent".
fn wrong_type(key: &str, v: &GgufValue, expected: &str) -> String {
    format!("key {} has wrong type {} but expected type {}", key, v.value_type().name(), expected)
}

fn key_str<'a>(f: &'a GgufFile, key: &str) -> Result<Option<&'a str>, String> {
    match f.get(key) {
        None => Ok(None),
        Some(GgufValue::Str(s)) => Ok(Some(s)),
        Some(v) => Err(wrong_type(key, v, "str")),
    }
}

fn key_u32(f: &GgufFile, key: &str) -> Result<Option<u32>, String> {
    match f.get(key) {
        None => Ok(None),
        Some(GgufValue::U32(v)) => Ok(Some(*v)),
        Some(v) => Err(wrong_type(key, v, "u32")),
    }
}

fn key_bool(f: &GgufFile, key: &str) -> Result<Option<bool>, String> {
    match f.get(key) {
        None => Ok(None),
        Some(GgufValue::Bool(v)) => Ok(Some(*v)),
        Some(v) => Err(wrong_type(key, v, "bool")),
    }
}

/// C `isspace` in the "C" locale.
#[inline]
fn c_isspace(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0B | 0x0C | b'\r')
}

/// Pre-tokenizer name → (family, flag changes), as upstream's `load`. `Err` for names upstream
/// does not know (its error message) and for names whose regexes are not implemented here.
struct PreSpec {
    pre: PreType,
    clean_spaces: bool,
    ignore_merges: bool,
    add_bos: bool,
    add_sep: bool,
    bos_null: bool,
}

fn pre_spec(name: &str) -> Result<PreSpec, String> {
    let spec = |pre, clean_spaces| PreSpec { pre, clean_spaces, ignore_merges: false, add_bos: false, add_sep: false, bos_null: false };
    Ok(match name {
        "" | "default" => spec(PreType::Default, true),
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "midm-2.0" | "lfm2" | "jina-v5-nano" => {
            PreSpec { ignore_merges: true, add_bos: true, ..spec(PreType::Llama3, true) }
        }
        "dbrx" | "smaug-bpe" => spec(PreType::Llama3, true),
        "chatglm-bpe" => PreSpec { bos_null: true, ..spec(PreType::Llama3, true) },
        "glm4" | "glm5" => PreSpec { bos_null: true, ignore_merges: true, ..spec(PreType::Llama3, true) },
        "deepseek-llm" => spec(PreType::DeepSeekLlm, false),
        "deepseek-coder" => spec(PreType::DeepSeekCoder, false),
        "deepseek-v3" | "hunyuan-dense" | "hy_v4" | "joyai-llm" => spec(PreType::DeepSeekV3, false),
        "falcon" => spec(PreType::Falcon, true),
        "mpt" | "olmo" | "jais" | "exaone4" => spec(PreType::Gpt2, true),
        "gpt-2" | "phi-2" | "jina-es" | "jina-de" | "gigachat" | "jina-v2-es" | "jina-v2-de" | "a.x-4.0" | "mellum"
        | "modern-bert" => spec(PreType::Gpt2, true),
        "jina-v1-en" | "jina-v2-code" | "roberta-bpe" => PreSpec { add_sep: true, ..spec(PreType::Gpt2, true) },
        "trillion" | "granite-docling" => spec(PreType::Gpt2, false),
        "starcoder" | "refact" | "codeshell" | "exaone" | "minerva-7b" | "mellum2" => spec(PreType::StarCoder, true),
        "command-r" | "smollm" => spec(PreType::StarCoder, false),
        "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" | "hunyuan" | "solar-open" => spec(PreType::Qwen2, false),
        "stablelm2" | "megrez" => spec(PreType::Qwen2, true),
        "qwen35" => spec(PreType::Qwen35, false),
        "minicpm5" | "spark2_5" | "youtu" | "jais-2" | "gemma4" | "granite-embed-multi-311m" | "sarvam-moe" | "whitespace"
        | "poro-chat" | "viking" | "tekken" | "bloom" | "gpt3-finnish" | "exaone-moe" | "chameleon" | "gpt-4o" | "llama4"
        | "kanana2" | "talkie" | "granite-embed-multi-97m" | "tiny_aya" | "cohere2moe" | "superbpe" | "bailingmoe"
        | "bailingmoe2" | "llada-moe" | "seed-coder" | "kimi-k2" | "ufakzeka" | "grok-2" | "afmoe" | "laguna"
        | "minimax-m2" => {
            return Err(format!("pre-tokenizer type '{name}' is known to llama.cpp but not supported by this library"))
        }
        _ => return Err(format!("unknown pre-tokenizer type: '{name}'")),
    })
}

impl Vocab {
    /// Loads the vocabulary of a GGUF file, as upstream's `llama_vocab::load`.
    pub fn from_gguf(f: &GgufFile) -> Result<Vocab, String> {
        Self::from_gguf_with_pre(f, None)
    }

    /// As [`Vocab::from_gguf`], with `tokenizer.ggml.pre` replaced by `pre` when given (the file is
    /// read as if its pre-tokenizer key held that value).
    pub fn from_gguf_with_pre(f: &GgufFile, pre: Option<&str>) -> Result<Vocab, String> {
        let model_name = key_str(f, KEY_MODEL)?.ok_or_else(|| format!("key not found in model: {KEY_MODEL}"))?.to_string();
        let pre_name = match pre {
            Some(p) => p.to_string(),
            None => key_str(f, KEY_PRE)?.unwrap_or("").to_string(),
        };

        let null = LLAMA_TOKEN_NULL;
        let mut ids = SpecialIds {
            bos: 1, eos: 2, eot: null, eom: null, unk: 0, sep: null, pad: null, mask: null, nl: 13,
            fim_pre: null, fim_suf: null, fim_mid: null, fim_pad: null, fim_rep: null, fim_sep: null,
        };
        let mut flags = Flags { escape_whitespaces: true, ..Flags::default() };

        if model_name == "no_vocab" || model_name == "none" {
            ids = SpecialIds { bos: null, eos: null, unk: null, sep: null, pad: null, mask: null, nl: null, ..ids };
            let mut tokens = Vec::new();
            let arch = key_str(f, "general.architecture")?.unwrap_or("");
            if let Some(n) = key_u32(f, &format!("{arch}.vocab_size"))? {
                crate::log_warn!("Vocab::from_gguf: adding {} dummy tokens", n);
                tokens = vec![TokenData { text: String::new(), score: 0.0, attr: ATTR_UNDEFINED }; n as usize];
            }
            return Ok(Vocab {
                vocab_type: VOCAB_TYPE_NONE,
                model_name,
                pre_name,
                pre_steps: &[],
                tokens,
                token_to_id: HashMap::new(),
                bpe: None,
                ids,
                flags,
                eog: BTreeSet::new(),
                special_cache: Vec::new(),
                special_trie: SpecialTrie::new(),
                pieces: Vec::new(),
                grammar_trie: Default::default(),
            });
        }

        let vocab_type;
        let mut merges: &[String] = &[];
        let mut pre_steps: &'static [Split] = &[];
        match model_name.as_str() {
            "llama" => {
                vocab_type = VOCAB_TYPE_SPM;
                ids.bos = 1;
                ids.eos = 2;
                ids.unk = 0;
                flags.add_space_prefix = true;
                flags.clean_spaces = false;
                flags.add_bos = true;
                flags.add_eos = false;
            }
            "gpt2" => {
                vocab_type = VOCAB_TYPE_BPE;
                merges = match f.get(KEY_MERGES) {
                    None => return Err("cannot find tokenizer merges in model file".into()),
                    Some(GgufValue::Array(GgufArray::Str(m))) => m,
                    Some(_) => return Err(format!("invalid gguf type for {KEY_MERGES}")),
                };
                ids.bos = 11;
                ids.eos = 11;
                ids.unk = null;
                flags.add_space_prefix = false;
                flags.escape_whitespaces = false;
                if pre_name.is_empty() {
                    crate::log_warn!("Vocab::from_gguf: missing pre-tokenizer type, using: 'default'");
                    crate::log_warn!("Vocab::from_gguf: GENERATION QUALITY WILL BE DEGRADED! CONSIDER REGENERATING THE MODEL");
                }
                let spec = pre_spec(&pre_name)?;
                pre_steps = pretok::steps(spec.pre);
                flags.clean_spaces = spec.clean_spaces;
                flags.ignore_merges = spec.ignore_merges;
                flags.add_bos = spec.add_bos;
                flags.add_sep = spec.add_sep;
                if spec.bos_null {
                    ids.bos = null;
                }
            }
            "bert" | "t5" | "rwkv" | "plamo2" | "gemma4" | "hybriddna" | "whitespace" | "test" => {
                return Err(format!("tokenizer model '{model_name}' is not supported by this library"))
            }
            other => return Err(format!("unknown tokenizer: '{other}'")),
        }
        if let Some(v) = key_bool(f, "tokenizer.ggml.add_space_prefix")? {
            flags.add_space_prefix = v;
        }
        if let Some(v) = key_bool(f, "tokenizer.ggml.remove_extra_whitespaces")? {
            flags.remove_extra_whitespaces = v;
        }

        // tokens, scores, types
        let texts = match f.get(KEY_TOKENS) {
            None => return Err("cannot find tokenizer vocab in model file".into()),
            Some(GgufValue::Array(GgufArray::Str(t))) => t,
            Some(_) => return Err(format!("invalid gguf type for {KEY_TOKENS}")),
        };
        let n = texts.len();
        let scores: Option<Vec<f32>> = match f.get(KEY_SCORES) {
            None => None,
            Some(GgufValue::Array(a @ (GgufArray::F32(_) | GgufArray::I32(_)))) => {
                if a.len() < n {
                    return Err(format!("Index out of array bounds for scores ({} < {})", a.len(), n));
                }
                Some(match a {
                    GgufArray::F32(v) => v[..n].to_vec(),
                    GgufArray::I32(v) => v[..n].iter().map(|&x| x as f32).collect(),
                    _ => unreachable!(),
                })
            }
            Some(_) => return Err(format!("invalid gguf type for {KEY_SCORES}")),
        };
        let types: Option<&[i32]> = match f.get(KEY_TYPES) {
            None => None,
            Some(GgufValue::Array(GgufArray::I32(v))) => {
                if v.len() < n {
                    return Err(format!("Index out of array bounds for toktypes ({} < {})", v.len(), n));
                }
                Some(v)
            }
            Some(_) => return Err(format!("invalid gguf type for {KEY_TYPES}")),
        };

        let mut tokens = Vec::with_capacity(n);
        let mut token_to_id: HashMap<Box<[u8]>, i32> = HashMap::with_capacity(n);
        for (i, text) in texts.iter().enumerate() {
            let text = if text.is_empty() {
                crate::log_warn!("Vocab::from_gguf: empty token at index {}", i);
                format!("[EMPTY_{i}]")
            } else {
                text.clone()
            };
            if token_to_id.insert(text.as_bytes().into(), i as i32).is_some() {
                // upstream: GGML_ASSERT(id_to_token.size() == token_to_id.size()) aborts
                return Err(format!("duplicate token text at index {i}: '{text}'"));
            }
            let attr = match types.map(|t| t[i]) {
                None => ATTR_NORMAL,
                Some(TOKEN_TYPE_UNKNOWN) => ATTR_UNKNOWN,
                Some(TOKEN_TYPE_UNUSED) => ATTR_UNUSED,
                Some(TOKEN_TYPE_NORMAL) => ATTR_NORMAL,
                Some(TOKEN_TYPE_CONTROL) => ATTR_CONTROL,
                Some(TOKEN_TYPE_USER_DEFINED) => ATTR_USER_DEFINED,
                Some(TOKEN_TYPE_BYTE) => ATTR_BYTE,
                Some(_) => ATTR_UNDEFINED,
            };
            tokens.push(TokenData { text, score: scores.as_ref().map_or(0.0, |s| s[i]), attr });
        }

        let bpe = (vocab_type == VOCAB_TYPE_BPE).then(|| bpe::BpeTable::new(&token_to_id, merges));
        let mut vocab = Vocab {
            vocab_type,
            model_name,
            pre_name,
            pre_steps,
            tokens,
            token_to_id,
            bpe,
            ids,
            flags,
            eog: BTreeSet::new(),
            special_cache: Vec::new(),
            special_trie: SpecialTrie::new(),
            pieces: Vec::new(),
            grammar_trie: Default::default(),
        };
        vocab.finish_load(f)?;
        Ok(vocab)
    }

    /// The part of upstream's `load` after the tokenizer exists: newline, special ids, flags,
    /// auto-detection by text, end-of-generation set, caches, per-model attributes.
    fn finish_load(&mut self, f: &GgufFile) -> Result<(), String> {
        /// Which bytes begin one of `lists`' names.
        fn first_bytes(lists: &[&[&str]]) -> [bool; 256] {
            let mut first = [false; 256];
            for name in lists.iter().flat_map(|l| l.iter()) {
                first[name.as_bytes()[0] as usize] = true;
            }
            first
        }
        let n = self.tokens.len();
        let null = LLAMA_TOKEN_NULL;

        // newline token (special-token cache still empty, as upstream at this point)
        if self.vocab_type == VOCAB_TYPE_SPM {
            self.ids.nl = self.byte_to_token(b'\n').unwrap_or_else(|| {
                crate::log_warn!("Vocab::from_gguf: SPM vocabulary, but newline token not found! Using special_pad_id instead.");
                self.ids.pad
            });
        } else {
            let mut nl = Vec::new();
            self.tokenize(b"\n", false, false, &mut nl);
            self.ids.nl = match nl.first() {
                Some(&t) => t,
                None => {
                    crate::log_warn!("Vocab::from_gguf: model vocab missing newline token, using special_pad_id instead");
                    self.ids.pad
                }
            };
        }

        // special token ids from the file
        {
            const KEYS: [&str; 17] = [
                "tokenizer.ggml.bos_token_id",
                "tokenizer.ggml.eos_token_id",
                "tokenizer.ggml.eot_token_id",
                "tokenizer.ggml.eom_token_id",
                "tokenizer.ggml.unknown_token_id",
                "tokenizer.ggml.seperator_token_id",
                "tokenizer.ggml.padding_token_id",
                "tokenizer.ggml.mask_token_id",
                "tokenizer.ggml.fim_pre_token_id",
                "tokenizer.ggml.fim_suf_token_id",
                "tokenizer.ggml.fim_mid_token_id",
                "tokenizer.ggml.fim_pad_token_id",
                "tokenizer.ggml.fim_rep_token_id",
                "tokenizer.ggml.fim_sep_token_id",
                // deprecated names, read after (and so overriding) the new ones
                "tokenizer.ggml.prefix_token_id",
                "tokenizer.ggml.suffix_token_id",
                "tokenizer.ggml.middle_token_id",
            ];
            for (k, key) in KEYS.iter().enumerate() {
                let ids = &mut self.ids;
                let id: &mut i32 = match k {
                    0 => &mut ids.bos,
                    1 => &mut ids.eos,
                    2 => &mut ids.eot,
                    3 => &mut ids.eom,
                    4 => &mut ids.unk,
                    5 => &mut ids.sep,
                    6 => &mut ids.pad,
                    7 => &mut ids.mask,
                    8 | 14 => &mut ids.fim_pre,
                    9 | 15 => &mut ids.fim_suf,
                    10 | 16 => &mut ids.fim_mid,
                    11 => &mut ids.fim_pad,
                    12 => &mut ids.fim_rep,
                    _ => &mut ids.fim_sep,
                };
                if *id >= 0 && *id as usize >= n {
                    crate::log_warn!("Vocab::from_gguf: default special token '{}' = {} out of vocab range, disabling", key, *id);
                    *id = null;
                }
                if let Some(new_id) = key_u32(f, key)? {
                    if new_id as usize >= n {
                        crate::log_warn!("Vocab::from_gguf: bad special token: '{}' = {}, using default id {}", key, new_id, *id);
                    } else {
                        *id = new_id as i32;
                    }
                }
            }
        }
        if let Some(v) = key_bool(f, "tokenizer.ggml.add_bos_token")? {
            self.flags.add_bos = v;
        }
        if let Some(v) = key_bool(f, "tokenizer.ggml.add_eos_token")? {
            self.flags.add_eos = v;
        }
        if let Some(v) = key_bool(f, "tokenizer.ggml.add_sep_token")? {
            self.flags.add_sep = v;
        }

        // auto-detect special tokens by text, walking token_to_id in libstdc++'s order
        let order = {
            let texts: Vec<&[u8]> = self.tokens.iter().map(|t| t.text.as_bytes()).collect();
            stdcompat::unordered_map_order(&texts)
        };
        {
            const EOT: &[&str] = &[
                "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>", "<EOT>", "_<EOT>",
                "[EOT]", "<｜end▁of▁sentence｜>", "<end_of_utterance>",
            ];
            const EOM: &[&str] = &["<|eom_id|>"];
            const FIM_PRE: &[&str] = &[
                "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>", "<|code_prefix|>", "<|prefix|>",
            ];
            const FIM_SUF: &[&str] = &[
                "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>", "<|code_suffix|>", "<|suffix|>",
            ];
            const FIM_MID: &[&str] = &[
                "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>", "<|code_middle|>", "<|middle|>",
            ];
            const FIM_PAD: &[&str] = &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"];
            const FIM_REP: &[&str] = &["<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"];
            const FIM_SEP: &[&str] = &["<|file_sep|>"];
            // (a token whose first byte starts none of the names matches none: most of a
            // 150k-token vocabulary is skipped without comparing it to each name)
            let first = first_bytes(&[EOT, EOM, FIM_PRE, FIM_SUF, FIM_MID, FIM_PAD, FIM_REP, FIM_SEP]);
            let ids = &mut self.ids;
            for &i in &order {
                let tok = &mut self.tokens[i];
                if !tok.text.as_bytes().first().is_some_and(|&b| first[b as usize]) {
                    continue;
                }
                let slots: [(&mut i32, &[&str]); 8] = [
                    (&mut ids.eot, EOT),
                    (&mut ids.eom, EOM),
                    (&mut ids.fim_pre, FIM_PRE),
                    (&mut ids.fim_suf, FIM_SUF),
                    (&mut ids.fim_mid, FIM_MID),
                    (&mut ids.fim_pad, FIM_PAD),
                    (&mut ids.fim_rep, FIM_REP),
                    (&mut ids.fim_sep, FIM_SEP),
                ];
                for (slot, names) in slots {
                    if *slot == null && names.contains(&tok.text.as_str()) {
                        *slot = i as i32;
                        force_control(tok, i);
                    }
                }
            }
        }

        // control tokens whose text says "unused" are unused
        for tok in &mut self.tokens {
            if tok.attr & ATTR_CONTROL != 0 && tok.attr & ATTR_UNUSED == 0 && tok.text.contains("unused") {
                tok.attr |= ATTR_UNUSED;
            }
        }

        // end-of-generation set
        {
            const EOG: &[&str] = &[
                "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "<end_of_turn>",
                "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
                "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>", "<｜end▁of▁sentence｜>", "[e~[",
            ];
            let ids = self.ids;
            let eog = &mut self.eog;
            for id in [ids.fim_pad, ids.fim_rep, ids.fim_sep] {
                if id != null {
                    eog.insert(id);
                }
            }
            let first = first_bytes(&[EOG]);
            for &i in &order {
                let tok = &mut self.tokens[i];
                if tok.text.as_bytes().first().is_some_and(|&b| first[b as usize]) && EOG.contains(&tok.text.as_str()) {
                    eog.insert(i as i32);
                    force_control(tok, i);
                }
            }
            // gpt-oss: always render these
            for (i, tok) in self.tokens.iter_mut().enumerate() {
                if matches!(tok.text.as_str(), "<|channel|>" | "<|message|>" | "<|start|>" | "<|constrain|>") {
                    crate::log_warn!(
                        "Vocab::from_gguf: setting token '{}' ({}) attribute to USER_DEFINED ({}), old attributes: {}",
                        tok.text, i, ATTR_USER_DEFINED, tok.attr
                    );
                    tok.attr = ATTR_USER_DEFINED;
                }
            }
            for (id, what) in [(ids.eos, "special_eos_id"), (ids.eot, "special_eot_id"), (ids.eom, "special_eom_id")] {
                if id != null && eog.insert(id) {
                    crate::log_warn!("Vocab::from_gguf: {} is not in special_eog_ids - the tokenizer config may be incorrect", what);
                }
            }
            // o200k_harmony / solar-open: "<|end|>" is not EOG when "<|return|>" and "<|call|>" (or "<|calls|>"
            // and "<|flush|>") are
            let (mut has_return, mut has_call, mut has_end, mut has_flush, mut end_id) = (false, false, false, false, null);
            for &id in eog.iter() {
                let Some(tok) = self.tokens.get(id as usize) else {
                    crate::log_warn!("Vocab::from_gguf: EOG token id {} is out of range (vocab size {}), skipping", id, n);
                    continue;
                };
                match tok.text.as_str() {
                    "<|return|>" => has_return = true,
                    "<|call|>" | "<|calls|>" => has_call = true,
                    "<|flush|>" => has_flush = true,
                    "<|end|>" => {
                        has_end = true;
                        end_id = id;
                    }
                    _ => {}
                }
            }
            if (has_return && has_call && has_end) || (has_call && has_flush && has_end) {
                eog.remove(&end_id);
                self.tokens[end_id as usize].attr = ATTR_USER_DEFINED;
                crate::log_warn!("Vocab::from_gguf: removing '<|end|>' token from EOG list");
            }
            // gemma4 and plamo have a normal </s> token
            let (mut has_marker, mut s_id) = (false, null);
            for &id in eog.iter() {
                match self.tokens.get(id as usize).map(|t| t.text.as_str()) {
                    Some("<|tool_response>" | "<|plamo:eos|>") => has_marker = true,
                    Some("</s>") => s_id = id,
                    _ => {}
                }
            }
            if has_marker && s_id != null {
                eog.remove(&s_id);
                self.tokens[s_id as usize].attr = ATTR_NORMAL;
                crate::log_warn!("Vocab::from_gguf: '</s>' is a normal token here, removing it from EOG list");
            }
        }

        // special tokens cache, longest first (std::sort: ties in libstdc++'s order)
        let mut cache: Vec<i32> = (0..n as i32)
            .filter(|&id| self.tokens[id as usize].attr & (ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN) != 0)
            .collect();
        let tokens = &self.tokens;
        stdcompat::std_sort(&mut cache, &|a: &i32, b: &i32| tokens[*a as usize].text.len() > tokens[*b as usize].text.len());
        let mut trie = SpecialTrie::new();
        for &id in &cache {
            trie.insert(self.tokens[id as usize].text.as_bytes(), id);
        }
        self.special_cache = cache;
        self.special_trie = trie;

        // token → piece cache
        self.pieces = (0..n).map(|id| self.piece_uncached(id).into_boxed_slice()).collect();

        // per-model token attributes (lstrip/rstrip)
        let model = key_str(f, "general.name")?.unwrap_or("").to_ascii_lowercase();
        let arch = key_str(f, "general.architecture")?.unwrap_or("");
        let pre = self.pre_name.as_str();
        let any = |s: &str, subs: &[&str]| subs.iter().any(|x| s.contains(x));
        if any(pre, &["jina-v2-de", "jina-v2-es", "jina-v2-code"]) || any(arch, &["nomic-bert-moe", "jina-bert-v3"]) {
            match self.token_to_id.get(&b"<mask>"[..]) {
                Some(&id) => self.tokens[id as usize].attr |= ATTR_LSTRIP,
                None => crate::log_warn!("Vocab::from_gguf: Mask token is missing in vocab, please reconvert model!"),
            }
        } else if any(&model, &["phi-3", "phi3"]) {
            for i in 0..self.special_cache.len() {
                let id = self.special_cache[i] as usize;
                self.tokens[id].attr |= ATTR_RSTRIP;
            }
            let set = |v: &mut Vocab, text: &str, on: bool| -> Result<(), String> {
                let id = *v.token_to_id.get(text.as_bytes()).ok_or_else(|| format!("token '{text}' not in vocabulary"))?;
                let a = &mut v.tokens[id as usize].attr;
                *a = if on { *a | ATTR_RSTRIP } else { *a & !ATTR_RSTRIP };
                Ok(())
            };
            set(self, "</s>", true)?;
            for t in ["<unk>", "<s>", "<|endoftext|>"] {
                set(self, t, false)?;
            }
        } else if model.contains("modern-bert") {
            match self.token_to_id.get(&b"[MASK]"[..]) {
                Some(&id) => self.tokens[id as usize].attr |= ATTR_LSTRIP,
                None => crate::log_warn!("Vocab::from_gguf: Mask token missing in vocab!"),
            }
        }
        Ok(())
    }

    // ---- accessors ----

    pub fn n_tokens(&self) -> usize {
        self.tokens.len()
    }
    /// `enum llama_vocab_type`: 0 NONE, 1 SPM, 2 BPE.
    pub fn vocab_type(&self) -> i32 {
        self.vocab_type
    }
    /// `tokenizer.ggml.model`
    pub fn model_name(&self) -> &str {
        &self.model_name
    }
    /// `tokenizer.ggml.pre` (or the override given at load; "" when absent).
    pub fn pre_name(&self) -> &str {
        &self.pre_name
    }
    pub fn n_merges(&self) -> usize {
        self.bpe.as_ref().map_or(0, |b| b.n_merges())
    }
    pub fn token_text(&self, id: i32) -> Option<&str> {
        self.token(id).map(|t| t.text.as_str())
    }
    pub fn token_score(&self, id: i32) -> f32 {
        self.token(id).map_or(0.0, |t| t.score)
    }
    /// `llama_token_attr` bits (0 for an id out of range).
    pub fn token_attr(&self, id: i32) -> u32 {
        self.token(id).map_or(ATTR_UNDEFINED, |t| t.attr)
    }
    /// The id whose text is exactly `text`.
    pub fn text_to_token(&self, text: &[u8]) -> Option<i32> {
        self.token_to_id.get(text).copied()
    }
    pub fn is_eog(&self, id: i32) -> bool {
        id != LLAMA_TOKEN_NULL && self.eog.contains(&id)
    }
    pub fn is_control(&self, id: i32) -> bool {
        self.token_attr(id) & ATTR_CONTROL != 0
    }
    /// The end-of-generation ids, ascending.
    pub fn eog_ids(&self) -> impl Iterator<Item = i32> + '_ {
        self.eog.iter().copied()
    }
    pub fn bos(&self) -> i32 {
        self.ids.bos
    }
    pub fn eos(&self) -> i32 {
        self.ids.eos
    }
    pub fn eot(&self) -> i32 {
        self.ids.eot
    }
    pub fn eom(&self) -> i32 {
        self.ids.eom
    }
    pub fn unk(&self) -> i32 {
        self.ids.unk
    }
    pub fn sep(&self) -> i32 {
        self.ids.sep
    }
    pub fn nl(&self) -> i32 {
        self.ids.nl
    }
    pub fn pad(&self) -> i32 {
        self.ids.pad
    }
    pub fn mask(&self) -> i32 {
        self.ids.mask
    }
    pub fn fim_pre(&self) -> i32 {
        self.ids.fim_pre
    }
    pub fn fim_suf(&self) -> i32 {
        self.ids.fim_suf
    }
    pub fn fim_mid(&self) -> i32 {
        self.ids.fim_mid
    }
    pub fn fim_pad(&self) -> i32 {
        self.ids.fim_pad
    }
    pub fn fim_rep(&self) -> i32 {
        self.ids.fim_rep
    }
    pub fn fim_sep(&self) -> i32 {
        self.ids.fim_sep
    }
    pub fn add_bos(&self) -> bool {
        self.flags.add_bos
    }
    pub fn add_eos(&self) -> bool {
        self.flags.add_eos
    }
    pub fn add_sep(&self) -> bool {
        self.flags.add_sep
    }
    pub fn add_space_prefix(&self) -> bool {
        self.flags.add_space_prefix
    }
    pub fn clean_spaces(&self) -> bool {
        self.flags.clean_spaces
    }
    pub fn ignore_merges(&self) -> bool {
        self.flags.ignore_merges
    }
    pub fn remove_extra_whitespaces(&self) -> bool {
        self.flags.remove_extra_whitespaces
    }

    fn token(&self, id: i32) -> Option<&TokenData> {
        if id < 0 {
            None
        } else {
            self.tokens.get(id as usize)
        }
    }

    // ---- tokenization ----

    /// `llama_tokenize`: replaces the contents of `out` with the ids of `text`. `add_special`
    /// adds BOS/EOS as the vocabulary asks; `parse_special` lets control tokens written in the
    /// text be recognised (user-defined tokens always are). Invalid UTF-8 is read as U+FFFD per
    /// bad byte, like upstream.
    pub fn tokenize(&self, text: &[u8], add_special: bool, parse_special: bool, out: &mut Vec<i32>) {
        out.clear();
        if self.vocab_type == VOCAB_TYPE_NONE {
            crate::log_error!("Vocab::tokenize: vocabulary type NONE cannot tokenize");
            return;
        }
        let frags = self.partition(text, parse_special);
        match self.vocab_type {
            VOCAB_TYPE_BPE => {
                if add_special && self.flags.add_bos {
                    self.push_required(self.ids.bos, "BOS", out);
                }
                let mut s = BpeScratch::default();
                for frag in &frags {
                    match *frag {
                        Fragment::Text(off, len) => self.tokenize_bpe(&text[off..off + len], &mut s, out),
                        Fragment::Token(id) => out.push(id),
                    }
                }
                if add_special {
                    if self.flags.add_eos {
                        self.push_required(self.ids.eos, "EOS", out);
                    }
                    self.check_double_bos_eos(out);
                }
            }
            VOCAB_TYPE_SPM => {
                let mut is_prev_special = true;
                if add_special && self.flags.add_bos {
                    self.push_required(self.ids.bos, "BOS", out);
                }
                let mut buf = Vec::new();
                for frag in &frags {
                    match *frag {
                        Fragment::Text(off, len) => {
                            buf.clear();
                            if self.flags.add_space_prefix && is_prev_special {
                                buf.extend_from_slice("\u{2581}".as_bytes());
                            }
                            for &b in &text[off..off + len] {
                                if b == b' ' {
                                    buf.extend_from_slice("\u{2581}".as_bytes());
                                } else {
                                    buf.push(b);
                                }
                            }
                            self.tokenize_spm(&buf, out);
                            is_prev_special = false;
                        }
                        Fragment::Token(id) => {
                            out.push(id);
                            is_prev_special = true;
                        }
                    }
                }
                if add_special && self.flags.add_bos && out.len() >= 2 && out[1] == self.ids.bos {
                    crate::log_warn!(
                        "Vocab::tokenize: Added a BOS token to the prompt as specified by the model but the prompt also starts with a BOS token. So now the final prompt starts with 2 BOS tokens. Are you sure this is what you want?"
                    );
                }
                if add_special && self.flags.add_eos {
                    self.push_required(self.ids.eos, "EOS", out);
                }
            }
            _ => unreachable!(),
        }
    }

    fn push_required(&self, id: i32, what: &str, out: &mut Vec<i32>) {
        if id == LLAMA_TOKEN_NULL {
            // upstream: GGML_ASSERT aborts
            crate::log_error!("Vocab::tokenize: the vocabulary asks for a {} token but has none", what);
        } else {
            out.push(id);
        }
    }

    fn check_double_bos_eos(&self, out: &[i32]) {
        if self.flags.add_bos && out.len() >= 2 && out[1] == self.ids.bos {
            crate::log_warn!(
                "check_double_bos_eos: Added a BOS token to the prompt as specified by the model but the prompt also starts with a BOS token. So now the final prompt starts with 2 BOS tokens. Are you sure this is what you want?"
            );
        }
        if self.flags.add_eos && out.len() >= 2 && out[out.len() - 2] == self.ids.eos {
            crate::log_warn!(
                "check_double_bos_eos: Added a EOS token to the prompt as specified by the model but the prompt also ends with a EOS token. So now the final prompt ends with 2 EOS tokens. Are you sure this is what you want?"
            );
        }
    }

    /// `tokenizer_st_partition`: splits the text at occurrences of special tokens, one token at a
    /// time in `special_cache` order (longest first), each splitting the text pieces left by the
    /// previous ones at its leftmost non-overlapping occurrences. LSTRIP/RSTRIP tokens eat the
    /// whitespace before/after them. Without `parse_special`, CONTROL and UNKNOWN tokens are not
    /// matched (USER_DEFINED ones still are).
    fn partition(&self, text: &[u8], parse_special: bool) -> Vec<Fragment> {
        let mut frags = Vec::new();
        if text.is_empty() {
            return frags;
        }
        frags.push(Fragment::Text(0, text.len()));
        if self.special_cache.is_empty() {
            return frags;
        }
        let occ = self.special_trie.occurrences(text);
        if occ.is_empty() {
            return frags;
        }
        let mut next = Vec::new();
        for &id in &self.special_cache {
            let Some(positions) = occ.get(&id) else { continue };
            let data = &self.tokens[id as usize];
            if !parse_special && data.attr & (ATTR_CONTROL | ATTR_UNKNOWN) != 0 {
                continue;
            }
            let tlen = data.text.len();
            next.clear();
            for &frag in &frags {
                let Fragment::Text(off, len) = frag else {
                    next.push(frag);
                    continue;
                };
                let (mut base, mut blen) = (off, len);
                loop {
                    let i = positions.partition_point(|&p| p < base);
                    let Some(&m) = positions.get(i).filter(|&&m| m + tlen <= base + blen) else {
                        if blen > 0 {
                            next.push(Fragment::Text(base, blen));
                        }
                        break;
                    };
                    if m > base {
                        let mut left = m - base;
                        if data.attr & ATTR_LSTRIP != 0 {
                            while left > 0 && c_isspace(text[base + left - 1]) {
                                left -= 1;
                            }
                        }
                        if left > 0 {
                            next.push(Fragment::Text(base, left));
                        }
                    }
                    next.push(Fragment::Token(id));
                    if m + tlen < base + blen {
                        let mut r_off = m + tlen;
                        let mut r_len = blen - (m - base) - tlen;
                        if data.attr & ATTR_RSTRIP != 0 {
                            while r_len > 0 && c_isspace(text[r_off]) {
                                r_off += 1;
                                r_len -= 1;
                            }
                        }
                        base = r_off;
                        blen = r_len;
                    } else {
                        blen = 0;
                    }
                }
            }
            std::mem::swap(&mut frags, &mut next);
        }
        frags
    }

    /// Byte-level BPE of one raw-text fragment (`llm_tokenizer_bpe_session::tokenize`).
    fn tokenize_bpe(&self, text: &[u8], s: &mut BpeScratch, out: &mut Vec<i32>) {
        let Some(bpe) = &self.bpe else { return };
        unicode::decode_utf8(text, &mut s.cpts);
        let words = pretok::split(&s.cpts, self.pre_steps);
        let mut start = 0;
        for len in words {
            s.word.clear();
            for &c in &s.cpts[start..start + len] {
                unicode::encode_utf8(c, &mut s.word);
            }
            start += len;
            if self.flags.ignore_merges {
                s.encoded.clear();
                for &b in &s.word {
                    unicode::encode_utf8(unicode::BYTE_TO_CPT[b as usize], &mut s.encoded);
                }
                if let Some(&id) = self.token_to_id.get(&s.encoded[..]) {
                    out.push(id);
                    continue;
                }
            }
            bpe.encode_word(&s.word, &mut s.bpe, out);
        }
    }

    /// `byte_to_token` for SPM: `<0xXX>`, else the one-byte token.
    fn byte_to_token(&self, b: u8) -> Option<i32> {
        let hex = format!("<0x{b:02X}>");
        self.token_to_id.get(hex.as_bytes()).or_else(|| self.token_to_id.get(&[b][..])).copied()
    }

    /// `llm_tokenizer_spm_session::tokenize` on whitespace-escaped text.
    fn tokenize_spm(&self, text: &[u8], out: &mut Vec<i32>) {
        #[derive(Clone, Copy)]
        struct Sym {
            start: usize,
            n: usize,
            prev: i32,
            next: i32,
        }
        #[derive(PartialEq)]
        struct Bigram {
            score: f32,
            left: i32,
            right: i32,
            size: usize,
        }
        impl Eq for Bigram {}
        impl PartialOrd for Bigram {
            fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
                Some(self.cmp(o))
            }
        }
        impl Ord for Bigram {
            // max-heap: higher score first, then lower left
            fn cmp(&self, o: &Self) -> std::cmp::Ordering {
                if self.score < o.score || (self.score == o.score && self.left > o.left) {
                    std::cmp::Ordering::Less
                } else if o.score < self.score || (o.score == self.score && o.left > self.left) {
                    std::cmp::Ordering::Greater
                } else {
                    std::cmp::Ordering::Equal
                }
            }
        }
        let mut syms: Vec<Sym> = Vec::new();
        let mut offs = 0;
        while offs < text.len() {
            const LEN: [usize; 16] = [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4];
            let n = LEN[(text[offs] >> 4) as usize].min(text.len() - offs);
            let idx = syms.len() as i32;
            syms.push(Sym { start: offs, n, prev: idx - 1, next: if offs + n == text.len() { -1 } else { idx + 1 } });
            offs += n;
        }
        let mut queue = BinaryHeap::new();
        let mut rev_merge: HashMap<Vec<u8>, (i32, i32)> = HashMap::new();
        let try_add = |syms: &[Sym], queue: &mut BinaryHeap<Bigram>, rev: &mut HashMap<Vec<u8>, (i32, i32)>, l: i32, r: i32| {
            if l < 0 || r < 0 {
                return;
            }
            let (ls, rs) = (syms[l as usize], syms[r as usize]);
            let piece = &text[ls.start..ls.start + ls.n + rs.n];
            let Some(&tok) = self.token_to_id.get(piece) else { return };
            queue.push(Bigram { score: self.tokens[tok as usize].score, left: l, right: r, size: piece.len() });
            rev.insert(piece.to_vec(), (l, r));
        };
        for i in 1..syms.len() as i32 {
            try_add(&syms, &mut queue, &mut rev_merge, i - 1, i);
        }
        while let Some(b) = queue.pop() {
            let (l, r) = (b.left as usize, b.right as usize);
            if syms[l].n == 0 || syms[r].n == 0 || syms[l].n + syms[r].n != b.size {
                continue;
            }
            syms[l].n += syms[r].n;
            syms[r].n = 0;
            syms[l].next = syms[r].next;
            let rn = syms[r].next;
            if rn >= 0 {
                syms[rn as usize].prev = b.left;
            }
            let (lp, ln) = (syms[l].prev, syms[l].next);
            try_add(&syms, &mut queue, &mut rev_merge, lp, b.left);
            try_add(&syms, &mut queue, &mut rev_merge, b.left, ln);
        }
        fn resegment(v: &Vocab, text: &[u8], syms: &[Sym], rev: &HashMap<Vec<u8>, (i32, i32)>, s: Sym, depth: usize, out: &mut Vec<i32>) {
            let piece = &text[s.start..s.start + s.n];
            if let Some(&tok) = v.token_to_id.get(piece) {
                out.push(tok);
                return;
            }
            match rev.get(piece) {
                Some(&(l, r)) if depth < 64 => {
                    resegment(v, text, syms, rev, syms[l as usize], depth + 1, out);
                    resegment(v, text, syms, rev, syms[r as usize], depth + 1, out);
                }
                _ => {
                    for &b in piece {
                        match v.byte_to_token(b) {
                            Some(t) => out.push(t),
                            None => crate::log_error!("Vocab::tokenize: no token for byte 0x{:02X}", b),
                        }
                    }
                }
            }
        }
        let mut i = if syms.is_empty() { -1 } else { 0 };
        while i >= 0 {
            let s = syms[i as usize];
            resegment(self, text, &syms, &rev_merge, s, 0, out);
            i = s.next;
        }
    }

    // ---- detokenization ----

    /// The piece of a token as upstream computes it for its cache (`special = true`).
    fn piece_uncached(&self, id: usize) -> Vec<u8> {
        let tok = &self.tokens[id];
        let attr = tok.attr;
        if attr & (ATTR_UNKNOWN | ATTR_CONTROL | ATTR_USER_DEFINED) != 0 {
            return tok.text.as_bytes().to_vec();
        }
        if attr & ATTR_NORMAL != 0 {
            if self.vocab_type == VOCAB_TYPE_SPM || self.flags.escape_whitespaces {
                return tok.text.replace('\u{2581}', " ").into_bytes();
            }
            return decode_text(&tok.text);
        }
        if attr & ATTR_BYTE != 0 {
            return vec![token_to_byte(&tok.text)];
        }
        Vec::new()
    }

    /// Token `id`'s cached piece with special tokens rendered (upstream's `token_to_piece(id)`,
    /// what grammars match); empty for an id out of range.
    pub fn piece(&self, id: i32) -> &[u8] {
        usize::try_from(id).ok().and_then(|i| self.pieces.get(i)).map_or(&[], |p| &p[..])
    }

    /// The trie of every token's piece as grammars see it: the C string of `piece` (up to its
    /// first NUL), end-of-generation tokens and empty pieces left out. Built on first use (a few
    /// tens of milliseconds for 150k tokens), shared by every grammar sampler on this model.
    pub fn grammar_trie(&self) -> &piece_trie::PieceTrie {
        self.grammar_trie.get_or_init(|| {
            piece_trie::PieceTrie::build((0..self.pieces.len() as i32).filter(|&id| !self.is_eog(id)).map(|id| {
                let p = &self.pieces[id as usize][..];
                (id, &p[..p.iter().position(|&b| b == 0).unwrap_or(p.len())])
            }))
        })
    }

    /// `llama_token_to_piece`: appends to `out` (cleared first) the bytes of token `id`: nothing for
    /// CONTROL/UNKNOWN tokens unless `special`; up to `lstrip` leading spaces skipped. An id out of
    /// range gives an empty piece (upstream aborts).
    pub fn token_to_piece(&self, id: i32, lstrip: i32, special: bool, out: &mut Vec<u8>) {
        out.clear();
        self.append_piece(id, lstrip, special, out);
    }

    /// A token's text as chat templates are given it (`bos_token`, `eos_token`): its piece with
    /// special tokens written out; empty for none (`id` < 0).
    pub fn template_text(&self, id: i32) -> String {
        if id < 0 {
            return String::new();
        }
        let mut out = Vec::new();
        self.token_to_piece(id, 0, true, &mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    fn append_piece(&self, id: i32, lstrip: i32, special: bool, out: &mut Vec<u8>) {
        let Some(tok) = self.token(id) else {
            if self.vocab_type != VOCAB_TYPE_NONE {
                crate::log_error!("Vocab::token_to_piece: invalid token id {}", id);
            }
            return;
        };
        if !special && tok.attr & (ATTR_UNKNOWN | ATTR_CONTROL) != 0 {
            return;
        }
        let Some(mut piece) = self.pieces.get(id as usize).map(|p| &p[..]) else { return };
        let mut i = 0;
        while i < lstrip && piece.first() == Some(&b' ') {
            piece = &piece[1..];
            i += 1;
        }
        out.extend_from_slice(piece);
    }

    /// `llama_detokenize`: replaces `out` with the text of `ids`. `remove_special` drops a leading
    /// BOS / trailing EOS when the vocabulary adds them; `unparse_special` renders control tokens.
    /// Returns the length before the clean-up of spaces (see the module docs for how the C layer
    /// uses it); `out` holds the cleaned text.
    pub fn detokenize(&self, ids: &[i32], remove_special: bool, unparse_special: bool, out: &mut Vec<u8>) -> usize {
        out.clear();
        if self.vocab_type == VOCAB_TYPE_NONE {
            return 0;
        }
        let mut ids = ids;
        let mut remove_space = self.flags.add_space_prefix;
        if remove_special && self.flags.add_bos && ids.first() == Some(&self.ids.bos) {
            remove_space = false;
            ids = &ids[1..];
        }
        if remove_special && self.flags.add_eos && ids.last() == Some(&self.ids.eos) {
            ids = &ids[..ids.len() - 1];
        }
        for &id in ids {
            self.append_piece(id, remove_space as i32, unparse_special, out);
            remove_space = false;
        }
        let raw = out.len();
        if self.flags.clean_spaces {
            clean_up_spaces(out);
        }
        raw
    }
}

/// Per-call buffers of BPE tokenization.
#[derive(Default)]
struct BpeScratch {
    cpts: Vec<u32>,
    word: Vec<u8>,
    encoded: Vec<u8>,
    bpe: bpe::Scratch,
}

fn force_control(tok: &mut TokenData, id: usize) {
    if tok.attr & ATTR_CONTROL == 0 {
        crate::log_warn!(
            "Vocab::from_gguf: control-looking token: {:6} '{}' was not control-type; this is probably a bug in the model. its type will be overridden",
            id, tok.text
        );
        tok.attr |= ATTR_CONTROL;
    }
}

/// `llama_decode_text`: GPT-2 byte-level text back to bytes; a codepoint outside the byte map
/// becomes `[UNK_BYTE_0x<its utf-8 in hex><the whole token text>]`, as upstream.
fn decode_text(text: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    for c in text.chars() {
        match unicode::cpt_to_byte(c as u32) {
            Some(b) => out.push(b),
            None => {
                out.extend_from_slice(b"[UNK_BYTE_0x");
                let mut u = [0u8; 4];
                for b in c.encode_utf8(&mut u).bytes() {
                    out.extend_from_slice(format!("{b:02x}").as_bytes());
                }
                out.extend_from_slice(text.as_bytes());
                out.push(b']');
            }
        }
    }
    out
}

/// `token_to_byte`: `strtol(text.substr(3, 2), NULL, 16)` of a `<0xXX>` token.
fn token_to_byte(text: &str) -> u8 {
    let t = text.as_bytes();
    let digits = &t[t.len().min(3)..t.len().min(5)];
    let mut v: u32 = 0;
    for &d in digits {
        match (d as char).to_digit(16) {
            Some(x) => v = v * 16 + x,
            None => break,
        }
    }
    v as u8
}

/// The clean-up of `clean_up_tokenization_spaces` (upstream's three passes, literally).
fn clean_up_spaces(text: &mut Vec<u8>) {
    let mut total = text.len();
    // first pass: " ?", " !", " .", " ,"
    let total1 = total;
    total = if total > 0 { 1 } else { 0 };
    for i in 1..total1 {
        let x = text[i];
        if text[i - 1] == b' ' && matches!(x, b'?' | b'!' | b'.' | b',') {
            total -= 1;
        }
        text[total] = x;
        total += 1;
    }
    // second pass: strip single apostrophe between spaces
    let total2 = total;
    total = if total > 0 { 1 } else { 0 };
    let mut i = 1;
    while i < total2 {
        let x = text[i];
        if x == b'\'' && i + 1 < total2 && text[i - 1] == b' ' && text[i + 1] == b' ' {
            total -= 1;
            i += 1;
            text[i] = 0;
        }
        text[total] = x;
        total += 1;
        i += 1;
    }
    // third pass: apostrophe contractions " 's", " 'm", " 're", " 've"
    let total3 = total;
    total = if total > 0 { 1 } else { 0 };
    for i in 1..total3 {
        let x = text[i];
        if text[i - 1] == b' ' && x == b'\'' && i + 1 < total3 {
            let x1 = text[i + 1];
            if x1 == b's' || x1 == b'm' {
                total -= 1;
            } else if x1 != b't' && x1 != b'd' && i + 2 < total3 {
                let x2 = text[i + 2];
                if (x1 == b'r' && x2 == b'e') || (x1 == b'v' && x2 == b'e') {
                    total -= 1;
                }
            }
        }
        text[total] = x;
        total += 1;
    }
    text.truncate(total);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vocab_is_send_sync() {
        fn check<T: Send + Sync>() {}
        check::<Vocab>();
    }

    #[test]
    fn clean_up_like_upstream() {
        let run = |s: &str| {
            let mut v = s.as_bytes().to_vec();
            clean_up_spaces(&mut v);
            String::from_utf8(v).unwrap()
        };
        assert_eq!(run("Hello , world !"), "Hello, world!");
        assert_eq!(run("it ' s"), "it's");
        assert_eq!(run("I 'm you 're we 've it 'll don 't"), "I'm you're we've it 'll don 't");
        assert_eq!(run(""), "");
    }

    #[test]
    fn decode_text_unknown_codepoint() {
        assert_eq!(decode_text("Ġhi"), b" hi");
        assert_eq!(decode_text("é"), vec![0xE9]);
        assert_eq!(decode_text("中"), b"[UNK_BYTE_0xe4b8ad\xe4\xb8\xad]".to_vec());
    }

    #[test]
    fn byte_token_text() {
        assert_eq!(token_to_byte("<0x0A>"), 10);
        assert_eq!(token_to_byte("<0xfF>"), 255);
    }
}
