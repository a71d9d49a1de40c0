//! Bit-exact checks against llama.cpp itself.
//!
//! The expected hashes were produced by `golden_harness.c` (next to this
//! file; build steps in its header), a small C program linked with
//! the reference sources (llama_cpp_python 0.3.36's vendored ggml):
//! `ggml-quants.c` built as ggml-base is (`-O3`, baseline x86-64) and
//! `ggml-cpu/arch/x86/quants.c` + `ggml-cpu/quants.c` built as ggml-cpu is
//! (`-O3 -march=haswell`, i.e. the AVX2/FMA/F16C kernels that AVX-512
//! builds also run for these types). The harness generated its inputs with
//! the same xorshift RNG as `test_util::Rng::row`; the input hash guards
//! against the two generators drifting apart.
//!
//! Per weight type: 4 rows of 1024 values are quantized with
//! `quantize_row_*_ref` and dequantized; 4 more rows are quantized to the
//! activation format with the x86 `quantize_row_q8_*`; all 16 dot products
//! are taken with the x86 `ggml_vec_dot_*`.

use super::test_util::{fnv1a, set_f16_field, Rng};
use super::{
    dequantize_row, f32_to_bf16, f32_to_f16, quantize_row, quantize_row_ref, vec_dot, GgmlType,
};

const N: usize = 1024;
const ROWS: usize = 4;

/// (type, inputs, quantized weights, dequantized weights, activations, dots,
/// random-byte weights, their dots with the same activations)
#[rustfmt::skip]
#[allow(clippy::type_complexity)]
const EXPECTED: [(GgmlType, u64, u64, u64, u64, u64, u64, u64); 10] = [
    (GgmlType::Q4_0, 0xc137f97c3b353181, 0xe1b85d9ade77f55f, 0xb6e6228792a8b8b2, 0xc37600cfd4524171, 0xf7ed031993695712,
        0xce0bb2963346e667, 0xde3ffa35382154df),
    (GgmlType::Q4_1, 0x0b04b0b51cc0acf2, 0xcd64aea535916d4e, 0x5a34fe7ced947534, 0x7397262e971dc953, 0x99e5e9d1bbf11728,
        0x5c1a8ae8a8f76236, 0xb090e97747b94c53),
    (GgmlType::Q5_0, 0x32b9df9844ff9ee3, 0x67e1251525f8d513, 0x197a936b1d53444d, 0xae0431a3622f0791, 0x5304d0b7fce05700,
        0xd5a5dc387329c8fd, 0x8c316de1198dd32f),
    (GgmlType::Q5_1, 0x0780187717d6bd61, 0x79804bba6de79952, 0xf99c75604e34112b, 0x988424b6d728bf95, 0x34e413df347867a1,
        0x275af16d5b7134f7, 0xd6fe55fb0f316e71),
    (GgmlType::Q8_0, 0x6919ff794b09a544, 0x3b34f11bd665584c, 0x5348b0ac8f8c3c62, 0x570f84ca47dd696d, 0x60482def9f03a6ef,
        0x5656017582e6ae2a, 0xa6cb2757f832e26a),
    (GgmlType::Q2K, 0xda509dd3d37d13c8, 0x99776cbe3d63270b, 0x834bdb4b686ce171, 0x42dfa0dd328c16a2, 0x1cec3842f95d9077,
        0x38e95316f8648ddd, 0x4162f754e19b5ae5),
    (GgmlType::Q3K, 0x2e3dc9d8a014e02a, 0xc3e2b15e53f9f171, 0x90303a96baa63dc6, 0x07c20ded6c0f14cd, 0xe104889fbec76067,
        0x5044a18a6c0228a1, 0x8164309f96ee9678),
    (GgmlType::Q4K, 0xcc2c78dcf54f15a6, 0x57e544eca4f289a7, 0x5784c5ec6cf10a2d, 0x4a9836aeec05d2a1, 0x9c19585c314a7323,
        0xd02a193b8aa67fee, 0xd598477a099c373d),
    (GgmlType::Q5K, 0x6bb5b901042e0b86, 0xdbb9b98ed8c099de, 0xbe91a94c565fea2f, 0xd38b74dd47e488b8, 0x79797c7c421d715f,
        0x15db5e918df8139a, 0x647dafd989c8e232),
    (GgmlType::Q6K, 0x061ca3f24e1466c1, 0xa2a9dd11a50108c4, 0x4aa017ac4d034aec, 0xebbe995a3e48be77, 0x6de06f851beca3a2,
        0xa604e48daadd19ac, 0x91ad9589e1be8cdd),
];

/// (offset, signed) of the f16 fields of each weight block.
fn f16_fields(ty: GgmlType) -> &'static [(usize, bool)] {
    match ty {
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => &[(0, true)],
        GgmlType::Q4_1 | GgmlType::Q5_1 => &[(0, false), (2, true)],
        GgmlType::Q2K => &[(80, false), (82, false)],
        GgmlType::Q3K => &[(108, true)],
        GgmlType::Q4K | GgmlType::Q5K => &[(0, false), (2, false)],
        GgmlType::Q6K => &[(208, true)],
        _ => unreachable!(),
    }
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[test]
#[allow(clippy::excessive_precision)] // values as printed by the harness
fn matches_llama_cpp() {
    let mut failures = Vec::new();
    for &(ty, h_in, h_w, h_deq, h_act, h_dot, h_rw, h_rdot) in &EXPECTED {
        let vdt = ty.vec_dot_type();
        let (wrow, arow) = (ty.row_bytes(N).unwrap(), vdt.row_bytes(N).unwrap());
        let mut rng = Rng::new(1000 + ty as u64);
        let mut hx = 0xcbf2_9ce4_8422_2325u64;
        let mut w = vec![0u8; ROWS * wrow];
        let mut deq = vec![0f32; ROWS * N];
        for r in 0..ROWS {
            let x = rng.row(N);
            hx = (hx ^ fnv1a(&f32_bytes(&x))).wrapping_mul(3);
            quantize_row_ref(ty, &x, &mut w[r * wrow..(r + 1) * wrow]);
            dequantize_row(
                ty,
                &w[r * wrow..(r + 1) * wrow],
                &mut deq[r * N..(r + 1) * N],
            );
        }
        let mut a = vec![0u8; ROWS * arow];
        for r in 0..ROWS {
            let x = rng.row(N);
            quantize_row(vdt, &x, &mut a[r * arow..(r + 1) * arow]);
        }
        let mut dots = Vec::new();
        for i in 0..ROWS {
            for j in 0..ROWS {
                dots.push(vec_dot(
                    ty,
                    N,
                    &w[i * wrow..(i + 1) * wrow],
                    &a[j * arow..(j + 1) * arow],
                ));
            }
        }
        // random bytes as weights (every bit pattern, e.g. -128 quants and
        // scales), with the f16 fields set to moderate values
        let mut rng = Rng::new(2000 + ty as u64);
        let mut wr = vec![0u8; ROWS * wrow];
        rng.fill_bytes(&mut wr);
        for blk in wr.chunks_mut(ty.block_bytes()) {
            for &(off, signed) in f16_fields(ty) {
                let h = rng.f16_bits(-10, -2, signed);
                set_f16_field(blk, off, h);
            }
        }
        let mut rdots = Vec::new();
        for i in 0..ROWS {
            for j in 0..ROWS {
                rdots.push(vec_dot(
                    ty,
                    N,
                    &wr[i * wrow..(i + 1) * wrow],
                    &a[j * arow..(j + 1) * arow],
                ));
            }
        }
        let got = [
            hx,
            fnv1a(&w),
            fnv1a(&f32_bytes(&deq)),
            fnv1a(&a),
            fnv1a(&f32_bytes(&dots)),
            fnv1a(&wr),
            fnv1a(&f32_bytes(&rdots)),
        ];
        let want = [h_in, h_w, h_deq, h_act, h_dot, h_rw, h_rdot];
        let names = [
            "inputs",
            "quantize_row_ref",
            "dequantize_row",
            "quantize_row",
            "vec_dot",
            "random weights",
            "vec_dot (random weights)",
        ];
        for (k, what) in names.iter().enumerate() {
            if got[k] != want[k] {
                failures.push(format!(
                    "{} {what}: {:#018x} != {:#018x}",
                    ty.name(),
                    got[k],
                    want[k]
                ));
            }
        }
        // spot values printed by the harness
        if ty == GgmlType::Q4_0 && dots[..4] != [1334.98145f32, -835.616455, 571.788757, 801.080261]
        {
            failures.push(format!("q4_0 first dots: {:?}", &dots[..4]));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn reference_q8_quantizers_match_llama_cpp() {
    let mut rng = Rng::new(77);
    let x = rng.row(N);
    let mut q0 = vec![0u8; GgmlType::Q8_0.row_bytes(N).unwrap()];
    let mut q1 = vec![0u8; GgmlType::Q8_1.row_bytes(N).unwrap()];
    quantize_row_ref(GgmlType::Q8_0, &x, &mut q0);
    quantize_row_ref(GgmlType::Q8_1, &x, &mut q1);
    assert_eq!(fnv1a(&q0), 0x602367815cfbd922);
    assert_eq!(fnv1a(&q1), 0xb591be9e2afa4865);
}

/// f32 -> f16 against the F16C instruction (`_cvtss_sh(x, 0)`, what
/// ggml-cpu uses on x86) and f32 -> bf16 against ggml's conversion, on a
/// million random bit patterns (NaN skipped for f16: the instruction keeps
/// payloads where ggml's software path returns 0x7e00).
#[test]
fn half_conversions_match_llama_cpp() {
    let mut rng = Rng::new(99);
    let (mut h, mut hb) = (0xcbf2_9ce4_8422_2325u64, 0xcbf2_9ce4_8422_2325u64);
    for _ in 0..1_000_000 {
        let f = f32::from_bits(rng.next_u32());
        if !f.is_nan() {
            h = (h ^ f32_to_f16(f) as u64).wrapping_mul(0x0000_0100_0000_01b3);
        }
        hb = (hb ^ f32_to_bf16(f) as u64).wrapping_mul(0x0000_0100_0000_01b3);
    }
    assert_eq!(h, 0x45d5503428a5848e);
    assert_eq!(hb, 0x623f473c985eaea1);
}
