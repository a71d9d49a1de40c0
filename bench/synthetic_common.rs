//! What the synthetic-model writers share (`make_synthetic_deepseek2.rs`,
//! `make_synthetic_deepseek4.rs`): a small random generator and Q4_K_M-style quantized matrices.

use deepseek::quant::{quantize_row_ref, GgmlType};

pub struct Rng(pub u64);
impl Rng {
    /// Roughly normal (sum of 4 uniforms), scaled.
    pub fn normal(&mut self, scale: f32) -> f32 {
        let mut s = 0.0;
        for _ in 0..4 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            s += (self.0 >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
        }
        s * scale * 1.7
    }
}

/// `count` matrices of rows × cols in the type llama-quantize's Q4_K_M would pick for that row length.
pub fn matrix(rng: &mut Rng, cols: usize, rows: usize, count: usize, preferred: GgmlType) -> (GgmlType, Vec<u8>) {
    let ty = if cols % 256 == 0 { preferred } else if preferred == GgmlType::Q6K { GgmlType::Q8_0 } else { GgmlType::Q5_0 };
    let row_bytes = ty.row_bytes(cols).unwrap();
    let mut data = vec![0u8; row_bytes * rows * count];
    let mut src = vec![0f32; cols];
    let scale = 1.0 / (cols as f32).sqrt();
    for r in 0..rows * count {
        src.iter_mut().for_each(|x| *x = rng.normal(scale));
        quantize_row_ref(ty, &src, &mut data[r * row_bytes..(r + 1) * row_bytes]);
    }
    (ty, data)
}

pub fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

