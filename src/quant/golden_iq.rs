//! Bit-exact checks of the IQ, ternary, FP4 and 1/2-bit formats against llama.cpp b11312's own
//! ggml: `tests/data/quants/gen_ref.c` (build command in its header; scripts/regenerate-references.sh) links upstream's built
//! `libggml-base.so` / `libggml-cpu.so` and writes `tests/data/quants/ref_vectors.txt`, the
//! hashes of `to_float` (dequantize), of the `vec_dot_type`'s `from_float` and of `vec_dot`,
//! on inputs from the same xorshift RNG as here. That libggml-cpu runs these types' AVX2 kernels
//! (there are no AVX-512 ones; see gen_ref.c), which our scalar `vec_dot`s model: every output
//! must be equal bit for bit.

use super::test_util::{fnv1a, Rng};
use super::{dequantize_row, quantize_row, vec_dot, GgmlType};

const R: usize = 4;
const REF: &str = include_str!("../../tests/data/quants/ref_vectors.txt");

/// The scale fields of one weight block, as gen_ref.c's `fix_scales` sets them.
fn fix_scales(ty: GgmlType, rng: &mut Rng, b: &mut [u8]) {
    match ty {
        GgmlType::IQ1_M => {
            let h = rng.f16_bits(-10, -2, false);
            for i in 0..4 {
                b[49 + 2 * i] = (b[49 + 2 * i] & 0x0f) | ((((h >> (4 * i)) & 0xf) as u8) << 4);
            }
        }
        GgmlType::TQ1_0 => b[52..54].copy_from_slice(&rng.f16_bits(-10, -2, true).to_le_bytes()),
        GgmlType::TQ2_0 => b[64..66].copy_from_slice(&rng.f16_bits(-10, -2, true).to_le_bytes()),
        GgmlType::MXFP4 => b[0] = 118 + rng.below(12) as u8,
        GgmlType::NVFP4 => {
            for v in &mut b[..4] {
                *v = 0x08 + rng.below(0x70) as u8;
            }
        }
        _ => b[0..2].copy_from_slice(&rng.f16_bits(-10, -2, true).to_le_bytes()),
    }
}

/// Activation blocks of random quant bytes (with −128), as gen_ref.c's `random_act`.
fn random_act(vt: GgmlType, rng: &mut Rng, a: &mut [u8]) {
    for b in a.chunks_mut(vt.block_bytes()) {
        if vt == GgmlType::Q8K {
            let m = 1.0 + rng.below(1024) as f32 / 1024.0;
            let e = rng.below(8) as i32 - 12;
            b[0..4].copy_from_slice(&(m * 2f32.powi(e)).to_le_bytes());
            rng.fill_bytes(&mut b[4..260]);
            for g in 0..16 {
                let s: i32 = b[4 + 16 * g..20 + 16 * g].iter().map(|&q| q as i8 as i32).sum();
                b[260 + 2 * g..262 + 2 * g].copy_from_slice(&(s as i16).to_le_bytes());
            }
        } else {
            b[0..2].copy_from_slice(&rng.f16_bits(-12, -4, false).to_le_bytes());
            rng.fill_bytes(&mut b[2..34]);
        }
    }
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn dots(ty: GgmlType, n: usize, w: &[u8], a: &[u8]) -> Vec<f32> {
    let (wrow, arow) = (ty.row_bytes(n).unwrap(), ty.vec_dot_type().row_bytes(n).unwrap());
    let mut d = Vec::new();
    for i in 0..R {
        for j in 0..R {
            d.push(vec_dot(ty, n, &w[i * wrow..(i + 1) * wrow], &a[j * arow..(j + 1) * arow]));
        }
    }
    d
}

/// Our outputs for one reference line's type and row length, in the line's field order.
fn outputs(ty: GgmlType, n: usize, ni: u64) -> (Vec<u64>, Vec<f32>) {
    let vt = ty.vec_dot_type();
    let (wrow, arow) = (ty.row_bytes(n).unwrap(), vt.row_bytes(n).unwrap());
    let mut rng = Rng::new(3000 + 100 * ni + ty as u64);
    let mut w = vec![0u8; R * wrow];
    rng.fill_bytes(&mut w);
    for b in w.chunks_mut(ty.block_bytes()) {
        fix_scales(ty, &mut rng, b);
    }
    let mut deq = vec![0f32; R * n];
    for r in 0..R {
        dequantize_row(ty, &w[r * wrow..(r + 1) * wrow], &mut deq[r * n..(r + 1) * n]);
    }
    let mut a = vec![0u8; R * arow];
    for r in 0..R {
        let x = rng.row(n);
        quantize_row(vt, &x, &mut a[r * arow..(r + 1) * arow]);
    }
    let d = dots(ty, n, &w, &a);
    let mut h = vec![fnv1a(&w), fnv1a(&f32_bytes(&deq)), fnv1a(&a), fnv1a(&f32_bytes(&d))];
    random_act(vt, &mut rng, &mut a);
    h.push(fnv1a(&a));
    h.push(fnv1a(&f32_bytes(&dots(ty, n, &w, &a))));
    (h, d[..4].to_vec())
}

#[test]
fn matches_upstream_ggml() {
    let names = ["weights", "dequantize", "activations", "vec_dot", "random activations", "vec_dot (random activations)"];
    let mut failures = Vec::new();
    let mut seen = Vec::new();
    for line in REF.lines().filter(|l| !l.starts_with('#')) {
        let f: Vec<&str> = line.split_whitespace().filter(|f| *f != "|").collect();
        let ty = GgmlType::ALL.iter().copied().find(|t| t.name() == f[0]).expect(f[0]);
        let n: usize = f[1].parse().unwrap();
        let ni = if n == 1024 { 0 } else { 1 };
        let want: Vec<u64> = [2, 3, 4, 5, 10, 11].iter().map(|&i| u64::from_str_radix(f[i], 16).unwrap()).collect();
        let raw: Vec<f32> = f[6..10].iter().map(|v| v.parse().unwrap()).collect();
        let (got, d) = outputs(ty, n, ni);
        for (k, what) in names.iter().enumerate() {
            if got[k] != want[k] {
                failures.push(format!("{} n={n} {what}: {:#018x} != {:#018x}", ty.name(), got[k], want[k]));
            }
        }
        if d != raw {
            failures.push(format!("{} n={n} first dots {d:?} != {raw:?}", ty.name()));
        }
        seen.push(ty);
    }
    for ty in [
        GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ2_S, GgmlType::IQ3_XXS, GgmlType::IQ3_S, GgmlType::IQ1_S,
        GgmlType::IQ1_M, GgmlType::IQ4_NL, GgmlType::IQ4_XS, GgmlType::TQ1_0, GgmlType::TQ2_0, GgmlType::MXFP4,
        GgmlType::NVFP4, GgmlType::Q1_0, GgmlType::Q2_0,
    ] {
        assert_eq!(seen.iter().filter(|t| **t == ty).count(), 2, "{} missing from ref_vectors.txt", ty.name());
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Every tensor of the IQ / ternary / FP4 / 1-2-bit types in the golden fixtures
/// (`tests/data/quants/*.gguf`, made by upstream's llama-quantize) dequantizes to the bits of
/// upstream's `to_float` (`gen_ref.c tensors`).
#[test]
fn fixture_tensors_match_upstream() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/quants");
    let mut files: std::collections::HashMap<String, crate::gguf::GgufFile> = std::collections::HashMap::new();
    let (mut checked, mut failures) = (0, Vec::new());
    for line in include_str!("../../tests/data/quants/ref_tensors.txt").lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let file = files.entry(f[0].to_string()).or_insert_with(|| crate::gguf::GgufFile::open(&dir.join(f[0]), true).unwrap());
        let t = file.tensor(f[1]).unwrap_or_else(|| panic!("{} {}", f[0], f[1]));
        assert_eq!(t.ty.name(), f[2], "{} {}", f[0], f[1]);
        let mut y = vec![0f32; t.dims.iter().product()];
        dequantize_row(t.ty, file.tensor_data(t), &mut y);
        let h = fnv1a(&f32_bytes(&y));
        if h != u64::from_str_radix(f[3], 16).unwrap() {
            failures.push(format!("{} {} ({}): {h:016x} != {}", f[0], f[1], f[2], f[3]));
        }
        checked += 1;
    }
    assert!(checked >= 370, "{checked} tensors");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
