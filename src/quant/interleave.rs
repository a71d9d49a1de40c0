//! Q4_K rows interleaved four at a time: the layout weights are repacked to at load (when
//! `use_extra_bufts`, upstream's default) for the several-row decode kernel
//! (`kernels::simd::avx2::gemv_q4_k_r4`), the layout ik_llama.cpp's `-rtr` uses for the same
//! reason. A group of 4 rows takes exactly the 4 rows' bytes, so group `g` of a matrix starts
//! where row `4g` would; within it super-block `ib` is 576 bytes:
//!
//! | bytes | content |
//! |---|---|
//! | 0..8 | the 4 rows' `d` (f16) |
//! | 8..16 | the 4 rows' `dmin` (f16) |
//! | 16..64 | the 4 rows' 12 scale bytes, row after row |
//! | 64..576 | per chunk `c` (64 elements) and slice `k` (8 bytes): 32 bytes = bytes `32c + 8k .. + 8` of the quants of rows 0, 1, 2, 3 |
//!
//! One 32-byte load then holds 8 elements of groups `2c` (low nibbles) and `2c + 1` (high) of
//! all four rows. Only the layout changes: every byte of the file's rows is kept, and
//! [`deinterleave_q4_k`] gives them back exactly.

use super::GgmlType;

/// Rows per interleaved group.
pub(crate) const GROUP_ROWS: usize = 4;

const B: usize = 144;

/// Whether a matrix of type `ty` with `rows` rows can take the interleaved layout.
pub fn can_interleave(ty: GgmlType, rows: usize) -> bool {
    ty == GgmlType::Q4K && rows % GROUP_ROWS == 0
}

/// One super-block's place in the interleaved group for row `r`: (destination offset within
/// the group's block, source offset within the row's block, length) for every run of bytes.
fn runs(r: usize) -> impl Iterator<Item = (usize, usize, usize)> {
    let head = [(2 * r, 0, 2), (8 + 2 * r, 2, 2), (16 + 12 * r, 4, 12)];
    let quants = (0..16).map(move |s| (64 + 32 * s + 8 * r, 16 + 8 * s, 8));
    head.into_iter().chain(quants)
}

/// Interleaves `rows` Q4_K rows of `cols` columns (`src`, the file's layout) into `dst` (the
/// same length). Panics unless `can_interleave` and the lengths match.
pub fn interleave_q4_k(src: &[u8], rows: usize, cols: usize, dst: &mut [u8]) {
    let rb = GgmlType::Q4K.row_bytes(cols).expect("Q4_K columns are a multiple of 256");
    assert!(can_interleave(GgmlType::Q4K, rows) && src.len() == rows * rb && dst.len() == src.len());
    let nb = rb / B;
    for (s, d) in src.chunks_exact(GROUP_ROWS * rb).zip(dst.chunks_exact_mut(GROUP_ROWS * rb)) {
        for ib in 0..nb {
            let o = &mut d[ib * GROUP_ROWS * B..(ib + 1) * GROUP_ROWS * B];
            for r in 0..GROUP_ROWS {
                let b = &s[r * rb + ib * B..r * rb + (ib + 1) * B];
                for (to, from, n) in runs(r) {
                    o[to..to + n].copy_from_slice(&b[from..from + n]);
                }
            }
        }
    }
}

/// The `groups` interleaved groups at `src` (each `GROUP_ROWS` rows of `cols` Q4_K columns)
/// back in the file's layout, row after row, into `dst`. On the several-row paths of every
/// matmul of an interleaved matrix: fixed-size moves only (8-byte words), no calls.
pub fn deinterleave_q4_k(src: &[u8], groups: usize, cols: usize, dst: &mut [u8]) {
    let rb = GgmlType::Q4K.row_bytes(cols).expect("Q4_K columns are a multiple of 256");
    let n = groups * GROUP_ROWS * rb;
    assert!(src.len() >= n && dst.len() >= n);
    let nb = rb / B;
    for (s, d) in src[..n].chunks_exact(GROUP_ROWS * rb).zip(dst[..n].chunks_exact_mut(GROUP_ROWS * rb)) {
        for ib in 0..nb {
            let o: &[u8; GROUP_ROWS * B] = s[ib * GROUP_ROWS * B..(ib + 1) * GROUP_ROWS * B].try_into().expect("one group's block");
            for r in 0..GROUP_ROWS {
                let b: &mut [u8; B] = (&mut d[r * rb + ib * B..r * rb + (ib + 1) * B]).try_into().expect("one block");
                b[0..2].copy_from_slice(&o[2 * r..2 * r + 2]);
                b[2..4].copy_from_slice(&o[8 + 2 * r..10 + 2 * r]);
                b[4..16].copy_from_slice(&o[16 + 12 * r..28 + 12 * r]);
                for k in 0..16 {
                    let at = 64 + 32 * k + 8 * r;
                    b[16 + 8 * k..24 + 8 * k].copy_from_slice(&o[at..at + 8]);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every byte lands where the layout table says, and de-interleaving gives the rows back.
    #[test]
    fn layout_and_round_trip() {
        let (rows, cols) = (8, 512);
        let rb = GgmlType::Q4K.row_bytes(cols).unwrap();
        let src: Vec<u8> = (0..rows * rb).map(|i| (i * 131 % 251) as u8).collect();
        let mut il = vec![0u8; src.len()];
        interleave_q4_k(&src, rows, cols, &mut il);
        // group 1, block 1, row 2: d, dmin, scales, and quant byte 32c + 8k + j
        let (g, ib, r) = (1, 1, 2);
        let row = &src[(4 * g + r) * rb + ib * B..][..B];
        let blk = &il[g * 4 * rb + ib * 4 * B..][..4 * B];
        assert_eq!(&blk[2 * r..2 * r + 2], &row[0..2]);
        assert_eq!(&blk[8 + 2 * r..8 + 2 * r + 2], &row[2..4]);
        assert_eq!(&blk[16 + 12 * r..28 + 12 * r], &row[4..16]);
        for (c, k, j) in [(0, 0, 0), (1, 2, 5), (3, 3, 7)] {
            assert_eq!(blk[64 + (4 * c + k) * 32 + 8 * r + j], row[16 + 32 * c + 8 * k + j]);
        }
        let mut back = vec![0u8; src.len()];
        deinterleave_q4_k(&il, rows / 4, cols, &mut back);
        assert_eq!(back, src);
        assert!(il != src);
    }
}
