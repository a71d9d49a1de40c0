//! quant: GGML block formats. (Temporary: type table only; the full module lands from branch `quant`.)

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum GgmlType {
    F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9, Q2K = 10, Q3K = 11,
    Q4K = 12, Q5K = 13, Q6K = 14, Q8K = 15, I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, BF16 = 30,
}

impl GgmlType {
    pub fn from_u32(v: u32) -> Option<GgmlType> {
        use GgmlType::*;
        Some(match v {
            0 => F32, 1 => F16, 2 => Q4_0, 3 => Q4_1, 6 => Q5_0, 7 => Q5_1, 8 => Q8_0, 9 => Q8_1, 10 => Q2K,
            11 => Q3K, 12 => Q4K, 13 => Q5K, 14 => Q6K, 15 => Q8K, 24 => I8, 25 => I16, 26 => I32, 27 => I64,
            28 => F64, 30 => BF16, _ => return None,
        })
    }
    pub fn name(self) -> &'static str { "?" }
    pub fn block_len(self) -> usize {
        use GgmlType::*;
        match self { F32 | F16 | BF16 | I8 | I16 | I32 | I64 | F64 => 1, Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | Q8_1 => 32, _ => 256 }
    }
    pub fn block_bytes(self) -> usize {
        use GgmlType::*;
        match self {
            F32 => 4, F16 | BF16 => 2, I8 => 1, I16 => 2, I32 => 4, I64 | F64 => 8, Q4_0 => 18, Q4_1 => 20, Q5_0 => 22,
            Q5_1 => 24, Q8_0 => 34, Q8_1 => 36, Q2K => 84, Q3K => 110, Q4K => 144, Q5K => 176, Q6K => 210, Q8K => 292,
        }
    }
    pub fn row_bytes(self, n: usize) -> Option<usize> {
        if n % self.block_len() != 0 { return None; }
        (n / self.block_len()).checked_mul(self.block_bytes())
    }
    pub fn is_weight_type(self) -> bool {
        use GgmlType::*;
        matches!(self, F32 | F16 | BF16 | Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | Q2K | Q3K | Q4K | Q5K | Q6K)
    }
}
