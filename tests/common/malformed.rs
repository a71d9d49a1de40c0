//! The structured malformed-GGUF generator: from a valid model file, variants with one defect
//! each — truncations at every section boundary and inside every section, header bit flips,
//! huge counts, lengths, dims and offsets, wrong value and tensor types, misaligned and
//! overlapping tensor data, missing and duplicated keys and tensors, shapes inconsistent with
//! the hyper-parameters. Deterministic (seeded), so failures reproduce. Shared by
//! tests/malformed_gguf.rs (every variant) and tests/c_harness.rs (a sample under valgrind).

use std::ops::Range;

/// The models the generator starts from (relative to the crate) and how many variants it makes
/// of each: a qwen2 fixture, V2-Lite-style, V3-style, V3.2-style and V4-style DeepSeek seeds, an
/// IQ1_S qwen2 seed. tests/malformed_gguf.rs loads every variant and checks these counts, whose
/// sum docs/GUARANTEES.md's bad-input row states; tests/c_harness.rs samples all six under valgrind.
pub const FIXTURES: [(&str, usize); 6] = [
    ("tests/data/tiny/tiny-qwen2-q4_0.gguf", 2274),
    ("fuzz/corpus/gguf_model/deepseek2-lite-q8_0", 2767),
    ("fuzz/corpus/gguf_model/deepseek3-q4_1", 3101),
    ("fuzz/corpus/gguf_model/deepseek32-q8_0", 3638),
    ("fuzz/corpus/gguf_model/deepseek4-q8_0", 5993),
    ("fuzz/corpus/gguf_model/qwen2-iq1_s", 1537),
];

use deepseek::gguf::{GgufFile, GgufWriter};

/// Byte positions of a GGUF file's parts.
struct Layout {
    kvs: Vec<KvPos>,
    tensors: Vec<TensorPos>,
    header_end: usize,
    data_start: usize,
}

struct KvPos {
    range: Range<usize>,
    key_len_at: usize,
    type_at: usize,
    /// Where an array's element count is, for arrays.
    array_len_at: Option<usize>,
}

struct TensorPos {
    range: Range<usize>,
    n_dims_at: usize,
    dims_at: usize,
    n_dims: usize,
    type_at: usize,
    offset_at: usize,
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

fn scalar_size(ty: u32) -> usize {
    match ty {
        0 | 1 | 7 => 1,
        2 | 3 => 2,
        4..=6 => 4,
        10..=12 => 8,
        _ => panic!("not a scalar type {ty}"),
    }
}

/// Skips one value of type `ty` at `at`, returning the position after it.
fn skip_value(b: &[u8], at: usize, ty: u32) -> usize {
    match ty {
        8 => at + 8 + u64_at(b, at) as usize,
        9 => {
            let (ety, n) = (u32_at(b, at), u64_at(b, at + 4) as usize);
            let mut p = at + 12;
            if ety == 8 || ety == 9 {
                for _ in 0..n {
                    p = skip_value(b, p, ety);
                }
                p
            } else {
                p + n * scalar_size(ety)
            }
        }
        t => at + scalar_size(t),
    }
}

fn layout(b: &[u8]) -> Layout {
    let (n_tensors, n_kv) = (u64_at(b, 8) as usize, u64_at(b, 16) as usize);
    let mut p = 24;
    let mut kvs = Vec::new();
    for _ in 0..n_kv {
        let start = p;
        let key_len = u64_at(b, p) as usize;
        let type_at = p + 8 + key_len;
        let ty = u32_at(b, type_at);
        let end = skip_value(b, type_at + 4, ty);
        kvs.push(KvPos { range: start..end, key_len_at: start, type_at, array_len_at: (ty == 9).then_some(type_at + 8) });
        p = end;
    }
    let mut tensors = Vec::new();
    for _ in 0..n_tensors {
        let start = p;
        let n_dims_at = p + 8 + u64_at(b, p) as usize;
        let n_dims = u32_at(b, n_dims_at) as usize;
        let type_at = n_dims_at + 4 + 8 * n_dims;
        tensors.push(TensorPos { range: start..type_at + 12, n_dims_at, dims_at: n_dims_at + 4, n_dims, type_at, offset_at: type_at + 4 });
        p = type_at + 12;
    }
    let align = 32;
    Layout { kvs, tensors, header_end: p, data_start: p.div_ceil(align) * align }
}

fn with_u64(b: &[u8], at: usize, v: u64) -> Vec<u8> {
    let mut out = b.to_vec();
    out[at..at + 8].copy_from_slice(&v.to_le_bytes());
    out
}

fn with_u32(b: &[u8], at: usize, v: u32) -> Vec<u8> {
    let mut out = b.to_vec();
    out[at..at + 4].copy_from_slice(&v.to_le_bytes());
    out
}

/// The file rebuilt through the writer after `edit` (so the layout stays consistent).
fn rebuilt(f: &GgufFile, edit: impl FnOnce(&mut Vec<(String, deepseek::gguf::GgufValue)>, &mut Vec<(String, Vec<usize>, deepseek::quant::GgmlType, Vec<u8>)>)) -> Vec<u8> {
    let mut kvs: Vec<_> = f.kvs().to_vec();
    let mut tensors: Vec<_> = f.tensors().iter().map(|t| (t.name.clone(), t.dims.clone(), t.ty, f.tensor_data(t).to_vec())).collect();
    edit(&mut kvs, &mut tensors);
    let mut w = GgufWriter::new();
    for (k, v) in kvs {
        w.kv(&k, v);
    }
    for (n, d, ty, data) in tensors {
        w.tensor(&n, &d, ty, data);
    }
    w.to_bytes()
}

/// xorshift64*.
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n as u64) as usize
    }
}

/// Calls `add(name, bytes)` for each variant of `original`, one at a time (variants of a
/// large file are not all held in memory at once). Returns how many there were.
pub fn variants(original: &[u8], mut add: impl FnMut(String, Vec<u8>)) -> usize {
    let f = GgufFile::from_slice(original).expect("the original must be a valid GGUF");
    let l = layout(original);
    assert_eq!(l.data_start, f.data_offset, "layout walker disagrees with the reader");
    let mut count = 0usize;
    let mut add = |name: String, bytes: Vec<u8>| {
        count += 1;
        add(name, bytes)
    };
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);

    // Truncations at every boundary and inside every part.
    let mut cuts = vec![0, 2, 4, 6, 8, 12, 16, 20, 24, l.header_end, l.data_start, original.len() - 1];
    for kv in &l.kvs {
        cuts.extend([kv.range.start + 4, kv.type_at, kv.type_at + 2, (kv.range.start + kv.range.end) / 2, kv.range.end - 1]);
    }
    for t in &l.tensors {
        cuts.extend([t.range.start + 3, t.n_dims_at, t.dims_at + 4, t.type_at, t.offset_at + 4, t.range.end - 1]);
        let data = f.data_offset + u64_at(original, t.offset_at) as usize;
        cuts.extend([data + 1, data + 17]);
    }
    cuts.sort_unstable();
    cuts.dedup();
    for c in cuts.into_iter().filter(|&c| c < original.len()) {
        add(format!("truncated at {c}"), original[..c].to_vec());
    }
    // Every bit of the fixed header, and random bits of the metadata and tensor infos.
    for bit in 0..24 * 8 {
        let mut b = original.to_vec();
        b[bit / 8] ^= 1 << (bit % 8);
        add(format!("header bit {bit} flipped"), b);
    }
    for i in 0..200 {
        let at = 24 + rng.below(l.header_end - 24);
        let mut b = original.to_vec();
        b[at] ^= 1 << rng.below(8);
        add(format!("metadata bit flip {i} at {at}"), b);
    }
    // Huge and wrong counts.
    for v in [0, 1, u64::MAX, 1 << 32, 1 << 62, u64_at(original, 8) + 1] {
        add(format!("tensor count {v}"), with_u64(original, 8, v));
    }
    for v in [0, u64::MAX, 1 << 32, 1 << 62, u64_at(original, 16) + 1, u64_at(original, 16) - 1] {
        add(format!("kv count {v}"), with_u64(original, 16, v));
    }
    for (i, kv) in l.kvs.iter().enumerate() {
        for v in [u64::MAX, 1 << 40, original.len() as u64, u64_at(original, kv.key_len_at) + 1, 0] {
            add(format!("kv {i}: key length {v}"), with_u64(original, kv.key_len_at, v));
        }
        for ty in [0, 4, 6, 7, 8, 9, 10, 12, 13, u32::MAX] {
            if ty != u32_at(original, kv.type_at) {
                add(format!("kv {i}: value type {ty}"), with_u32(original, kv.type_at, ty));
            }
        }
        if let Some(at) = kv.array_len_at {
            for v in [u64::MAX, 1 << 33, u64_at(original, at) + 1, 0] {
                add(format!("kv {i}: array length {v}"), with_u64(original, at, v));
            }
            add(format!("kv {i}: array element type 13"), with_u32(original, at - 4, 13));
            add(format!("kv {i}: array of arrays"), with_u32(original, at - 4, 9));
        }
        // Duplicated key (bytes copied in place, count + 1).
        let mut b = with_u64(original, 16, u64_at(original, 16) + 1);
        let copy = original[kv.range.clone()].to_vec();
        b.splice(kv.range.end..kv.range.end, copy);
        add(format!("kv {i}: duplicated"), b);
    }
    for (i, t) in l.tensors.iter().enumerate() {
        for n in [0u32, 5, u32::MAX] {
            add(format!("tensor {i}: {n} dims"), with_u32(original, t.n_dims_at, n));
        }
        for d in 0..t.n_dims {
            for v in [0, u64::MAX, 1 << 32, 1 << 62, u64_at(original, t.dims_at + 8 * d) + 1] {
                add(format!("tensor {i}: dim {d} = {v}"), with_u64(original, t.dims_at + 8 * d, v));
            }
        }
        // unknown ids, and known ones of other sizes (the IQ / ternary / FP4 / 1-2-bit ids too)
        for ty in [4u32, 5, 13, 31, 36, 43, 99, u32::MAX, 0, 1, 8, 16, 19, 20, 23, 29, 34, 39, 40, 41, 42] {
            if ty != u32_at(original, t.type_at) {
                add(format!("tensor {i}: type {ty}"), with_u32(original, t.type_at, ty));
            }
        }
        let off = u64_at(original, t.offset_at);
        for v in [off + 1, off + 16, u64::MAX, (original.len() - f.data_offset) as u64, 0] {
            if v != off {
                add(format!("tensor {i}: data offset {v}"), with_u64(original, t.offset_at, v));
            }
        }
        if i > 0 {
            add(format!("tensor {i}: overlaps tensor {}", i - 1), with_u64(original, t.offset_at, u64_at(original, l.tensors[i - 1].offset_at)));
        }
        let mut b = with_u64(original, 8, u64_at(original, 8) + 1);
        let copy = original[t.range.clone()].to_vec();
        b.splice(t.range.end..t.range.end, copy);
        add(format!("tensor {i}: info duplicated"), b);
    }
    // Missing keys and tensors, and shapes that disagree with the hyper-parameters.
    for (i, (key, _)) in f.kvs().iter().enumerate() {
        add(format!("missing key {key}"), rebuilt(&f, |kvs, _| drop(kvs.remove(i))));
    }
    for (i, t) in f.tensors().iter().enumerate() {
        add(format!("missing tensor {}", t.name), rebuilt(&f, |_, ts| drop(ts.remove(i))));
        if t.dims.len() >= 2 && t.dims[0] != t.dims[1] {
            add(format!("tensor {}: dims swapped", t.name), rebuilt(&f, |_, ts| ts[i].1.swap(0, 1)));
        }
        let name = t.name.clone();
        add(format!("tensor {name}: one more row"), rebuilt(&f, |_, ts| {
            let (_, dims, ty, data) = &mut ts[i];
            let rows: usize = dims[1..].iter().product();
            let row_bytes = data.len() / rows.max(1);
            if dims.len() >= 2 {
                dims[1] += 1;
            } else {
                dims[0] += ty.block_len();
            }
            data.extend(std::iter::repeat_n(0u8, row_bytes.max(ty.row_bytes(ty.block_len()).unwrap_or(4))));
        }));
    }
    for (key, v) in f.kvs().iter().filter(|(k, _)| k.ends_with("_count") || k.ends_with("_length") || k.ends_with("_rank") || k.ends_with("dimension_count")) {
        let Some(n) = v.as_i64() else { continue };
        // 1 << 31 is beyond i32 (refused as such); 2^31 - 1 and 2^24 are in range, so only the
        // check against the rest of the file can refuse them
        for new in [n + 1, n * 2, 0, 1 << 31, (1 << 31) - 1, 1 << 24] {
            add(format!("{key} = {new}"), rebuilt(&f, |kvs, _| {
                let slot = kvs.iter_mut().find(|(k, _)| k == key).unwrap();
                slot.1 = deepseek::gguf::GgufValue::U32(new as u32);
            }));
        }
    }
    count
}
