//! Weight matrix × activation rows. Weights stay in their GGUF block format; activations are
//! quantized once per row to the weight type's vec_dot_type (as ggml does), and every output
//! is one integer-accumulated dot product. Rows of the weight are split across the pool.

use crate::quant::{self, GgmlType};
use crate::threads::{split_range, SharedOut, ThreadPool};

/// A borrowed weight matrix: `rows` rows of `cols` elements, each `ty.row_bytes(cols)` bytes.
#[derive(Clone, Copy)]
pub struct WeightMatrix<'a> {
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    pub data: &'a [u8],
}

impl WeightMatrix<'_> {
    pub fn row_bytes(&self) -> usize {
        self.ty.row_bytes(self.cols).expect("validated at load")
    }
    pub fn row(&self, r: usize) -> &[u8] {
        let rb = self.row_bytes();
        &self.data[r * rb..(r + 1) * rb]
    }
}

/// Bytes needed to hold `n_rows` activation rows of `cols` elements quantized for `w_ty`.
pub fn activation_bytes(w_ty: GgmlType, cols: usize, n_rows: usize) -> usize {
    w_ty.vec_dot_type().row_bytes(cols).expect("validated at load") * n_rows
}

/// Quantizes `n_rows` rows of `x` (each `cols` long) for multiplication with `w_ty` weights.
pub fn quantize_activations(w_ty: GgmlType, x: &[f32], cols: usize, n_rows: usize, dst: &mut [u8]) {
    let vt = w_ty.vec_dot_type();
    let rb = vt.row_bytes(cols).expect("validated at load");
    for r in 0..n_rows {
        quant::quantize_row(vt, &x[r * cols..(r + 1) * cols], &mut dst[r * rb..(r + 1) * rb]);
    }
}

/// out[t * w.rows + r] = dot(w.row(r), act row t), for t < n_rows.
pub fn matmul(pool: &ThreadPool, w: &WeightMatrix<'_>, act: &[u8], n_rows: usize, out: &mut [f32]) {
    let arb = w.ty.vec_dot_type().row_bytes(w.cols).expect("validated at load");
    assert!(act.len() >= arb * n_rows && out.len() >= w.rows * n_rows);
    let shared = SharedOut::new(out);
    pool.run(&|ith, nth| {
        let rows = split_range(w.rows, ith, nth);
        for t in 0..n_rows {
            let a = &act[t * arb..(t + 1) * arb];
            // SAFETY: thread ith alone writes rows `rows` of output row t.
            let o = unsafe { shared.slice(t * w.rows + rows.start..t * w.rows + rows.end) };
            for (i, r) in rows.clone().enumerate() {
                o[i] = quant::vec_dot(w.ty, w.cols, w.row(r), a);
            }
        }
    });
}
