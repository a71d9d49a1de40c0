//! Metadata values: the 13 GGUF value types; arrays are stored typed so a 150k-entry vocabulary
//! is one Vec<String>, not 150k enum cells.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum ValueType {
    U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, Bool = 7, String = 8, Array = 9, U64 = 10, I64 = 11, F64 = 12,
}

impl ValueType {
    pub fn from_u32(v: u32) -> Option<ValueType> {
        use ValueType::*;
        Some(match v {
            0 => U8, 1 => I8, 2 => U16, 3 => I16, 4 => U32, 5 => I32, 6 => F32, 7 => Bool, 8 => String, 9 => Array,
            10 => U64, 11 => I64, 12 => F64, _ => return None,
        })
    }

    /// Smallest encoding of one value of this type (strings: an 8-byte length; arrays: type + count).
    pub fn min_encoded_len(self) -> usize {
        use ValueType::*;
        match self {
            U8 | I8 | Bool => 1, U16 | I16 => 2, U32 | I32 | F32 => 4, U64 | I64 | F64 | String => 8, Array => 12,
        }
    }

    /// The name upstream's gguf_type_name gives.
    pub fn name(self) -> &'static str {
        use ValueType::*;
        match self {
            U8 => "u8", I8 => "i8", U16 => "u16", I16 => "i16", U32 => "u32", I32 => "i32", F32 => "f32", Bool => "bool",
            String => "str", Array => "arr", U64 => "u64", I64 => "i64", F64 => "f64",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum GgufArray {
    U8(Vec<u8>), I8(Vec<i8>), U16(Vec<u16>), I16(Vec<i16>), U32(Vec<u32>), I32(Vec<i32>), F32(Vec<f32>),
    Bool(Vec<bool>), Str(Vec<String>), U64(Vec<u64>), I64(Vec<i64>), F64(Vec<f64>), Array(Vec<GgufArray>),
}

impl GgufArray {
    pub fn len(&self) -> usize {
        use GgufArray::*;
        match self {
            U8(v) => v.len(), I8(v) => v.len(), U16(v) => v.len(), I16(v) => v.len(), U32(v) => v.len(), I32(v) => v.len(),
            F32(v) => v.len(), Bool(v) => v.len(), Str(v) => v.len(), U64(v) => v.len(), I64(v) => v.len(),
            F64(v) => v.len(), Array(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn elem_type(&self) -> ValueType {
        use GgufArray::*;
        match self {
            U8(_) => ValueType::U8, I8(_) => ValueType::I8, U16(_) => ValueType::U16, I16(_) => ValueType::I16,
            U32(_) => ValueType::U32, I32(_) => ValueType::I32, F32(_) => ValueType::F32, Bool(_) => ValueType::Bool,
            Str(_) => ValueType::String, U64(_) => ValueType::U64, I64(_) => ValueType::I64, F64(_) => ValueType::F64,
            Array(_) => ValueType::Array,
        }
    }

    /// Element `i` as an i64 when the array holds integers.
    pub fn int_at(&self, i: usize) -> Option<i64> {
        use GgufArray::*;
        Some(match self {
            U8(v) => *v.get(i)? as i64, I8(v) => *v.get(i)? as i64, U16(v) => *v.get(i)? as i64, I16(v) => *v.get(i)? as i64,
            U32(v) => *v.get(i)? as i64, I32(v) => *v.get(i)? as i64, U64(v) => i64::try_from(*v.get(i)?).ok()?,
            I64(v) => *v.get(i)?, Bool(v) => *v.get(i)? as i64, _ => return None,
        })
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum GgufValue {
    U8(u8), I8(i8), U16(u16), I16(i16), U32(u32), I32(i32), F32(f32), Bool(bool), Str(String), Array(GgufArray),
    U64(u64), I64(i64), F64(f64),
}

impl GgufValue {
    pub fn value_type(&self) -> ValueType {
        use GgufValue::*;
        match self {
            U8(_) => ValueType::U8, I8(_) => ValueType::I8, U16(_) => ValueType::U16, I16(_) => ValueType::I16,
            U32(_) => ValueType::U32, I32(_) => ValueType::I32, F32(_) => ValueType::F32, Bool(_) => ValueType::Bool,
            Str(_) => ValueType::String, Array(_) => ValueType::Array, U64(_) => ValueType::U64, I64(_) => ValueType::I64,
            F64(_) => ValueType::F64,
        }
    }

    /// Any integer type (and bool) as i64; u64 beyond i64 is None.
    pub fn as_i64(&self) -> Option<i64> {
        use GgufValue::*;
        Some(match *self {
            U8(v) => v as i64, I8(v) => v as i64, U16(v) => v as i64, I16(v) => v as i64, U32(v) => v as i64,
            I32(v) => v as i64, U64(v) => i64::try_from(v).ok()?, I64(v) => v, Bool(v) => v as i64, _ => return None,
        })
    }

    /// Any numeric type as f64.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            GgufValue::F32(v) => Some(v as f64),
            GgufValue::F64(v) => Some(v),
            _ => self.as_i64().map(|v| v as f64),
        }
    }

    /// The value rendered the way upstream's llama_model_meta_val_str renders it.
    pub fn render(&self) -> String {
        use GgufValue::*;
        match self {
            U8(v) => v.to_string(), I8(v) => v.to_string(), U16(v) => v.to_string(), I16(v) => v.to_string(),
            U32(v) => v.to_string(), I32(v) => v.to_string(), U64(v) => v.to_string(), I64(v) => v.to_string(),
            F32(v) => format!("{:.6}", v), F64(v) => format!("{:.6}", v), Bool(v) => v.to_string(), Str(s) => s.clone(),
            Array(a) => format!("arr[{},{}]", a.elem_type().name(), a.len()),
        }
    }
}
