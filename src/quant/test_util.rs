//! Test helpers: a deterministic RNG and independent f64 decoders.

/// xorshift64* generator; deterministic across platforms.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub(crate) fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// Uniform in [0, 1).
    pub(crate) fn unit(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// Roughly standard normal (sum of 4 uniforms, rescaled).
    pub(crate) fn normal(&mut self) -> f32 {
        let s: f32 = (0..4).map(|_| self.unit()).sum();
        (s - 2.0) * 1.732_050_8
    }

    pub(crate) fn fill_bytes(&mut self, b: &mut [u8]) {
        for x in b {
            *x = self.next_u64() as u8;
        }
    }

    /// A random f16 bit pattern with magnitude in [2^lo_exp, 2^hi_exp),
    /// random sign if `signed`.
    pub(crate) fn f16_bits(&mut self, lo_exp: i32, hi_exp: i32, signed: bool) -> u16 {
        let e = lo_exp + self.below((hi_exp - lo_exp) as u64) as i32;
        let biased = (e + 15) as u16;
        assert!((1..31).contains(&biased));
        let man = self.below(1024) as u16;
        let sign = if signed && self.next_u64() & 1 == 1 {
            0x8000
        } else {
            0
        };
        sign | (biased << 10) | man
    }

    /// A row of activations / weights: mostly normal with occasional
    /// outliers and exact zeros, scaled per 32-element group.
    pub(crate) fn row(&mut self, n: usize) -> Vec<f32> {
        let mut v = Vec::with_capacity(n);
        let mut scale = 1.0f32;
        for i in 0..n {
            if i % 32 == 0 {
                scale = 2f32.powi(self.below(9) as i32 - 4);
            }
            let r = self.below(64);
            let x = match r {
                0 => 0.0,
                1 => self.normal() * 8.0,
                _ => self.normal(),
            };
            v.push(x * scale);
        }
        v
    }
}

/// Independent f16 decoder: sign * 2^(e-15) * (1 + m/1024), subnormals
/// 2^-14 * m/1024.
pub(crate) fn f16_bits_to_f64(h: u16) -> f64 {
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let e = ((h >> 10) & 0x1f) as i32;
    let m = (h & 0x3ff) as f64;
    match e {
        0 => sign * 2f64.powi(-14) * (m / 1024.0),
        31 => {
            if m == 0.0 {
                sign * f64::INFINITY
            } else {
                f64::NAN
            }
        }
        _ => sign * 2f64.powi(e - 15) * (1.0 + m / 1024.0),
    }
}

/// f16 field at `off` (little-endian) decoded independently.
pub(crate) fn f16_field(b: &[u8], off: usize) -> f64 {
    f16_bits_to_f64(u16::from_le_bytes([b[off], b[off + 1]]))
}

/// Write the f16 bit pattern `h` at `off`.
pub(crate) fn set_f16_field(b: &mut [u8], off: usize, h: u16) {
    b[off..off + 2].copy_from_slice(&h.to_le_bytes());
}

/// Check `got` against an f64 reference: each element's own tolerance.
pub(crate) fn assert_close_each(what: &str, got: &[f32], want: &[(f64, f64)]) {
    assert_eq!(got.len(), want.len());
    for (i, (&g, &(w, tol))) in got.iter().zip(want).enumerate() {
        let err = (g as f64 - w).abs();
        assert!(err <= tol, "{what}[{i}]: got {g}, want {w} (tol {tol})");
    }
}

/// Relative tolerance for one f32 result built from a couple of roundings.
pub(crate) const F32_REL: f64 = 4.0 * f32::EPSILON as f64;

/// FNV-1a over bytes, for compact golden checks.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Decoders for the activation formats, written from ggml-common.h.
pub(crate) mod act {
    use super::f16_field;

    /// Q8_0: d (f16) + 32 x i8.
    pub(crate) fn q8_0(b: &[u8]) -> Vec<f64> {
        b.chunks(34)
            .flat_map(|blk| {
                let d = f16_field(blk, 0);
                (0..32).map(move |i| d * (blk[2 + i] as i8) as f64)
            })
            .collect()
    }

    /// Q8_1: d (f16), s (f16) + 32 x i8. Returns values and per-block s.
    pub(crate) fn q8_1(b: &[u8]) -> (Vec<f64>, Vec<f64>) {
        let mut v = Vec::new();
        let mut s = Vec::new();
        for blk in b.chunks(36) {
            let d = f16_field(blk, 0);
            s.push(f16_field(blk, 2));
            v.extend((0..32).map(|i| d * (blk[4 + i] as i8) as f64));
        }
        (v, s)
    }

    /// Q8_K: d (f32) + 256 x i8 + 16 x i16 bsums.
    pub(crate) fn q8_k(b: &[u8]) -> Vec<f64> {
        b.chunks(292)
            .flat_map(|blk| {
                let d = f32::from_le_bytes([blk[0], blk[1], blk[2], blk[3]]) as f64;
                (0..256).map(move |i| d * (blk[4 + i] as i8) as f64)
            })
            .collect()
    }
}

/// Shared property tests for one weight format.
pub(crate) mod weight {
    use super::*;
    use crate::quant::{dequantize_row, quantize_row, quantize_row_ref, vec_dot, GgmlType};

    /// `decode` maps one block's bytes to (value, tolerance) pairs for
    /// comparison with `dequantize_row`; `randomize` turns random bytes
    /// into a valid block (finite scales).
    pub(crate) fn check_dequantize(
        ty: GgmlType,
        seed: u64,
        randomize: impl Fn(&mut Rng, &mut [u8]),
        decode: impl Fn(&[u8]) -> Vec<(f64, f64)>,
    ) {
        let mut rng = Rng::new(seed);
        let nb = 16;
        let mut bytes = vec![0u8; nb * ty.block_bytes()];
        for blk in bytes.chunks_mut(ty.block_bytes()) {
            rng.fill_bytes(blk);
            randomize(&mut rng, blk);
        }
        let mut got = vec![0f32; nb * ty.block_len()];
        dequantize_row(ty, &bytes, &mut got);
        let want: Vec<(f64, f64)> = bytes.chunks(ty.block_bytes()).flat_map(&decode).collect();
        assert_close_each(ty.name(), &got, &want);
    }

    /// vec_dot on random blocks against an f64 sum of decoded weight x
    /// decoded activation (for Q8_1 activations the min term uses the
    /// stored `s`, as ggml does). Tolerance: 1e-5 of the sum of |products|.
    pub(crate) fn check_vec_dot(
        ty: GgmlType,
        seed: u64,
        randomize: impl Fn(&mut Rng, &mut [u8]),
        decode: impl Fn(&[u8]) -> Vec<(f64, f64)>,
    ) {
        let mut rng = Rng::new(seed);
        let vdt = ty.vec_dot_type();
        for &nb in &[1usize, 2, 3, 8, 16] {
            for _ in 0..20 {
                let n = nb * ty.block_len();
                let mut w = vec![0u8; nb * ty.block_bytes()];
                for blk in w.chunks_mut(ty.block_bytes()) {
                    rng.fill_bytes(blk);
                    randomize(&mut rng, blk);
                }
                let x = rng.row(n);
                let mut a = vec![0u8; vdt.row_bytes(n).unwrap()];
                quantize_row(vdt, &x, &mut a);
                let wv: Vec<(f64, f64)> = w.chunks(ty.block_bytes()).flat_map(&decode).collect();
                let (exact, mag) = match vdt {
                    GgmlType::Q8_0 => dot_ref(&wv, &act::q8_0(&a)),
                    GgmlType::Q8K => dot_ref(&wv, &act::q8_k(&a)),
                    GgmlType::Q8_1 => {
                        // ggml: sum d_w*d_a*q_w*q_a + m_w * s_a, where s_a is the
                        // stored (f16) d_a*sum(q_a) rather than the exact sum.
                        let (av, s) = act::q8_1(&a);
                        let mins = block_mins(ty, &w);
                        let (mut exact, mut mag) = (0.0, 0.0);
                        for (b, (&m, &sb)) in mins.iter().zip(&s).enumerate() {
                            for i in 32 * b..32 * b + 32 {
                                let p = (wv[i].0 - m) * av[i];
                                exact += p;
                                mag += p.abs();
                            }
                            exact += m * sb;
                            mag += (m * sb).abs();
                        }
                        (exact, mag)
                    }
                    _ => {
                        let mut xd = vec![0f32; n];
                        dequantize_row(vdt, &a, &mut xd);
                        let xv: Vec<f64> = xd.iter().map(|&v| v as f64).collect();
                        dot_ref(&wv, &xv)
                    }
                };
                let got = vec_dot(ty, n, &w, &a) as f64;
                assert!(
                    (got - exact).abs() <= 1e-5 * mag + 1e-30,
                    "{} nb={nb}: got {got}, want {exact} (sum|p| {mag})",
                    ty.name()
                );
            }
        }
    }

    fn dot_ref(w: &[(f64, f64)], a: &[f64]) -> (f64, f64) {
        let exact = w.iter().zip(a).map(|(w, a)| w.0 * a).sum();
        let mag = w.iter().zip(a).map(|(w, a)| (w.0 * a).abs()).sum();
        (exact, mag)
    }

    /// The `m` field (offset 2, f16) of Q4_1 / Q5_1 blocks.
    fn block_mins(ty: GgmlType, w: &[u8]) -> Vec<f64> {
        assert!(matches!(ty, GgmlType::Q4_1 | GgmlType::Q5_1));
        w.chunks(ty.block_bytes())
            .map(|b| f16_field(b, 2))
            .collect()
    }

    /// All three checks of a weight format (seeds `seed`, `seed + 1`, `seed + 2`):
    /// [`check_dequantize`] and [`check_vec_dot`] with `randomize` / `decode`, and
    /// [`check_roundtrip`] with `bound`.
    pub(crate) fn check_format(
        ty: GgmlType,
        seed: u64,
        randomize: impl Fn(&mut Rng, &mut [u8]),
        decode: impl Fn(&[u8]) -> Vec<(f64, f64)>,
        bound: impl Fn(&[f32]) -> f64,
    ) {
        check_dequantize(ty, seed, &randomize, &decode);
        check_vec_dot(ty, seed + 1, &randomize, &decode);
        check_roundtrip(ty, seed + 2, bound);
    }

    /// Largest |x| of a block.
    pub(crate) fn amax(x: &[f32]) -> f64 {
        x.iter().fold(0f32, |m, v| m.max(v.abs())) as f64
    }

    /// The spread of a block with 0 included: max(0, max x) − min(0, min x).
    pub(crate) fn span0(x: &[f32]) -> f64 {
        let (mn, mx) = x.iter().fold((0f32, 0f32), |(a, b), &v| (a.min(v), b.max(v)));
        (mx - mn) as f64
    }

    /// quantize_row_ref -> dequantize_row on random rows; `bound` gives the
    /// allowed |error| for each block of input.
    pub(crate) fn check_roundtrip(ty: GgmlType, seed: u64, bound: impl Fn(&[f32]) -> f64) {
        let mut rng = Rng::new(seed);
        let n = 16 * ty.block_len();
        for _ in 0..8 {
            let x = rng.row(n);
            let mut q = vec![0u8; ty.row_bytes(n).unwrap()];
            quantize_row_ref(ty, &x, &mut q);
            let mut y = vec![0f32; n];
            dequantize_row(ty, &q, &mut y);
            for (xb, yb) in x.chunks(ty.block_len()).zip(y.chunks(ty.block_len())) {
                let b = bound(xb);
                for (i, (a, c)) in xb.iter().zip(yb).enumerate() {
                    assert!(
                        ((a - c) as f64).abs() <= b,
                        "{}[{i}]: {a} -> {c}, bound {b}",
                        ty.name()
                    );
                }
            }
        }
        // all-zero input dequantizes to zeros
        let x = vec![0f32; n];
        let mut q = vec![0u8; ty.row_bytes(n).unwrap()];
        quantize_row_ref(ty, &x, &mut q);
        let mut y = vec![1f32; n];
        dequantize_row(ty, &q, &mut y);
        assert!(y.iter().all(|v| *v == 0.0), "{} zeros", ty.name());
    }

    /// Root-mean-square relative error of quantize_row_ref -> dequantize_row
    /// on random rows.
    pub(crate) fn rms_rel_error(ty: GgmlType, seed: u64) -> f64 {
        let mut rng = Rng::new(seed);
        let n = 16 * ty.block_len();
        let (mut se, mut sx) = (0f64, 0f64);
        for _ in 0..8 {
            let x: Vec<f32> = (0..n).map(|_| rng.normal()).collect();
            let mut q = vec![0u8; ty.row_bytes(n).unwrap()];
            quantize_row_ref(ty, &x, &mut q);
            let mut y = vec![0f32; n];
            dequantize_row(ty, &q, &mut y);
            for (a, b) in x.iter().zip(&y) {
                se += ((a - b) as f64).powi(2);
                sx += (*a as f64).powi(2);
            }
        }
        (se / sx).sqrt()
    }
}

/// One of llama.cpp's intermediate tensors in `tests/data/upstream_ops` (raw little-endian f32;
/// its README says which op and run each file comes from).
pub(crate) fn upstream_op(name: &str) -> Vec<f32> {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/upstream_ops").join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())).chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}
