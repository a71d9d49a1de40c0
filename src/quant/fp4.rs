//! What MXFP4 and NVFP4 share: the E2M1 codebook (doubled, `kvalues_fp4`) and the scales'
//! decoders, `ggml_e8m0_to_fp32_half` and `ggml_ue4m3_to_fp32` (ggml/src/ggml-impl.h:489, :514;
//! both halve, for the doubled codebook).

pub(crate) use super::iq_tables::KVALUES_FP4;

/// `ggml_e8m0_to_fp32_half`: 2^(x − 128), the two smallest as the denormals 2^−128, 2^−127.
#[inline(always)]
pub(crate) fn e8m0_half(x: u8) -> f32 {
    f32::from_bits(if x < 2 { 0x0020_0000 << x } else { ((x - 1) as u32) << 23 })
}

/// `ggml_ue4m3_to_fp32`: unsigned E4M3 (bias 7, bit 7 ignored) × 0.5; 0x00 and 0x7f → 0.
#[inline(always)]
pub(crate) fn ue4m3(x: u8) -> f32 {
    UE4M3[x as usize]
}

/// [`ue4m3`] of every byte, built at compile time from the definition (upstream's `ldexpf`
/// values are exact, so these are its bits: checked in the tests).
static UE4M3: [f32; 256] = {
    let mut t = [0f32; 256];
    let mut x = 0;
    while x < 256 {
        let (exp, man) = ((x >> 3) & 0xf, (x & 7) as u32);
        t[x] = if x == 0 || x == 0x7f {
            0.0
        } else if exp == 0 {
            // man · 2^-9, halved: man · 2^-10, exact
            man as f32 / 1024.0
        } else {
            // (1 + man/8) · 2^(exp − 7), halved: exponent exp − 8
            f32::from_bits(((exp as u32 + 119) << 23) | (man << 20))
        };
        x += 1;
    }
    t
};

/// 32 nibbles through `table`: element `j` the low nibble of `qs[j]`, `j + 16` the high one.
#[inline(always)]
pub(crate) fn lookup32(qs: &[u8; 16], table: &[i8; 16]) -> [i8; 32] {
    std::array::from_fn(|e| table[if e < 16 { qs[e] & 15 } else { qs[e - 16] >> 4 } as usize])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_decoders() {
        assert_eq!(e8m0_half(128), 1.0);
        assert_eq!(e8m0_half(127), 0.5);
        assert_eq!(e8m0_half(0), 2f32.powi(-128));
        assert_eq!(e8m0_half(1), 2f32.powi(-127));
        assert_eq!(e8m0_half(255), 2f32.powi(127));
        assert_eq!(ue4m3(0x38), 0.5); // exp 7, man 0: 1.0, halved
        assert_eq!(ue4m3(0x01), 2f32.powi(-10)); // denormal 1·2^-9, halved
        assert_eq!(ue4m3(0x7f), 0.0);
        assert_eq!(ue4m3(0x7e), 448.0 / 2.0); // largest finite E4M3
        assert_eq!(ue4m3(0xb8), 0.5); // bit 7 ignored
        // every byte against ggml_ue4m3_to_fp32 written out (ldexpf, then × 0.5)
        for x in 0..=255u8 {
            let (exp, man) = (((x >> 3) & 0xf) as i32, (x & 7) as f32);
            let want = if x == 0 || x == 0x7f {
                0.0
            } else if exp == 0 {
                man * 2f32.powi(-9) * 0.5
            } else {
                (1.0 + man / 8.0) * 2f32.powi(exp - 7) * 0.5
            };
            assert_eq!(ue4m3(x).to_bits(), want.to_bits(), "{x:#x}");
        }
    }
}
