//! Scalar model of the x86 SIMD accumulation order used by ggml-cpu.
//!
//! The AVX2 dot kernels load 32 consecutive int8 quants into a 256-bit
//! register and reduce products with `maddubs`/`madd` (or VNNI `dpbusd`),
//! so 32-bit lane `k` holds the products of elements `4k..4k+4` of every
//! 32-element group. Each lane is converted to f32 and accumulated with one
//! FMA per block; at the end the 8 lanes are summed by `hsum_float_8`.
//! Integer sums are exact, so only the lane assignment and the float steps
//! need to be reproduced.

/// An emulated `__m256` float accumulator.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Acc8([f32; 8]);

impl Acc8 {
    pub(crate) const fn new() -> Self {
        Acc8([0.0; 8])
    }

    /// `acc = _mm256_fmadd_ps(set1(d), cvtepi32_ps(v), acc)`.
    #[inline(always)]
    pub(crate) fn fma(&mut self, d: f32, v: &[i32; 8]) {
        for (a, &x) in self.0.iter_mut().zip(v) {
            *a = d.mul_add(x as f32, *a);
        }
    }

    /// `acc = _mm256_fmadd_ps(set_m128(set1(hi), set1(lo)), cvtepi32_ps(v), acc)`: lanes 0..4
    /// scaled by `lo`, 4..8 by `hi`.
    #[inline(always)]
    pub(crate) fn fma_halves(&mut self, lo: f32, hi: f32, v: &[i32; 8]) {
        for (k, (a, &x)) in self.0.iter_mut().zip(v).enumerate() {
            *a = if k < 4 { lo } else { hi }.mul_add(x as f32, *a);
        }
    }

    /// `_mm256_mul_ps(set1(d), cvtepi32_ps(v))`.
    #[inline(always)]
    pub(crate) fn mul(d: f32, v: &[i32; 8]) -> Acc8 {
        Acc8(v.map(|x| d * x as f32))
    }

    /// `acc = _mm256_fmadd_ps(set1(d), v, acc)` with a float vector `v`.
    #[inline(always)]
    pub(crate) fn fma_acc(&mut self, d: f32, v: &Acc8) {
        for (a, &x) in self.0.iter_mut().zip(&v.0) {
            *a = d.mul_add(x, *a);
        }
    }

    /// Lane-wise `self + other` (`_mm256_add_ps`).
    #[inline(always)]
    pub(crate) fn add(&self, other: &Acc8) -> Acc8 {
        Acc8(std::array::from_fn(|k| self.0[k] + other.0[k]))
    }

    /// `hsum_float_8`: ((l0+l4) + (l2+l6)) + ((l1+l5) + (l3+l7)).
    #[inline(always)]
    pub(crate) fn hsum(&self) -> f32 {
        let a = &self.0;
        let r = [a[0] + a[4], a[1] + a[5], a[2] + a[6], a[3] + a[7]];
        (r[0] + r[2]) + (r[1] + r[3])
    }
}

/// Per-lane integer dot products of 32 weight quants with 32 int8
/// activation quants (raw bytes): lane `k` = sum over elements `4k..4k+4`.
#[inline(always)]
pub(crate) fn dot32(w: &[i8; 32], a: &[u8; 32]) -> [i32; 8] {
    let mut out = [0i32; 8];
    for ((o, wc), ac) in out
        .iter_mut()
        .zip(w.as_chunks::<4>().0)
        .zip(a.as_chunks::<4>().0)
    {
        *o = wc
            .iter()
            .zip(ac)
            .map(|(&x, &y)| x as i32 * (y as i8) as i32)
            .sum();
    }
    out
}

/// `_mm512_reduce_add_ps` (GCC/Clang tree): halves, then quarters, then
/// (0+2) + (1+3).
#[inline(always)]
pub(crate) fn reduce16(v: &[f32; 16]) -> f32 {
    let mut t = [0f32; 8];
    for (i, t) in t.iter_mut().enumerate() {
        *t = v[i] + v[i + 8];
    }
    let u = [t[0] + t[4], t[1] + t[5], t[2] + t[6], t[3] + t[7]];
    (u[0] + u[2]) + (u[1] + u[3])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot32_lanes() {
        let mut w = [0i8; 32];
        let mut a = [0u8; 32];
        for i in 0..32 {
            w[i] = (i as i8) - 16;
            a[i] = (((i * 37) % 255) as i32 - 127) as i8 as u8;
        }
        let l = dot32(&w, &a);
        for (k, lane) in l.iter().enumerate() {
            let want: i32 = (4 * k..4 * k + 4)
                .map(|i| w[i] as i32 * a[i] as i8 as i32)
                .sum();
            assert_eq!(*lane, want);
        }
    }

    #[test]
    fn hsum_order() {
        // (1e8 + -1e8) in lanes 0/4 cancels before 1.0 in lane 2 is touched
        let acc = Acc8([1e8, 0.0, 1.0, 0.0, -1e8, 0.0, 0.0, 0.0]);
        assert_eq!(acc.hsum(), 1.0);
        let acc = Acc8([1e8, 0.0, 1.0, 0.0, 0.0, -1e8, 0.0, 0.0]);
        assert_eq!(acc.hsum(), 0.0); // (1e8+1) rounds to 1e8, then - 1e8
        let mut v = [0f32; 16];
        v[0] = 1e8;
        v[8] = -1e8;
        v[3] = 1.0;
        assert_eq!(reduce16(&v), 1.0);
        v[8] = 0.0;
        v[4] = -1e8;
        assert_eq!(reduce16(&v), 1.0);
        // (l0 + l2) + (l1 + l3): a sequential sum would give 0 here
        let mut v = [0f32; 16];
        v[0] = 1e8;
        v[1] = 1.0;
        v[2] = -1e8;
        assert_eq!(reduce16(&v), 1.0);
    }

    #[test]
    fn fma_is_fused() {
        let mut acc = Acc8::new();
        // (1 + 2^-23) * (2^23 + 1) = 2^23 + 2 + 2^-23: the 2^-23 survives
        // only when the product is not rounded before the addition.
        acc.0 = [-8_388_610.0; 8];
        acc.fma(1.0 + 2f32.powi(-23), &[8_388_609; 8]);
        assert_eq!(acc.0[0], 2f32.powi(-23));
    }
}
