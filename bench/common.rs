//! What the benchmark programs share.

use deepseek::quant::{self, GgmlType};

/// CPU seconds (all threads) used by the process so far.
pub fn cpu_seconds() -> f64 {
    // SAFETY: clock_gettime writes into the zeroed struct we own.
    let mut t: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) };
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

/// `rows` rows of type `ty` with `cols` columns at a real model's magnitudes: 16 distinct rows
/// repeated.
pub fn random_rows(ty: GgmlType, rows: usize, cols: usize) -> Vec<u8> {
    let rb = ty.row_bytes(cols).unwrap();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut x = vec![0f32; cols];
    let mut one = vec![0u8; rb];
    // a few distinct rows repeated: quantizing hundreds of MB with the reference is slow
    let distinct: Vec<Vec<u8>> = (0..16)
        .map(|_| {
            for v in x.iter_mut() {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                // a real model's magnitudes (|w| < 0.03): its scales, e.g. most Q6_K blocks'
                // d, are subnormal f16s, which a kernel must convert without a slow path
                *v = (((seed >> 40) as f32 / (1u64 << 24) as f32) - 0.5) * 0.06;
            }
            if ty.has_quantize_ref() {
                quant::quantize_row_ref(ty, &x, &mut one);
            } else {
                quant::random_blocks(ty, seed, &mut one);
            }
            one.clone()
        })
        .collect();
    let mut data = Vec::with_capacity(rb * rows);
    for r in 0..rows {
        data.extend_from_slice(&distinct[r % 16]);
    }
    data
}
