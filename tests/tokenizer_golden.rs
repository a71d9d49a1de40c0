//! Tokenizer against llama.cpp b11312's own outputs (tests/data, copied from the shared fixtures):
//! - vocab/ggml-vocab-*.gguf.{inp,out}: llama.cpp's tokenizer test vectors (add_special = false,
//!   parse_special = false), read the way test-tokenizer-0 reads them;
//! - tokenize/*.jsonl: a corpus tokenized with (false, false) and (true, true), on the
//!   DeepSeek-R1-Distill-Qwen vocabulary with its own and three other pre-tokenizers;
//! - pieces/*.pieces.txt.gz: every token's piece with special = false and true;
//! - linear time on 1 MB runs of one character class.

use std::path::{Path, PathBuf};
use std::time::Instant;

use deepseek::gguf::GgufFile;
use deepseek::tokenizer::Vocab;

fn data(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(rel)
}

fn load(rel: &str, pre: Option<&str>) -> Vocab {
    let f = GgufFile::open(&data(rel), true).unwrap_or_else(|e| panic!("{rel}: {e}"));
    Vocab::from_gguf_with_pre(&f, pre).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn tokenize(v: &Vocab, text: &[u8], add_special: bool, parse_special: bool) -> Vec<i32> {
    let mut out = Vec::new();
    v.tokenize(text, add_special, parse_special, &mut out);
    out
}

// ---- llama.cpp's vocab tests ----

fn vocab_test(name: &str) {
    let v = load(&format!("vocab/{name}.gguf"), None);
    let inp = std::fs::read(data(&format!("vocab/{name}.gguf.inp"))).unwrap();
    let out = std::fs::read_to_string(data(&format!("vocab/{name}.gguf.out"))).unwrap();
    // test-tokenizer-0: texts separated by "\n__ggml_vocab_test__\n"
    let sep = b"\n__ggml_vocab_test__\n";
    let mut texts: Vec<&[u8]> = Vec::new();
    let mut pos = 0;
    while pos < inp.len() {
        match inp[pos..].windows(sep.len()).position(|w| w == sep) {
            Some(i) => {
                texts.push(&inp[pos..pos + i]);
                pos += i + sep.len();
            }
            None => {
                texts.push(&inp[pos..]);
                break;
            }
        }
    }
    let expected: Vec<Vec<i32>> =
        out.lines().map(|l| l.split_whitespace().map(|t| t.parse().unwrap()).collect()).collect();
    assert_eq!(texts.len(), expected.len(), "{name}: number of tests");
    let mut failures = Vec::new();
    for (text, want) in texts.iter().zip(&expected) {
        let got = tokenize(&v, text, false, false);
        if &got != want {
            failures.push(format!("{:?}\n   got  {:?}\n   want {:?}", String::from_utf8_lossy(text), got, want));
        }
    }
    eprintln!("{name}: {}/{} texts identical", texts.len() - failures.len(), texts.len());
    assert!(failures.is_empty(), "{name}: {} mismatches:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn vocab_deepseek_llm() {
    vocab_test("ggml-vocab-deepseek-llm");
}

#[test]
fn vocab_deepseek_coder() {
    vocab_test("ggml-vocab-deepseek-coder");
}

#[test]
fn vocab_qwen2() {
    vocab_test("ggml-vocab-qwen2");
}

#[test]
fn vocab_llama_bpe() {
    vocab_test("ggml-vocab-llama-bpe");
}

// ---- corpus jsonl ----

/// Minimal JSON for the fixture lines: an object of strings and integer arrays.
#[derive(Debug)]
enum Json {
    Str(String),
    Ints(Vec<i64>),
}

fn parse_line(line: &str) -> Vec<(String, Json)> {
    let b = line.as_bytes();
    let mut i = 0;
    let ws = |i: &mut usize| {
        while *i < b.len() && (b[*i] as char).is_ascii_whitespace() {
            *i += 1;
        }
    };
    let string = |i: &mut usize| -> String {
        assert_eq!(b[*i], b'"');
        *i += 1;
        let mut units: Vec<u16> = Vec::new();
        let mut out = String::new();
        let flush = |units: &mut Vec<u16>, out: &mut String| {
            out.push_str(&String::from_utf16(units).expect("lone surrogate in fixture"));
            units.clear();
        };
        loop {
            let c = b[*i];
            if c == b'"' {
                *i += 1;
                break;
            }
            if c == b'\\' {
                let e = b[*i + 1];
                *i += 2;
                if e == b'u' {
                    let h = std::str::from_utf8(&b[*i..*i + 4]).unwrap();
                    units.push(u16::from_str_radix(h, 16).unwrap());
                    *i += 4;
                    continue;
                }
                flush(&mut units, &mut out);
                out.push(match e {
                    b'n' => '\n',
                    b't' => '\t',
                    b'r' => '\r',
                    b'b' => '\u{8}',
                    b'f' => '\u{c}',
                    b'/' => '/',
                    b'\\' => '\\',
                    b'"' => '"',
                    _ => panic!("bad escape"),
                });
                continue;
            }
            flush(&mut units, &mut out);
            let len = match c {
                0..=0x7F => 1,
                0xC0..=0xDF => 2,
                0xE0..=0xEF => 3,
                _ => 4,
            };
            out.push_str(std::str::from_utf8(&b[*i..*i + len]).unwrap());
            *i += len;
        }
        flush(&mut units, &mut out);
        out
    };
    let mut fields = Vec::new();
    ws(&mut i);
    assert_eq!(b[i], b'{');
    i += 1;
    loop {
        ws(&mut i);
        if b[i] == b'}' {
            break;
        }
        let key = string(&mut i);
        ws(&mut i);
        assert_eq!(b[i], b':');
        i += 1;
        ws(&mut i);
        let val = if b[i] == b'"' {
            Json::Str(string(&mut i))
        } else {
            assert_eq!(b[i], b'[');
            i += 1;
            let mut v = Vec::new();
            loop {
                ws(&mut i);
                if b[i] == b']' {
                    i += 1;
                    break;
                }
                let s = i;
                while b[i] == b'-' || b[i].is_ascii_digit() {
                    i += 1;
                }
                v.push(line[s..i].parse().unwrap());
                ws(&mut i);
                if b[i] == b',' {
                    i += 1;
                }
            }
            Json::Ints(v)
        };
        fields.push((key, val));
        ws(&mut i);
        if b[i] == b',' {
            i += 1;
        }
    }
    fields
}

/// The R1 vocabulary file, or a variant of it written with our GGUF writer in which
/// `tokenizer.ggml.pre` holds `pre` (how upstream's fixtures for the other pre-tokenizers were made).
fn r1_vocab(pre: Option<&str>) -> Vocab {
    let Some(pre) = pre else { return load("vocab/deepseek-r1-qwen.gguf", None) };
    let f = GgufFile::open(&data("vocab/deepseek-r1-qwen.gguf"), true).unwrap();
    let mut w = deepseek::gguf::GgufWriter::new();
    for (k, v) in f.kvs() {
        w.kv(k, v.clone());
    }
    w.kv("tokenizer.ggml.pre", deepseek::gguf::GgufValue::Str(pre.to_string()));
    let variant = GgufFile::from_slice(&w.to_bytes()).unwrap();
    assert_eq!(variant.get_str("tokenizer.ggml.pre"), Some(pre));
    Vocab::from_gguf(&variant).unwrap_or_else(|e| panic!("{pre}: {e}"))
}

fn corpus_test(file: &str, pre: Option<&str>) {
    let v = r1_vocab(pre);
    let text = std::fs::read_to_string(data(&format!("tokenize/{file}"))).unwrap();
    let (mut n, mut failures) = (0, Vec::new());
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let fields = parse_line(line);
        let get = |k: &str| fields.iter().find(|f| f.0 == k).map(|f| &f.1).unwrap_or_else(|| panic!("no {k}"));
        let Json::Str(t) = get("text") else { panic!() };
        for (key, add, parse) in [("ids", false, false), ("ids_special", true, true)] {
            let Json::Ints(want) = get(key) else { panic!() };
            let want: Vec<i32> = want.iter().map(|&x| x as i32).collect();
            let got = tokenize(&v, t.as_bytes(), add, parse);
            n += 1;
            if got != want {
                failures.push(format!("{key} {:?}\n   got  {:?}\n   want {:?}", t, got, want));
            }
        }
    }
    eprintln!("{file}: {}/{} tokenizations identical", n - failures.len(), n);
    assert!(n > 0);
    assert!(failures.is_empty(), "{file}: {} mismatches:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn corpus_deepseek_r1_qwen() {
    corpus_test("deepseek-r1-qwen.jsonl", None);
}

#[test]
fn corpus_pre_deepseek_v3() {
    corpus_test("deepseek-r1-qwen-vocab.pre-deepseek-v3.jsonl", Some("deepseek-v3"));
}

#[test]
fn corpus_pre_deepseek_llm() {
    corpus_test("deepseek-r1-qwen-vocab.pre-deepseek-llm.jsonl", Some("deepseek-llm"));
}

#[test]
fn corpus_pre_deepseek_coder() {
    corpus_test("deepseek-r1-qwen-vocab.pre-deepseek-coder.jsonl", Some("deepseek-coder"));
}

// ---- pieces ----

fn unhex(s: &str) -> Vec<u8> {
    if s == "-" {
        return Vec::new();
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

fn pieces_test(vocab: &str, pieces: &str) {
    let v = load(vocab, None);
    let text = {
        use std::io::Read;
        let file = std::fs::File::open(data(&format!("pieces/{pieces}.gz"))).unwrap();
        let mut text = String::new();
        flate2::read::GzDecoder::new(file).read_to_string(&mut text).unwrap();
        text
    };
    let (mut n, mut failures) = (0usize, Vec::new());
    let mut buf = Vec::new();
    for line in text.lines() {
        let mut it = line.split(' ');
        let id: i32 = it.next().unwrap().parse().unwrap();
        let plain = unhex(it.next().unwrap());
        let special = unhex(it.next().unwrap());
        for (flag, want) in [(false, plain), (true, special)] {
            v.token_to_piece(id, 0, flag, &mut buf);
            n += 1;
            if buf != want && failures.len() < 20 {
                failures.push(format!("id {id} special={flag}: got {:?} want {:?}", buf, want));
            }
        }
    }
    assert_eq!(n, 2 * v.n_tokens(), "{pieces}: one line per token");
    eprintln!("{pieces}: {}/{} pieces identical", n - failures.len(), n);
    assert!(failures.is_empty(), "{pieces}:\n{}", failures.join("\n"));
}

#[test]
fn pieces_deepseek_r1_qwen() {
    pieces_test("vocab/deepseek-r1-qwen.gguf", "deepseek-r1-qwen.pieces.txt");
}

#[test]
fn pieces_deepseek_llm() {
    pieces_test("vocab/ggml-vocab-deepseek-llm.gguf", "deepseek-llm.pieces.txt");
}

#[test]
fn pieces_deepseek_coder() {
    pieces_test("vocab/ggml-vocab-deepseek-coder.gguf", "deepseek-coder.pieces.txt");
}

// ---- vocabulary metadata ----

#[test]
fn special_ids_and_flags() {
    let v = load("vocab/deepseek-r1-qwen.gguf", None);
    assert_eq!(v.vocab_type(), 2);
    assert_eq!(v.n_tokens(), 152064);
    assert_eq!(v.pre_name(), "deepseek-r1-qwen");
    assert_eq!((v.bos(), v.eos(), v.pad()), (151646, 151643, 151654));
    assert_eq!(v.eot(), 151643); // "<｜end▁of▁sentence｜>" by text
    assert_eq!((v.fim_pre(), v.fim_suf(), v.fim_mid()), (151659, 151661, 151660));
    assert_eq!((v.fim_pad(), v.fim_rep(), v.fim_sep()), (151662, 151663, 151664));
    assert_eq!(v.nl(), 198);
    assert!(v.add_bos() && !v.add_eos() && !v.add_sep());
    assert!(!v.clean_spaces());
    assert!(v.is_eog(151643) && v.is_eog(151662) && !v.is_eog(151646));
    assert!(v.is_control(151646));

    let c = load("vocab/ggml-vocab-deepseek-coder.gguf", None);
    assert_eq!((c.bos(), c.eos()), (32013, 32014));
    assert_eq!((c.fim_pre(), c.fim_suf(), c.fim_mid()), (32016, 32015, 32017));
    assert!(c.is_control(32015)); // user-defined in the file, made control by the auto-detection

    let l = load("vocab/ggml-vocab-llama-bpe.gguf", None);
    assert!(l.ignore_merges() && l.add_bos());
    // several EOT candidates: upstream keeps the first in its unordered_map's iteration order
    assert_eq!(l.eot(), 128009); // <|eot_id|>, not <|end_of_text|>
    assert!(l.is_eog(128001) && l.is_eog(128009));
    let q = load("vocab/ggml-vocab-qwen2.gguf", None);
    assert_eq!(q.eot(), 151645); // <|im_end|>, not <|endoftext|>
}

#[test]
fn detokenize_round_trip() {
    let v = load("vocab/deepseek-r1-qwen.gguf", None);
    let text = "Hello, world! 你好 <think>x</think>\n  done";
    let ids = tokenize(&v, text.as_bytes(), true, true);
    let mut out = Vec::new();
    v.detokenize(&ids, true, true, &mut out);
    assert_eq!(String::from_utf8(out.clone()).unwrap(), text);
    v.detokenize(&ids, false, false, &mut out);
    // BOS is a control token (not rendered without unparse_special); <think> is user-defined
    assert_eq!(String::from_utf8(out).unwrap(), text);
}

#[test]
fn unknown_pre_tokenizer_is_an_error() {
    let f = GgufFile::open(&data("vocab/deepseek-r1-qwen.gguf"), true).unwrap();
    let err = Vocab::from_gguf_with_pre(&f, Some("no-such-pre")).err().unwrap();
    assert!(err.contains("unknown pre-tokenizer type"), "{err}");
}

// ---- linear time ----

/// Tokenizing 1 MB of one character class must scale like 64 KB: 16× the input should take about
/// 16× the time (the splitters are linear, the merge loop O(n log n) like upstream's, and its heap
/// outgrowing the caches pushes the measured ratio to 20–40); anything quadratic would take 256×.
/// (256 KB vs 1 MB separates linear from quadratic by only 4× vs 16×, too close for a noisy
/// shared machine.)
fn scaling(cases: &[(&str, Option<&str>, &[(&str, &str)])]) {
    for &(vocab, pre, units) in cases {
        let v = load(vocab, pre);
        for &(uname, unit) in units {
            let time = |bytes: usize, reps: usize| {
                let text = unit.repeat(bytes / unit.len());
                (0..reps)
                    .map(|_| {
                        let t = Instant::now();
                        let ids = tokenize(&v, text.as_bytes(), false, false);
                        assert!(!ids.is_empty());
                        t.elapsed().as_secs_f64()
                    })
                    .fold(f64::INFINITY, f64::min)
            };
            let small = time(64 << 10, 5).max(1e-3);
            let big = time(1 << 20, 2);
            let ratio = big / small;
            let name = format!("{vocab} {}", pre.unwrap_or(""));
            eprintln!("{name:45} {uname:9} 64K {:7.1} ms  1M {:7.1} ms  ratio {:.1}", small * 1e3, big * 1e3, ratio);
            assert!(big < 5.0, "{name} {uname}: 1 MB took {big:.2} s");
            assert!(ratio < 80.0, "{name} {uname}: 16x the input took {ratio:.1}x the time");
        }
    }
}

const LETTERS: (&str, &str) = ("letters", "a");
const SPACES: (&str, &str) = ("spaces", " ");
const DIGITS: (&str, &str) = ("digits", "7");
const CJK: (&str, &str) = ("cjk", "中");
const PUNCT: (&str, &str) = ("punct", "!");
const NEWLINES: (&str, &str) = ("newlines", "\n");

#[test]
fn linear_time_on_long_runs() {
    scaling(&[
        ("vocab/deepseek-r1-qwen.gguf", None, &[LETTERS, SPACES, NEWLINES]),
        ("vocab/deepseek-r1-qwen.gguf", Some("deepseek-v3"), &[SPACES, PUNCT]),
        ("vocab/ggml-vocab-deepseek-llm.gguf", None, &[SPACES, CJK]),
        ("vocab/ggml-vocab-deepseek-coder.gguf", None, &[LETTERS]),
        ("vocab/ggml-vocab-llama-bpe.gguf", None, &[DIGITS]),
    ]);
}

/// Every pre-tokenizer × every class (slow: run with --ignored).
#[test]
#[ignore]
fn linear_time_on_long_runs_full() {
    let all: &[(&str, &str)] = &[LETTERS, SPACES, DIGITS, CJK, PUNCT, NEWLINES];
    scaling(&[
        ("vocab/deepseek-r1-qwen.gguf", None, all),
        ("vocab/deepseek-r1-qwen.gguf", Some("deepseek-v3"), all),
        ("vocab/deepseek-r1-qwen.gguf", Some("deepseek-llm"), all),
        ("vocab/deepseek-r1-qwen.gguf", Some("deepseek-coder"), all),
        ("vocab/ggml-vocab-deepseek-llm.gguf", None, all),
        ("vocab/ggml-vocab-deepseek-coder.gguf", None, all),
        ("vocab/ggml-vocab-llama-bpe.gguf", None, all),
        ("vocab/deepseek-r1-qwen.gguf", Some("default"), all),
        ("vocab/deepseek-r1-qwen.gguf", Some("smollm"), all),
        ("vocab/deepseek-r1-qwen.gguf", Some("gpt-2"), all),
    ]);
}
