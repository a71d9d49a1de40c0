//! The order of llama.cpp b11312's tiled matmul (`ggml-cpu/tiled/`), which `ggml_mul_mat` takes
//! for 8 or more activation rows (`ggml_compute_forward_mul_mat_tiled`, tiled.cpp:1209) and
//! `ggml_mul_mat_id` for an expert with 8 or more routed rows (tiled.cpp:1227), for the K-quants
//! and IQ types of [`tiled_order`] whenever the matrix is not repacked.
//!
//! Its unpackers (tiled.cpp:20–640) turn each 256-weight block into integer weights `w`, per
//! sub-block integer scales (and mins), and one or two f32 factors `d` (`dmin`); its microkernels
//! (tiled-kernel.cpp: VNNI, AVX2, AVX, scalar) then sum per block, exactly in 32-bit integers,
//! `s1 = Σ_s scale_s · Σ_e w_e q_e` (and `s2 = Σ_s min_s · bsum_s`), and in f32
//! `r = d · s1` (`r = fnmadd(dmin, s2, r)`), `acc = fma(r, d_a, acc)` over the blocks in order —
//! the VNNI kernel's `add(acc, mul(r, d_a))` is contracted to that FMA by GCC, so the AVX2 and
//! AVX-512 builds give the same bits (`tests/data/upstream_ops/tiled_dump.c` checks both).

use super::iq_tables::{IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID, KSIGNS_IQ2XS, KVALUES_IQ4NL};
use super::{arr, f16_at, kquant, q8_k, GgmlType, QK_K};

/// Whether llama.cpp's tiled matmul serves `ty` (tiled.cpp's type switch).
pub fn tiled_order(ty: GgmlType) -> bool {
    use GgmlType::*;
    matches!(ty, Q6K | Q5K | Q4K | Q3K | Q2K | IQ4_XS | IQ2_XXS | IQ2_XS | IQ2_S | IQ3_XXS | IQ3_S | IQ1_S | IQ1_M)
}

/// The fewest activation rows for which upstream takes the tiled matmul (`ggml_tiled_min_batch`).
pub(crate) const TILED_MIN_ROWS: usize = 8;

/// One weight block as the tiled kernels see it: the integer weights, `n_sub` sub-blocks' scales
/// (and mins when `has_min`), and the f32 factors.
pub(crate) struct TiledBlock {
    pub d: f32,
    pub dmin: f32,
    pub w: [i8; QK_K],
    pub n_sub: usize,
    pub sc: [i32; 16],
    pub mn: [i32; 16],
    pub has_min: bool,
}

impl TiledBlock {
    fn new(d: f32, n_sub: usize) -> TiledBlock {
        TiledBlock { d, dmin: 0.0, w: [0; QK_K], n_sub, sc: [0; 16], mn: [0; 16], has_min: false }
    }
}

/// The 6-bit scales and mins of a Q4_K / Q5_K block (`utmp` of tiled.cpp:33).
fn k4_scales(s: &[u8; 12]) -> ([i32; 8], [i32; 8]) {
    let mut sc = [0i32; 8];
    let mut mn = [0i32; 8];
    for j in 0..8 {
        let (a, b) = super::common::scale_min_k4(j, s);
        (sc[j], mn[j]) = (a as i32, b as i32);
    }
    (sc, mn)
}

/// 32 grid magnitudes with 4 sign bytes (byte l signs values 8l..8l+7), `tiled_unpk_sign32`.
fn signed32(g: [u64; 4], signs: [u8; 4], w: &mut [i8]) {
    for l in 0..4 {
        let v = g[l].to_le_bytes();
        for j in 0..8 {
            let m = v[j] as i8;
            w[8 * l + j] = if signs[l] >> j & 1 == 1 { m.wrapping_neg() } else { m };
        }
    }
}

/// Block `b` of type `ty` unpacked as tiled.cpp does.
pub(crate) fn unpack(ty: GgmlType, b: &[u8]) -> TiledBlock {
    use GgmlType::*;
    match ty {
        Q2K => {
            let mut t = TiledBlock::new(f16_at(b, 80), 16);
            t.dmin = f16_at(b, 82);
            t.has_min = true;
            for s in 0..16 {
                (t.sc[s], t.mn[s]) = ((b[s] & 15) as i32, (b[s] >> 4) as i32);
            }
            t.w = kquant::unpack_2bit(arr(b, 16));
            t
        }
        Q3K => {
            let mut t = TiledBlock::new(f16_at(b, 108), 16);
            let hmask: &[u8; 32] = arr(b, 0);
            let qs: &[u8; 64] = arr(b, 32);
            for e in 0..QK_K {
                let (half, el) = (e >> 7, e & 127);
                let (group, l) = (el >> 5, el & 31);
                let low2 = (qs[half * 32 + l] >> (2 * group)) & 3;
                let high = (hmask[l] >> (half * 4 + group)) & 1;
                t.w[e] = (low2 | high << 2) as i8 - 4;
            }
            let s: &[u8; 12] = arr(b, 96);
            let aux: [u32; 3] = std::array::from_fn(|i| u32::from_le_bytes(*arr(s, 4 * i)));
            let (k1, k2) = (0x03030303u32, 0x0f0f0f0fu32);
            let a = [
                (aux[0] & k2) | ((aux[2] & k1) << 4),
                (aux[1] & k2) | (((aux[2] >> 2) & k1) << 4),
                ((aux[0] >> 4) & k2) | (((aux[2] >> 4) & k1) << 4),
                ((aux[1] >> 4) & k2) | (((aux[2] >> 6) & k1) << 4),
            ];
            for s in 0..16 {
                t.sc[s] = (a[s / 4] >> (8 * (s % 4))) as u8 as i8 as i32 - 32;
            }
            t
        }
        Q4K | Q5K => {
            let mut t = TiledBlock::new(f16_at(b, 0), 8);
            t.dmin = f16_at(b, 2);
            t.has_min = true;
            let (sc, mn) = k4_scales(arr(b, 4));
            t.sc[..8].copy_from_slice(&sc);
            t.mn[..8].copy_from_slice(&mn);
            let (qh, qs): (Option<&[u8; 32]>, &[u8; 128]) = if ty == Q4K { (None, arr(b, 16)) } else { (Some(arr(b, 16)), arr(b, 48)) };
            for j in 0..4 {
                for l in 0..32 {
                    let v = qs[32 * j + l];
                    let (mut lo, mut hi) = (v & 15, v >> 4);
                    if let Some(qh) = qh {
                        lo |= ((qh[l] >> (2 * j)) & 1) << 4;
                        hi |= ((qh[l] >> (2 * j + 1)) & 1) << 4;
                    }
                    t.w[64 * j + l] = lo as i8;
                    t.w[64 * j + 32 + l] = hi as i8;
                }
            }
            t
        }
        Q6K => {
            let mut t = TiledBlock::new(f16_at(b, 208), 16);
            let ql: &[u8; 128] = arr(b, 0);
            let qh: &[u8; 64] = arr(b, 128);
            for half in 0..2 {
                for l in 0..32 {
                    let (l0, l1) = (ql[64 * half + l], ql[64 * half + 32 + l]);
                    let h = qh[32 * half + l];
                    let o = 128 * half;
                    t.w[o + l] = ((l0 & 15) | (h & 3) << 4) as i8 - 32;
                    t.w[o + 32 + l] = ((l1 & 15) | ((h >> 2) & 3) << 4) as i8 - 32;
                    t.w[o + 64 + l] = ((l0 >> 4) | ((h >> 4) & 3) << 4) as i8 - 32;
                    t.w[o + 96 + l] = ((l1 >> 4) | ((h >> 6) & 3) << 4) as i8 - 32;
                }
            }
            for s in 0..16 {
                t.sc[s] = b[192 + s] as i8 as i32;
            }
            t
        }
        IQ4_XS => {
            let mut t = TiledBlock::new(f16_at(b, 0), 8);
            let scales_h = u16::from_le_bytes(*arr(b, 2));
            for s in 0..8 {
                let ls = ((b[4 + s / 2] >> (4 * (s % 2))) & 15) as i32 | (((scales_h >> (2 * s)) & 3) as i32) << 4;
                t.sc[s] = ls - 32;
            }
            let qs: &[u8; 128] = arr(b, 8);
            for u in 0..4 {
                for j in 0..16 {
                    let (v0, v1) = (qs[32 * u + j], qs[32 * u + 16 + j]);
                    t.w[64 * u + j] = KVALUES_IQ4NL[(v0 & 15) as usize];
                    t.w[64 * u + 16 + j] = KVALUES_IQ4NL[(v0 >> 4) as usize];
                    t.w[64 * u + 32 + j] = KVALUES_IQ4NL[(v1 & 15) as usize];
                    t.w[64 * u + 48 + j] = KVALUES_IQ4NL[(v1 >> 4) as usize];
                }
            }
            t
        }
        IQ2_XXS => {
            let mut t = TiledBlock::new(f16_at(b, 0) * 0.125, 8);
            for ib in 0..8 {
                let idx: &[u8; 4] = arr(b, 2 + 8 * ib);
                let sg = u32::from_le_bytes(*arr(b, 6 + 8 * ib));
                t.sc[ib] = 2 * (sg >> 28) as i32 + 1;
                let g = std::array::from_fn(|l| IQ2XXS_GRID[idx[l] as usize]);
                let signs = std::array::from_fn(|l| KSIGNS_IQ2XS[(sg >> (7 * l)) as usize & 127]);
                signed32(g, signs, &mut t.w[32 * ib..32 * ib + 32]);
            }
            t
        }
        IQ2_XS => {
            let mut t = TiledBlock::new(f16_at(b, 0) * 0.125, 16);
            for ib in 0..8 {
                let sc = b[66 + ib];
                (t.sc[2 * ib], t.sc[2 * ib + 1]) = (2 * (sc & 15) as i32 + 1, 2 * (sc >> 4) as i32 + 1);
                let q: [u16; 4] = std::array::from_fn(|l| u16::from_le_bytes(*arr(b, 2 + 8 * ib + 2 * l)));
                let g = std::array::from_fn(|l| IQ2XS_GRID[(q[l] & 511) as usize]);
                let signs = std::array::from_fn(|l| KSIGNS_IQ2XS[(q[l] >> 9) as usize]);
                signed32(g, signs, &mut t.w[32 * ib..32 * ib + 32]);
            }
            t
        }
        IQ2_S => {
            let mut t = TiledBlock::new(f16_at(b, 0) * 0.125, 16);
            let (qs, signs, qh, scales) = (2, 2 + 32, 2 + 64, 2 + 72);
            for ib in 0..8 {
                let sc = b[scales + ib];
                (t.sc[2 * ib], t.sc[2 * ib + 1]) = (2 * (sc & 15) as i32 + 1, 2 * (sc >> 4) as i32 + 1);
                let g = std::array::from_fn(|l| IQ2S_GRID[(b[qs + 4 * ib + l] as usize) | ((b[qh + ib] as usize) << (8 - 2 * l) & 0x300)]);
                signed32(g, *arr(b, signs + 4 * ib), &mut t.w[32 * ib..32 * ib + 32]);
            }
            t
        }
        IQ3_XXS => {
            let mut t = TiledBlock::new(f16_at(b, 0) * 0.25, 8);
            for ib in 0..8 {
                let aux = u32::from_le_bytes(*arr(b, 2 + 64 + 4 * ib));
                t.sc[ib] = 2 * (aux >> 28) as i32 + 1;
                let q = |k: usize| IQ3XXS_GRID[b[2 + 8 * ib + k] as usize] as u64;
                let g = std::array::from_fn(|l| q(2 * l + 1) << 32 | q(2 * l));
                let signs = std::array::from_fn(|l| KSIGNS_IQ2XS[(aux >> (7 * l)) as usize & 127]);
                signed32(g, signs, &mut t.w[32 * ib..32 * ib + 32]);
            }
            t
        }
        IQ3_S => {
            let mut t = TiledBlock::new(f16_at(b, 0), 8);
            let (qs, qh, signs, scales) = (2, 2 + 64, 2 + 72, 2 + 104);
            for ib in 0..8 {
                let sc = b[scales + ib / 2];
                t.sc[ib] = 1 + 2 * ((sc >> (4 * (ib % 2))) & 15) as i32;
                let h = b[qh + ib] as usize;
                let q = |k: usize, sh: usize| IQ3S_GRID[b[qs + 8 * ib + k] as usize | ((h << sh) & 256)] as u64;
                let g = std::array::from_fn(|l| q(2 * l + 1, 7 - 2 * l) << 32 | q(2 * l, 8 - 2 * l));
                signed32(g, *arr(b, signs + 4 * ib), &mut t.w[32 * ib..32 * ib + 32]);
            }
            t
        }
        IQ1_S => {
            let mut t = TiledBlock::new(f16_at(b, 0) * 0.125, 8);
            for ib in 0..8 {
                let hw = u16::from_le_bytes(*arr(b, 34 + 2 * ib));
                t.sc[ib] = 2 * ((hw >> 12) & 7) as i32 + 1;
                let delta: i8 = if hw & 0x8000 != 0 { -1 } else { 1 };
                for l in 0..4 {
                    let e = IQ1S_GRID[b[2 + 4 * ib + l] as usize | (((hw >> (3 * l)) & 7) as usize) << 8].to_le_bytes();
                    for j in 0..8 {
                        t.w[32 * ib + 8 * l + j] = 8 * e[j] as i8 + delta;
                    }
                }
            }
            t
        }
        IQ1_M => {
            let sc: [u16; 4] = std::array::from_fn(|i| u16::from_le_bytes(*arr(b, 48 + 2 * i)));
            let d = (sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000);
            let mut t = TiledBlock::new(super::f16_to_f32(d) * 0.125, 16);
            for ib in 0..8 {
                let hw = sc[ib / 2];
                let sh = 6 * (ib % 2);
                (t.sc[2 * ib], t.sc[2 * ib + 1]) = (2 * ((hw >> sh) & 7) as i32 + 1, 2 * ((hw >> (sh + 3)) & 7) as i32 + 1);
                let (q, h) = (&b[4 * ib..4 * ib + 4], &b[32 + 2 * ib..32 + 2 * ib + 2]);
                let idx = [q[0] as usize | ((h[0] as usize) << 8 & 0x700), q[1] as usize | ((h[0] as usize) << 4 & 0x700), q[2] as usize | ((h[1] as usize) << 8 & 0x700), q[3] as usize | ((h[1] as usize) << 4 & 0x700)];
                let delta = [h[0] & 0x08, h[0] & 0x80, h[1] & 0x08, h[1] & 0x80].map(|m| if m != 0 { -1i8 } else { 1 });
                for l in 0..4 {
                    let e = IQ1S_GRID[idx[l]].to_le_bytes();
                    for j in 0..8 {
                        t.w[32 * ib + 8 * l + j] = 8 * e[j] as i8 + delta[l];
                    }
                }
            }
            t
        }
        _ => panic!("llama.cpp's tiled matmul does not serve {}", ty.name()),
    }
}

/// One block's integer sums against a Q8_K block: (s1, s2).
#[inline(always)]
pub(crate) fn block_sums(t: &TiledBlock, ab: &[u8; q8_k::BYTES]) -> (i32, i32) {
    let q = q8_k::qs(ab);
    let len = QK_K / t.n_sub;
    let (mut s1, mut s2) = (0i32, 0i32);
    let bs = q8_k::bsums(ab);
    for s in 0..t.n_sub {
        let raw: i32 = (s * len..(s + 1) * len).map(|e| t.w[e] as i32 * q[e] as i8 as i32).sum();
        s1 += t.sc[s] * raw;
        if t.has_min {
            let bsum: i32 = bs[s * len / 16..(s + 1) * len / 16].iter().map(|&v| v as i32).sum();
            s2 += t.mn[s] * bsum;
        }
    }
    (s1, s2)
}

/// The f32 steps of one block: `r = d · s1` (less `dmin · s2`, fused), `fma(r, d_a, acc)`.
#[inline(always)]
pub(crate) fn block_step(acc: f32, d: f32, dmin: f32, s1: i32, s2: i32, has_min: bool, d_a: f32) -> f32 {
    let mut r = d * s1 as f32;
    if has_min {
        r = (-dmin).mul_add(s2 as f32, r);
    }
    r.mul_add(d_a, acc)
}

/// `vec_dot` of one row of type `ty` (`w`) and one Q8_K row (`a`) in the tiled matmul's order.
pub(crate) fn vec_dot(ty: GgmlType, w: &[u8], a: &[u8]) -> f32 {
    let wb = ty.block_bytes();
    let mut acc = 0f32;
    for (wb, ab) in w.chunks_exact(wb).zip(a.as_chunks::<{ q8_k::BYTES }>().0) {
        let t = unpack(ty, wb);
        let (s1, s2) = block_sums(&t, ab);
        acc = block_step(acc, t.d, t.dmin, s1, s2, t.has_min, q8_k::d(ab));
    }
    acc
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32s(b: &[u8]) -> Vec<f32> {
        b.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
    }

    /// llama.cpp's tiled matmul (tests/data/upstream_ops/tiled_dump.c: seeded weights of every
    /// type it serves, 32 rows × 512, against 9 and 20 seeded activation rows) gives the bits of
    /// [`vec_dot`]; `vec_dot`'s own order would not.
    #[test]
    fn reference_is_llama_cpps_tiled_matmul() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/upstream_ops");
        let act = f32s(&std::fs::read(dir.join("tiled_act.f32")).unwrap());
        let (cols, rows) = (512, 32);
        let mut aq = vec![0u8; 20 * 2 * q8_k::BYTES];
        for (x, q) in act.chunks_exact(cols).zip(aq.chunks_exact_mut(2 * q8_k::BYTES)) {
            crate::quant::quantize_row(GgmlType::Q8K, x, q);
        }
        for ty in [GgmlType::Q2K, GgmlType::Q3K, GgmlType::Q4K, GgmlType::Q5K, GgmlType::Q6K, GgmlType::IQ4_XS, GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ2_S, GgmlType::IQ3_XXS, GgmlType::IQ3_S, GgmlType::IQ1_S, GgmlType::IQ1_M] {
            assert!(tiled_order(ty));
            let w = std::fs::read(dir.join(format!("tiled_{}.w", ty.name()))).unwrap();
            let want = f32s(&std::fs::read(dir.join(format!("tiled_{}.out", ty.name()))).unwrap());
            let rb = ty.row_bytes(cols).unwrap();
            let mut other_order = 0;
            for (c, (n, off)) in [(9, 0), (20, 9 * rows)].into_iter().enumerate() {
                for t in 0..n {
                    for r in 0..rows {
                        let a = &aq[t * 2 * q8_k::BYTES..(t + 1) * 2 * q8_k::BYTES];
                        let got = crate::quant::vec_dot_tiled(ty, cols, &w[r * rb..(r + 1) * rb], a);
                        let up = want[off + t * rows + r];
                        assert_eq!(got.to_bits(), up.to_bits(), "{} product {c} ({t}, {r}): {got} vs llama.cpp {up}", ty.name());
                        other_order += (crate::quant::vec_dot(ty, cols, &w[r * rb..(r + 1) * rb], a).to_bits() != up.to_bits()) as usize;
                    }
                }
            }
            assert!(other_order > 0, "{}: vec_dot's order gives the same bits", ty.name());
        }
    }
}
