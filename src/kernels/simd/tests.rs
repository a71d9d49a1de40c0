//! SIMD kernels against the scalar reference (`crate::quant`) on random data.

use super::*;
use crate::quant::{self, f32_to_f16, GgmlType};

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
    fn normal(&mut self) -> f32 {
        let s: f32 = (0..4).map(|_| self.unit()).sum();
        (s - 2.0) * 1.732
    }
    /// Activation-like rows: per-32 scales, outliers, zeros, an occasional all-zero group.
    fn row(&mut self, n: usize) -> Vec<f32> {
        let mut scale = 1.0;
        (0..n)
            .map(|i| {
                if i % 32 == 0 {
                    scale = if self.next() % 17 == 0 { 0.0 } else { 2f32.powi((self.next() % 9) as i32 - 4) };
                }
                match self.next() % 64 {
                    0 => 0.0,
                    1 => self.normal() * 8.0 * scale,
                    2 => (self.next() % 5) as f32 * 0.5 * scale, // ties
                    _ => self.normal() * scale,
                }
            })
            .collect()
    }
}

const LEVEL: Level = Level::Avx2;

fn available() -> bool {
    !tested_levels(&[Level::Avx2]).is_empty()
}

/// The SIMD levels this CPU can run (each is tested; the first call reports them).
fn levels() -> Vec<Level> {
    tested_levels(&[Level::Avx2, Level::Avx512])
}

/// Offsets of the f16 scale fields in a block (to keep random blocks finite).
fn f16_fields(ty: GgmlType) -> &'static [usize] {
    match ty {
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => &[0],
        GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4K | GgmlType::Q5K => &[0, 2],
        GgmlType::Q6K => &[208],
        GgmlType::Q2K => &[80, 82],
        GgmlType::Q3K => &[108],
        GgmlType::IQ2_XXS | GgmlType::IQ2_XS | GgmlType::IQ2_S | GgmlType::IQ3_XXS | GgmlType::IQ3_S | GgmlType::IQ1_S => &[0],
        GgmlType::IQ4_XS | GgmlType::IQ4_NL | GgmlType::Q1_0 | GgmlType::Q2_0 => &[0],
        GgmlType::TQ1_0 => &[52],
        GgmlType::TQ2_0 => &[64],
        _ => &[],
    }
}

/// The scales of the formats whose scale is not one f16 field (kept moderate).
fn fix_other_scales(rng: &mut Rng, ty: GgmlType, blk: &mut [u8]) {
    match ty {
        GgmlType::MXFP4 => blk[0] = 118 + (rng.next() % 12) as u8,
        GgmlType::NVFP4 => blk[..4].iter_mut().for_each(|b| *b = 0x08 + (rng.next() % 0x70) as u8),
        GgmlType::IQ1_M => {
            // the f16 super-scale in the top nibbles of the four scale u16s
            let h = f32_to_f16((rng.unit() + 0.1) * 0.01);
            for i in 0..4 {
                blk[49 + 2 * i] = (blk[49 + 2 * i] & 0x0f) | ((((h >> (4 * i)) & 0xf) as u8) << 4);
            }
        }
        _ => {}
    }
}

/// A weight row: quantized by the reference quantizer, or random bytes with sane scales.
fn weight_row(rng: &mut Rng, ty: GgmlType, cols: usize, raw: bool) -> Vec<u8> {
    let mut w = vec![0u8; ty.row_bytes(cols).unwrap()];
    if matches!(ty, GgmlType::F16 | GgmlType::F32 | GgmlType::BF16) {
        let x = rng.row(cols);
        quant::quantize_row_ref(ty, &x, &mut w);
        return w;
    }
    // types without a reference quantizer: random blocks in both modes
    if raw || !ty.has_quantize_ref() {
        for b in w.iter_mut() {
            *b = rng.next() as u8;
        }
        let bb = ty.block_bytes();
        for blk in w.chunks_exact_mut(bb) {
            for &off in f16_fields(ty) {
                let v = (rng.unit() - 0.3) * 0.02;
                blk[off..off + 2].copy_from_slice(&f32_to_f16(v).to_le_bytes());
            }
            fix_other_scales(rng, ty, blk);
        }
    } else {
        let x: Vec<f32> = rng.row(cols).iter().map(|v| v * 0.05).collect();
        quant::quantize_row_ref(ty, &x, &mut w);
    }
    w
}

/// `n` random activation rows of `cols` values quantized to `vt`, back to back.
fn act_rows(rng: &mut Rng, vt: GgmlType, cols: usize, n: usize) -> Vec<u8> {
    let arb = vt.row_bytes(cols).unwrap();
    let mut act = vec![0u8; arb * n];
    for row in act.chunks_exact_mut(arb) {
        quant::quantize_row(vt, &rng.row(cols), row);
    }
    act
}

fn abs_products(ty: GgmlType, cols: usize, w: &[u8], a: &[u8]) -> f64 {
    let mut wf = vec![0f32; cols];
    let mut af = vec![0f32; cols];
    quant::dequantize_row(ty, w, &mut wf);
    quant::dequantize_row(ty.vec_dot_type(), a, &mut af);
    wf.iter().zip(&af).map(|(&x, &y)| (x as f64 * y as f64).abs()).sum()
}

fn check_type(ty: GgmlType, col_choices: &[usize]) {
    if !available() {
        return; // tested_levels has said the AVX2 kernels are not tested here
    }
    for level in levels() {
        check_type_at(level, ty, col_choices, Order::VecDot);
    }
}

/// The reference orders: `vec_dot`'s, or for matrices upstream repacks its GEMV's or GEMM's
/// (`quant::vec_dot_repacked`).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Order {
    VecDot,
    Gemv,
    Gemm,
    /// llamafile tinyBLAS's (`quant::vec_dot_sgemm`).
    Sgemm,
}

/// The reference's dot product of a weight row with an activation row in `order`.
fn dot_ref(ty: GgmlType, cols: usize, w: &[u8], a: &[u8], order: Order) -> f32 {
    match order {
        Order::VecDot => quant::vec_dot(ty, cols, w, a),
        Order::Gemv => quant::vec_dot_repacked(ty, cols, w, a, false),
        Order::Gemm => quant::vec_dot_repacked(ty, cols, w, a, true),
        Order::Sgemm => quant::vec_dot_sgemm(ty, cols, w, a),
    }
}

fn check_type_at(level: Level, ty: GgmlType, col_choices: &[usize], order: Order) {
    let fns = match order {
        Order::VecDot => dot_fns_at(level, ty),
        Order::Gemv => dot_fns_repacked_at(level, ty, false),
        Order::Gemm => dot_fns_repacked_at(level, ty, true),
        Order::Sgemm => dot_fns_sgemm_at(level, ty),
    }
    .expect("kernel");
    let vt = ty.vec_dot_type();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ ty as u64);
    let (mut exact, mut total) = (0, 0);
    for &cols in col_choices {
        for raw in [false, true] {
            let nb = cols / ty.block_len();
            let n_act = 9; // odd: exercises every tile width
            let arb = vt.row_bytes(cols).unwrap();
            let act = act_rows(&mut rng, vt, cols, n_act);
            for _ in 0..3 {
                let w = weight_row(&mut rng, ty, cols, raw);
                let want: Vec<f32> = (0..n_act).map(|t| dot_ref(ty, cols, &w, &act[t * arb..(t + 1) * arb], order)).collect();
                for (ri, f) in fns.iter().enumerate() {
                    let r = ri + 1;
                    for t0 in 0..=n_act - r {
                        let mut out = vec![f32::NAN; 2 * r];
                        // SAFETY: w holds nb blocks, act rows t0..t0+r exist, out has 2r slots.
                        unsafe { f(nb, w.as_ptr(), act.as_ptr().add(t0 * arb), arb, out.as_mut_ptr(), 2) };
                        for i in 0..r {
                            let t = t0 + i;
                            let got = out[2 * i];
                            let tol = 1e-5 * abs_products(ty, cols, &w, &act[t * arb..(t + 1) * arb]) + 1e-30;
                            assert!(
                                ((got - want[t]) as f64).abs() <= tol,
                                "{level:?} {} cols {cols} raw {raw} R {r} row {t}: simd {got} vs scalar {} (tol {tol})",
                                ty.name(),
                                want[t]
                            );
                            total += 1;
                            exact += (got.to_bits() == want[t].to_bits()) as usize;
                            assert!(out[2 * i + 1].is_nan(), "wrote outside its stride");
                        }
                    }
                }
            }
        }
    }
    // The kernels reproduce the reference's lane layout, so they agree bit for bit.
    assert_eq!(exact, total, "{level:?} {}: {exact} of {total} bit-identical", ty.name());
}

/// The decode kernels on a prepared activation row give every row's reference `vec_dot` (for
/// `repacked` matrices `vec_dot_repacked`'s GEMV order) bit for bit, for 4, 2 and 1 rows (where
/// a type has no one-row kernel the driver takes its `DotFns`), on quantized and raw random
/// blocks.
fn check_gemv(ty: GgmlType, col_choices: &[usize], repacked: bool) {
    let gfni_choices: &[bool] = if crate::kernels::cpu_features().gfni { &[false, true] } else { &[false] };
    for (level, &gfni) in levels().into_iter().flat_map(|l| gfni_choices.iter().map(move |g| (l, g))) {
        let Some(g) = (if repacked { gemv_fns_repacked_at(level, ty) } else { gemv_fns_at(level, gfni, ty) }) else { continue };
        let vt = ty.vec_dot_type();
        let mut rng = Rng(0x5151_7272 ^ ty as u64);
        for &cols in col_choices {
            for raw in [false, true] {
                let nb = cols / ty.block_len();
                let wrb = ty.row_bytes(cols).unwrap();
                let mut act = vec![0u8; vt.row_bytes(cols).unwrap()];
                quant::quantize_row(vt, &rng.row(cols), &mut act);
                let mut w = Vec::new();
                for _ in 0..6 {
                    w.extend(weight_row(&mut rng, ty, cols, raw));
                }
                let mut aligned = vec![Align64([0; 64]); (g.prep_bytes)(nb).div_ceil(64)];
                // SAFETY: act holds nb blocks; the buffer holds prep_bytes(nb) bytes, 64-byte
                // aligned; the level is supported.
                unsafe { (g.prep)(nb, act.as_ptr(), aligned.as_mut_ptr() as *mut u8) };
                for (n, f) in [(4, g.rows4), (2, g.rows2)].into_iter().chain(g.rows1.map(|f| (1, f))) {
                    for j0 in 0..=6 - n {
                        let mut out = vec![f32::NAN; n + 1];
                        // SAFETY: rows j0..j0+n of nb blocks exist; out has n slots (+1 guard).
                        unsafe { f(nb, w.as_ptr().add(j0 * wrb), wrb, aligned.as_ptr() as *const u8, out.as_mut_ptr()) };
                        for j in 0..n {
                            let row = &w[(j0 + j) * wrb..(j0 + j + 1) * wrb];
                            let want = if repacked { quant::vec_dot_repacked(ty, cols, row, &act, false) } else { quant::vec_dot(ty, cols, row, &act) };
                            assert_eq!(out[j].to_bits(), want.to_bits(), "{level:?} gfni {gfni} {} cols {cols} raw {raw} repacked {repacked} rows {n} row {}: {} vs {want}", ty.name(), j0 + j, out[j]);
                        }
                        assert!(out[n].is_nan(), "wrote past its rows");
                    }
                }
            }
        }
    }
}

/// The batched kernels on prepared activation rows give each (weight row, activation row)
/// pair the reference's `vec_dot` bit for bit, for 1 to 8 activation rows per call.
fn check_batch(ty: GgmlType, col_choices: &[usize], repacked: bool) {
    for level in levels() {
        let Some(b) = (if repacked { batch_fns_repacked_at(level, ty) } else { batch_fns_at(level, ty) }) else { continue };
        let order = if repacked { Order::Gemv } else { Order::VecDot };
        let vt = ty.vec_dot_type();
        let mut rng = Rng(0x6b61_7463_6821 ^ ty as u64);
        for &cols in col_choices {
            for raw in [false, true] {
                let nb = cols / ty.block_len();
                let n_act = 9;
                let arb = vt.row_bytes(cols).unwrap();
                let act = act_rows(&mut rng, vt, cols, n_act);
                let pb = (b.prep_bytes)(nb);
                assert_eq!(pb % 64, 0, "prepared rows keep 64-byte alignment");
                let mut prepared = vec![Align64([0; 64]); n_act * pb / 64];
                for t in 0..n_act {
                    // SAFETY: act row t holds nb blocks; the buffer holds n_act prepared rows,
                    // 64-byte aligned; the level is supported.
                    unsafe { (b.prep)(nb, act.as_ptr().add(t * arb), (prepared.as_mut_ptr() as *mut u8).add(t * pb)) };
                }
                let w = weight_row(&mut rng, ty, cols, raw);
                let want: Vec<f32> = (0..n_act).map(|t| dot_ref(ty, cols, &w, &act[t * arb..(t + 1) * arb], order)).collect();
                for (ri, f) in b.rows.iter().enumerate() {
                    let r = ri + 1;
                    for t0 in 0..=n_act - r {
                        let mut out = vec![f32::NAN; 2 * r];
                        // SAFETY: w holds nb blocks, prepared rows t0..t0+r exist, out has 2r slots.
                        unsafe { f(nb, w.as_ptr(), (prepared.as_ptr() as *const u8).add(t0 * pb), pb, out.as_mut_ptr(), 2) };
                        for i in 0..r {
                            let (got, t) = (out[2 * i], t0 + i);
                            assert_eq!(got.to_bits(), want[t].to_bits(), "{level:?} {} cols {cols} raw {raw} R {r} row {t}: {got} vs {}", ty.name(), want[t]);
                            assert!(out[2 * i + 1].is_nan(), "wrote outside its stride");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn batch_q4_k() {
    check_batch(GgmlType::Q4K, &[256, 768], false);
    check_batch(GgmlType::Q4K, &[256, 768], true);
}

#[test]
fn batch_q5_k() {
    check_batch(GgmlType::Q5K, &[256, 768], false);
}

#[test]
fn batch_q6_k() {
    check_batch(GgmlType::Q6K, &[256, 768], false);
}

#[test]
fn batch_legacy() {
    for ty in [GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::Q8_0] {
        check_batch(ty, &[32, 96, 896], false);
    }
}

#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Align64([u8; 64]);

#[test]
fn gemv_q4_k() {
    // 1, 3, 6, 8 and 9 blocks: every remainder of the repacked order's four-block steps
    let cols = [256, 768, 1536, 2048, 2304];
    check_gemv(GgmlType::Q4K, &cols, false);
    check_gemv(GgmlType::Q4K, &cols, true);
}
#[test]
fn gemv_q5_k() {
    check_gemv(GgmlType::Q5K, &[256, 768, 1536, 2048, 2304], false);
}
#[test]
fn gemv_q4_0() {
    check_gemv(GgmlType::Q4_0, &[32, 96, 896], false);
}
#[test]
fn gemv_q5_0() {
    check_gemv(GgmlType::Q5_0, &[32, 96, 896], false);
}
#[test]
fn gemv_q8_0() {
    check_gemv(GgmlType::Q8_0, &[32, 96, 896], false);
}

#[test]
fn gemv_iq4_nl() {
    check_gemv(GgmlType::IQ4_NL, &[32, 96, 896], false);
}

#[test]
fn gemv_mxfp4() {
    check_gemv(GgmlType::MXFP4, &[32, 96, 896], false);
}

#[test]
fn q4_0() {
    check_type(GgmlType::Q4_0, &[32, 96, 896]);
}
#[test]
fn q4_1() {
    check_type(GgmlType::Q4_1, &[32, 96, 576]);
}
#[test]
fn q5_0() {
    check_type(GgmlType::Q5_0, &[32, 96, 896]);
}
#[test]
fn q5_1() {
    check_type(GgmlType::Q5_1, &[32, 160]);
}
#[test]
fn q8_0() {
    check_type(GgmlType::Q8_0, &[32, 96, 896]);
}
#[test]
fn q4_k() {
    check_type(GgmlType::Q4K, &[256, 768, 4864]);
}
/// Q4_K in llama.cpp's repacked GEMV and GEMM orders (`quant::vec_dot_repacked`), at every
/// level.
#[test]
fn q4_k_repacked() {
    if !available() {
        return;
    }
    for level in levels() {
        check_type_at(level, GgmlType::Q4K, &[256, 768, 4864], Order::Gemv);
        check_type_at(level, GgmlType::Q4K, &[256, 768, 4864], Order::Gemm);
    }
}
#[test]
fn q3_k() {
    check_type(GgmlType::Q3K, &[256, 768, 4864]);
}
#[test]
fn q2_k() {
    check_type(GgmlType::Q2K, &[256, 768, 4864]);
}
#[test]
fn q5_k() {
    check_type(GgmlType::Q5K, &[256, 768]);
}
#[test]
fn q6_k() {
    check_type(GgmlType::Q6K, &[256, 768, 4864]);
}
#[test]
fn f16() {
    check_type(GgmlType::F16, &[1, 7, 64, 100, 896]);
}
#[test]
fn bf16() {
    check_type(GgmlType::BF16, &[1, 7, 32, 100, 131, 896]);
}
#[test]
fn f32() {
    check_type(GgmlType::F32, &[1, 7, 64, 100, 131, 896, 2048]);
}

#[test]
fn quantizers_match_reference_bytes() {
    if !available() {
        return;
    }
    let mut rng = Rng(12345);
    for vt in [GgmlType::Q8_0, GgmlType::Q8_1, GgmlType::Q8K, GgmlType::F16] {
        let f = quantize_fn_at(LEVEL, vt).expect("quantizer");
        let cols_list: &[usize] = if vt == GgmlType::Q8K { &[256, 512, 4864] } else { &[32, 64, 896, 4864] };
        for &cols in cols_list {
            for rep in 0..20 {
                let mut x = rng.row(cols);
                if rep == 0 {
                    x.iter_mut().for_each(|v| *v = 0.0);
                }
                if rep == 1 {
                    // equal magnitudes of both signs: the first one decides Q8_K's sign
                    x.iter_mut().enumerate().for_each(|(i, v)| *v = if i % 3 == 0 { -1.5 } else { 1.5 });
                }
                let n = vt.row_bytes(cols).unwrap();
                let (mut want, mut got) = (vec![0u8; n], vec![0u8; n]);
                quant::quantize_row(vt, &x, &mut want);
                // SAFETY: sizes match; the features were checked by available().
                unsafe { f(&x, &mut got) };
                assert_eq!(got, want, "{} cols {cols} rep {rep}", vt.name());
            }
        }
    }
}

#[test]
fn env_var_forces_scalar_level_only_through_level() {
    // dot_fns_at(Scalar) never hands out SIMD kernels.
    for ty in GgmlType::ALL {
        assert!(dot_fns_at(Level::Scalar, ty).is_none());
        assert!(quantize_fn_at(Level::Scalar, ty).is_none());
    }
}

fn check_panels(ty: GgmlType, col_choices: &[usize]) {
    for level in levels() {
        for order in [SumOrder::Reference, SumOrder::Fast] {
            for repacked in [false, true] {
                if repacked && !quant::repacked_order(ty, 8) {
                    continue;
                }
                if let Some(fns) = panel_fns_at(level, ty, order, repacked) {
                    check_panels_at(level, fns, ty, col_choices, order == SumOrder::Reference && panel_is_exact(level, ty, repacked), if repacked { Order::Gemm } else { Order::VecDot });
                }
            }
        }
        // an expert stack's panels: bit for bit upstream's repacked GEMV
        if let Some(fns) = panel_fns_gemv_at(level, ty) {
            check_panels_at(level, fns, ty, col_choices, true, Order::Gemv);
        }
    }
}

/// Every (weight row, activation row) of the panels against the reference in `order` (bit for
/// bit if `exact`, else within 1e-5 of the absolute products).
fn check_panels_at(level: Level, fns: &PanelFns, ty: GgmlType, col_choices: &[usize], exact: bool, order: Order) {
    let vt = ty.vec_dot_type();
    let pr = fns.rows;
    let mut rng = Rng(0x1234_5678 ^ ty as u64);
    for &cols in col_choices {
        for raw in [false, true] {
            let nb = cols / ty.block_len();
            let n_act = 9;
            let arb = vt.row_bytes(cols).unwrap();
            let wrb = ty.row_bytes(cols).unwrap();
            let act = act_rows(&mut rng, vt, cols, n_act);
            let mut w = Vec::new();
            for _ in 0..pr + 1 {
                w.extend(weight_row(&mut rng, ty, cols, raw));
            }
            let mut aux = vec![ActAux::default(); n_act * nb];
            fill_act_aux(ty, &act, &mut aux);
            let mut panels = vec![vec![Align64([0; 64]); (nb * fns.block_bytes).div_ceil(64)]; 2];
            for (j0, panel) in panels.iter_mut().enumerate() {
                // SAFETY: rows j0..j0+pr of nb blocks exist; the panel has nb * block_bytes bytes,
                // 64-byte aligned; the level is supported.
                unsafe { (fns.unpack)(nb, w.as_ptr().add(j0 * wrb), wrb, panel.as_mut_ptr() as *mut u8) };
            }
            for (ri, f) in fns.gemm.iter().enumerate() {
                let r = ri + 1;
                for t0 in 0..=n_act - r {
                    for j0 in [0, 1] {
                        let stride = pr + 3;
                        let mut out = vec![f32::NAN; stride * r];
                        // SAFETY: weight rows j0..j0+pr and activation rows t0..t0+r exist; out
                        // has r rows of `stride` slots.
                        unsafe { f(nb, panels[j0].as_ptr() as *const u8, act.as_ptr().add(t0 * arb), arb, aux.as_ptr().add(t0 * nb), out.as_mut_ptr(), stride) };
                        for i in 0..r {
                            for j in 0..pr {
                                let (t, wr) = (t0 + i, j0 + j);
                                let (wrow, arow) = (&w[wr * wrb..(wr + 1) * wrb], &act[t * arb..(t + 1) * arb]);
                                let want = dot_ref(ty, cols, wrow, arow, order);
                                let got = out[i * stride + j];
                                if exact {
                                    assert_eq!(got.to_bits(), want.to_bits(), "{level:?} {} cols {cols} R {r} ({t}, {wr}): {got} vs {want} (bit for bit)", ty.name());
                                }
                                if order == Order::VecDot && panel_is_sgemm_exact(level, ty) {
                                    // the panels serve tinyBLAS's products (kernels::matmul)
                                    let want = dot_ref(ty, cols, wrow, arow, Order::Sgemm);
                                    assert_eq!(got.to_bits(), want.to_bits(), "{level:?} {} cols {cols} R {r} ({t}, {wr}): {got} vs tinyBLAS's {want} (bit for bit)", ty.name());
                                }
                                let tol = 1e-5 * abs_products(ty, cols, wrow, arow) + 1e-30;
                                assert!(((got - want) as f64).abs() <= tol, "{level:?} {} cols {cols} R {r} ({t}, {wr}): {got} vs {want}", ty.name());
                            }
                            assert!(out[i * stride + pr].is_nan());
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn ksigns64_is_upstreams_table() {
    for (i, &k) in crate::quant::iq_tables::KSIGNS_IQ2XS.iter().enumerate() {
        let bytes = avx2::KSIGNS64[i].to_le_bytes();
        for (j, &b) in bytes.iter().enumerate() {
            assert_eq!(b, if k >> j & 1 == 1 { 0xff } else { 1 }, "{i} {j}");
        }
    }
}

#[test]
fn iq2_xxs() {
    check_type(GgmlType::IQ2_XXS, &[256, 768, 4864]);
}
#[test]
fn iq2_xs() {
    check_type(GgmlType::IQ2_XS, &[256, 768, 4864]);
}
#[test]
fn iq2_s() {
    check_type(GgmlType::IQ2_S, &[256, 768, 4864]);
}
#[test]
fn iq3_xxs() {
    check_type(GgmlType::IQ3_XXS, &[256, 768, 4864]);
}
#[test]
fn iq3_s() {
    check_type(GgmlType::IQ3_S, &[256, 768, 4864]);
}
#[test]
fn iq1_s() {
    check_type(GgmlType::IQ1_S, &[256, 768, 4864]);
}
#[test]
fn iq4_xs() {
    check_type(GgmlType::IQ4_XS, &[256, 768, 4864]);
}
#[test]
fn iq4_nl() {
    check_type(GgmlType::IQ4_NL, &[32, 96, 224, 896]);
}
/// IQ4_NL in llamafile tinyBLAS's order (upstream's products of several activation rows with
/// a matrix it does not repack), at every level; and that order is not `vec_dot`'s (an odd
/// block count puts the last block through `vec_dot`'s scalar tail).
#[test]
fn iq4_nl_sgemm() {
    if !available() {
        return;
    }
    for level in levels() {
        check_type_at(level, GgmlType::IQ4_NL, &[32, 96, 224, 896], Order::Sgemm);
    }
    let mut rng = Rng(0x1234_5678);
    let cols = 96;
    let (w, a) = (weight_row(&mut rng, GgmlType::IQ4_NL, cols, false), act_rows(&mut rng, GgmlType::Q8_0, cols, 1));
    let differ = (0..64).any(|i| {
        let a: Vec<u8> = if i == 0 { a.clone() } else { act_rows(&mut rng, GgmlType::Q8_0, cols, 1) };
        quant::vec_dot_sgemm(GgmlType::IQ4_NL, cols, &w, &a).to_bits() != quant::vec_dot(GgmlType::IQ4_NL, cols, &w, &a).to_bits()
    });
    assert!(differ, "tinyBLAS's order gave vec_dot's bits on 64 random rows: the test would not see a swap");
}
#[test]
fn mxfp4() {
    check_type(GgmlType::MXFP4, &[32, 96, 224, 896]);
}

#[test]
fn iq1_m() {
    check_type(GgmlType::IQ1_M, &[256, 768, 4864]);
}
#[test]
fn tq1_0() {
    check_type(GgmlType::TQ1_0, &[256, 768, 4864]);
}
#[test]
fn tq2_0() {
    check_type(GgmlType::TQ2_0, &[256, 768, 4864]);
}
#[test]
fn nvfp4() {
    check_type(GgmlType::NVFP4, &[64, 192, 448, 896]);
}
#[test]
fn q1_0() {
    check_type(GgmlType::Q1_0, &[128, 384, 896]);
}
#[test]
fn q2_0() {
    check_type(GgmlType::Q2_0, &[64, 192, 448, 896]);
}

#[test]
fn panels_q4_0() {
    check_panels(GgmlType::Q4_0, &[32, 96, 896]);
}
#[test]
fn panels_q5_0() {
    check_panels(GgmlType::Q5_0, &[32, 96, 896]);
}
#[test]
fn panels_q8_0() {
    check_panels(GgmlType::Q8_0, &[32, 96, 896]);
}
#[test]
fn panels_iq4_nl() {
    check_panels(GgmlType::IQ4_NL, &[32, 96, 896]);
}
#[test]
fn panels_q4_k() {
    check_panels(GgmlType::Q4K, &[256, 768, 4864]);
}
#[test]
fn panels_q5_k() {
    check_panels(GgmlType::Q5K, &[256, 768, 4864]);
}
#[test]
fn panels_q6_k() {
    check_panels(GgmlType::Q6K, &[256, 768, 4864]);
}
#[test]
fn panels_q4_1() {
    check_panels(GgmlType::Q4_1, &[32, 96, 576]);
}
#[test]
fn panels_q5_1() {
    check_panels(GgmlType::Q5_1, &[32, 160]);
}

/// The tiled matmul's panels (`panel_fns_tiled_at`) give `quant::vec_dot_tiled`'s bits, for
/// every type llama.cpp's tiled matmul serves, at every level, on random blocks (raw bytes and,
/// where the type has one, the reference quantizer's), 1 to 8 activation rows per call.
#[test]
fn tiled_panels_are_the_reference_at_every_level() {
    let types = [GgmlType::Q2K, GgmlType::Q3K, GgmlType::Q4K, GgmlType::Q5K, GgmlType::Q6K, GgmlType::IQ4_XS, GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ2_S, GgmlType::IQ3_XXS, GgmlType::IQ3_S, GgmlType::IQ1_S, GgmlType::IQ1_M];
    for level in levels() {
        for ty in types {
            assert!(quant::tiled_order(ty));
            let fns = panel_fns_tiled_at(level, ty).unwrap_or_else(|| panic!("{level:?} has no tiled panel for {}", ty.name()));
            let pr = fns.rows;
            let mut rng = Rng(0x7165_d00d ^ ty as u64);
            for cols in [256, 768] {
                for raw in [false, true] {
                    let nb = cols / quant::QK_K;
                    let n_act = 9;
                    let arb = GgmlType::Q8K.row_bytes(cols).unwrap();
                    let wrb = ty.row_bytes(cols).unwrap();
                    let act = act_rows(&mut rng, GgmlType::Q8K, cols, n_act);
                    let w: Vec<u8> = (0..pr).flat_map(|_| weight_row(&mut rng, ty, cols, raw)).collect();
                    let mut panel = vec![Align64([0; 64]); (nb * fns.block_bytes).div_ceil(64)];
                    // SAFETY: pr rows of nb blocks; the panel has nb * block_bytes bytes, 64-byte
                    // aligned; the level is supported.
                    unsafe { (fns.unpack)(nb, w.as_ptr(), wrb, panel.as_mut_ptr() as *mut u8) };
                    for (ri, f) in fns.gemm.iter().enumerate() {
                        let r = ri + 1;
                        let t0 = n_act - r;
                        let stride = pr + 5;
                        let mut out = vec![f32::NAN; stride * r];
                        // SAFETY: activation rows t0..t0+r exist; out has r rows of `stride` slots.
                        unsafe { f(nb, panel.as_ptr() as *const u8, act.as_ptr().add(t0 * arb), arb, std::ptr::null(), out.as_mut_ptr(), stride) };
                        for i in 0..r {
                            for j in 0..pr {
                                let want = quant::vec_dot_tiled(ty, cols, &w[j * wrb..(j + 1) * wrb], &act[(t0 + i) * arb..(t0 + i + 1) * arb]);
                                let got = out[i * stride + j];
                                assert_eq!(got.to_bits(), want.to_bits(), "{level:?} {} cols {cols} raw {raw} R {r} ({}, {j}): {got} vs {want}", ty.name(), t0 + i);
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The per-row kernels in the tiled matmul's order (`dot_fns_tiled_at`: Q4_K, Q5_K, Q6_K) give
/// `quant::vec_dot_tiled`'s bits at every level, 1 to 8 activation rows per call.
#[test]
fn tiled_row_kernels_are_the_reference_at_every_level() {
    for level in levels() {
        for ty in [GgmlType::Q4K, GgmlType::Q5K, GgmlType::Q6K, GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ2_S, GgmlType::IQ3_XXS, GgmlType::IQ3_S, GgmlType::IQ4_XS, GgmlType::IQ1_S] {
            let fns = dot_fns_tiled_at(level, ty).unwrap_or_else(|| panic!("{level:?} has no tiled row kernels for {}", ty.name()));
            let mut rng = Rng(0x51ed_270b ^ ty as u64);
            for cols in [256, 1280] {
                for raw in [false, true] {
                    let n_act = 9;
                    let arb = GgmlType::Q8K.row_bytes(cols).unwrap();
                    let w = weight_row(&mut rng, ty, cols, raw);
                    let act = act_rows(&mut rng, GgmlType::Q8K, cols, n_act);
                    for (ri, f) in fns.iter().enumerate() {
                        let r = ri + 1;
                        let t0 = n_act - r;
                        let mut out = vec![f32::NAN; 3 * r];
                        // SAFETY: one weight row, activation rows t0..t0+r; out has r slots at stride 3.
                        unsafe { f(cols / quant::QK_K, w.as_ptr(), act.as_ptr().add(t0 * arb), arb, out.as_mut_ptr(), 3) };
                        for i in 0..r {
                            let want = quant::vec_dot_tiled(ty, cols, &w, &act[(t0 + i) * arb..(t0 + i + 1) * arb]);
                            assert_eq!(out[3 * i].to_bits(), want.to_bits(), "{level:?} {} cols {cols} raw {raw} R {r} row {}: {} vs {want}", ty.name(), t0 + i, out[3 * i]);
                        }
                    }
                }
            }
        }
    }
}

/// The AVX2 de-interleave gives the scalar one's bytes (and so the file's rows).
#[test]
fn deinterleave_q4_k_equals_scalar() {
    use crate::quant::interleave;
    let (rows, cols) = (12, 768);
    let rb = GgmlType::Q4K.row_bytes(cols).unwrap();
    let src: Vec<u8> = (0..rows * rb).map(|i| (i * 7 + i / 131) as u8).collect();
    let mut il = vec![0u8; src.len()];
    interleave::interleave_q4_k(&src, rows, cols, &mut il);
    let (mut a, mut b) = (vec![0u8; src.len()], vec![1u8; src.len()]);
    interleave::deinterleave_q4_k(&il, rows / 4, cols, &mut a);
    super::deinterleave_q4_k(&il, rows / 4, cols, &mut b);
    assert_eq!(a, src);
    assert_eq!(b, src, "{:?} level", super::level());
}
