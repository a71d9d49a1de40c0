//! Block: the dense SwiGLU feed-forward, down(silu(gate·x) ⊙ up·x), over the common
//! scratch's `xn` into its `proj`. Its gate/up buffers (`FfnScratch`) are shared with the
//! MoE block, which runs its experts through them.

use super::proj::{project, project_all};
use super::weights::{mat, Mat};
use super::{Common, Model};
use crate::gguf::GgufFile;
use crate::kernels::{swiglu_clamp_on, swiglu_on};
use crate::sys::alloc::try_zeroed;
use crate::threads::ThreadPool;

pub struct Ffn {
    pub gate: Mat,
    pub up: Mat,
    pub down: Mat,
    /// DeepSeek V4's SwiGLU clamp of gate and up (0: none).
    pub clamp: f32,
}

impl Ffn {
    /// `blk.{i}.ffn_{gate,up,down}{suffix}.weight` of width `ff`.
    pub fn load(f: &GgufFile, i: usize, suffix: &str, n_embd: usize, ff: usize) -> Result<Ffn, String> {
        let n = |s: &str| format!("blk.{i}.ffn_{s}{suffix}.weight");
        Ok(Ffn { gate: mat(f, &n("gate"), n_embd, ff)?, up: mat(f, &n("up"), n_embd, ff)?, down: mat(f, &n("down"), ff, n_embd)?, clamp: 0.0 })
    }

    pub fn mats(&self) -> [&Mat; 3] {
        [&self.gate, &self.up, &self.down]
    }
}

pub struct FfnScratch {
    pub gate: Vec<f32>,
    pub up: Vec<f32>,
}

impl FfnScratch {
    /// Room for `floats` values in each of gate and up.
    pub fn new(floats: usize) -> Result<FfnScratch, String> {
        Ok(FfnScratch { gate: try_zeroed(floats, "scratch")?, up: try_zeroed(floats, "scratch")? })
    }

    pub fn bytes(&self) -> usize {
        4 * (self.gate.len() + self.up.len())
    }
}

/// SwiGLU of `c.xn` (`n` rows) into `c.proj`.
pub fn forward(model: &Model, f: &Ffn, c: &mut Common, s: &mut FfnScratch, pool: &ThreadPool, n: usize) {
    let ff = f.gate.rows;
    project_all(model, pool, &mut c.act, &c.xn, n, [(&f.gate, &mut s.gate), (&f.up, &mut s.up)]);
    glu(pool, &mut s.gate[..n * ff], &s.up[..n * ff], ff, f.clamp);
    project(model, pool, &mut c.act, &f.down, &s.gate, n, &mut c.proj);
}

/// The gated unit over rows of `row`: ggml_swiglu, or ggml_swiglu_clamp when `clamp` > 0
/// (DeepSeek V4's shared and routed experts).
pub(super) fn glu(pool: &ThreadPool, gate: &mut [f32], up: &[f32], row: usize, clamp: f32) {
    if clamp > 0.0 {
        swiglu_clamp_on(pool, gate, up, row, clamp);
    } else {
        swiglu_on(pool, gate, up, row);
    }
}
