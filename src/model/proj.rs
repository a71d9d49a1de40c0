//! Projections: activation rows × weight matrices. The input is quantized once to the weight
//! type's activation format (`vec_dot_type`) and multiplied; projections of the same input
//! share one quantization and one pool job when their matrices take the same format.
//! Owns no buffers (the caller's scratch holds the quantized activations); never allocates.

use super::weights::{Mat, Stack};
use super::Model;
use crate::kernels::matmul::{activation_bytes, matmul, matmul_all, quantize_activations, Product};
use crate::threads::ThreadPool;

/// out[n × m.rows] = input[n × m.cols] · mᵀ.
pub fn project(model: &Model, pool: &ThreadPool, act: &mut [u8], m: &Mat, input: &[f32], n: usize, out: &mut [f32]) {
    quantize_activations(pool, m.ty, &input[..n * m.cols], m.cols, n, act);
    matmul(pool, &model.mat(m), act, n, &mut out[..n * m.rows]);
}

/// Several projections of the same input (Q, K, V; gate, up): one quantization and one pool
/// job per activation format among the matrices (one in all when they agree).
pub fn project_all<const N: usize>(model: &Model, pool: &ThreadPool, act: &mut [u8], input: &[f32], n: usize, targets: [(&Mat, &mut [f32]); N]) {
    let mut targets = targets.map(Some);
    for i in 0..N {
        let Some((m0, _)) = &targets[i] else { continue };
        let (ty, cols) = (m0.ty, m0.cols);
        let vt = ty.vec_dot_type();
        quantize_activations(pool, ty, &input[..n * cols], cols, n, act);
        let act = &*act;
        let group = targets[i..].iter_mut().filter(|t| t.as_ref().is_some_and(|(m, _)| m.ty.vec_dot_type() == vt)).map(|t| t.take().expect("filtered"));
        matmul_all(pool, n, group.map(|(m, out)| Product { w: model.mat(m), act, out: &mut out[..n * m.rows] }));
    }
}

/// One row per matrix of `stack` (`cols` each): out row x = stack[x] · input row x, in one
/// batch (decode-time per-head products).
pub fn project_heads(model: &Model, pool: &ThreadPool, act: &mut [u8], stack: &Stack, input: &[f32], out: &mut [f32]) {
    let (w0, count) = (&stack.first, stack.count);
    let arb = activation_bytes(w0.ty, w0.cols, 1);
    quantize_activations(pool, w0.ty, &input[..count * w0.cols], w0.cols, count, act);
    let act = &*act;
    let outs = out[..count * w0.rows].chunks_exact_mut(w0.rows);
    matmul_all(pool, 1, outs.enumerate().map(|(x, out)| Product { w: model.mat(&stack.get(x)), act: &act[x * arb..(x + 1) * arb], out }));
}

/// Activation bytes the projections of `mats` need for `n` rows.
pub fn act_bytes<'a>(mats: impl IntoIterator<Item = &'a Mat>, n: usize) -> usize {
    mats.into_iter().map(|m| activation_bytes(m.ty, m.cols, n)).max().unwrap_or(0)
}
