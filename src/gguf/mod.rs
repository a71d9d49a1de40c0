//! gguf: the GGUF container, versions 2 and 3. `reader` parses and validates untrusted bytes
//! (every count and length is checked against the bytes that remain before anything is
//! allocated from it); `split` joins the shards of a split model into one `GgufFile`; `writer`
//! produces files for tests and tools.

pub(crate) mod cursor;
pub mod reader;
pub mod split;
pub mod value;
pub mod writer;

pub use reader::{GgufFile, Source, TensorInfo};
pub use value::{GgufArray, GgufValue, ValueType};
pub use writer::GgufWriter;

/// "GGUF" read as a little-endian u32.
pub(crate) const MAGIC: u32 = 0x4655_4747;
pub(crate) const DEFAULT_ALIGNMENT: usize = 32;
pub(crate) const MAX_DIMS: usize = 4;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::GgmlType;

    fn sample() -> GgufWriter {
        let mut w = GgufWriter::new();
        w.kv("general.architecture", GgufValue::Str("llama".into()))
            .kv("a.u8", GgufValue::U8(7))
            .kv("a.i16", GgufValue::I16(-3))
            .kv("a.f64", GgufValue::F64(2.5))
            .kv("a.bool", GgufValue::Bool(true))
            .kv("a.strs", GgufValue::Array(GgufArray::Str(vec!["x".into(), "yz".into()])))
            .kv("a.nested", GgufValue::Array(GgufArray::Array(vec![GgufArray::I32(vec![1, 2]), GgufArray::F32(vec![0.5])])))
            .tensor("t0", &[4, 2], GgmlType::F32, (0..32).collect())
            .tensor("t1", &[32], GgmlType::Q8_0, vec![1; 34]);
        w
    }

    #[test]
    fn writer_output_reads_back() {
        let f = GgufFile::from_slice(&sample().to_bytes()).unwrap();
        assert_eq!(f.version, 3);
        assert_eq!(f.get_str("general.architecture"), Some("llama"));
        assert_eq!(f.get_u32("a.u8"), Some(7));
        assert_eq!(f.get_i64("a.i16"), Some(-3));
        assert_eq!(f.get_f32("a.f64"), Some(2.5));
        assert_eq!(f.get_bool("a.bool"), Some(true));
        assert_eq!(f.get_array("a.strs"), Some(&GgufArray::Str(vec!["x".into(), "yz".into()])));
        assert_eq!(f.get_array("a.nested").unwrap().len(), 2);
        let t1 = f.tensor("t1").unwrap();
        assert_eq!((t1.ty, t1.n_bytes, t1.file_offset % DEFAULT_ALIGNMENT), (GgmlType::Q8_0, 34, 0));
        assert_eq!(f.tensor_data(f.tensor("t0").unwrap()), &(0..32).collect::<Vec<u8>>()[..]);
    }

    #[test]
    fn every_truncation_is_rejected_with_a_reason() {
        let bytes = sample().to_bytes();
        let full = GgufFile::from_slice(&bytes).unwrap();
        // Padding after the last tensor's data is not needed; everything before it is.
        let end = full.tensors().iter().map(|t| t.file_offset + t.n_bytes).max().unwrap();
        assert!(GgufFile::from_slice(&bytes[..end]).is_ok());
        for n in 0..end {
            let err = GgufFile::from_slice(&bytes[..n]).err().unwrap_or_else(|| panic!("prefix of {n} bytes accepted"));
            assert!(!err.is_empty());
        }
    }

    #[test]
    fn custom_alignment_is_honoured_and_bad_ones_rejected() {
        let mut w = sample();
        w.kv("general.alignment", GgufValue::U32(64));
        let f = GgufFile::from_slice(&w.to_bytes()).unwrap();
        assert_eq!(f.alignment, 64);
        assert!(f.tensors().iter().all(|t| (t.file_offset) % 64 == 0));
        w.kv("general.alignment", GgufValue::U32(48));
        assert!(GgufFile::from_slice(&w.to_bytes()).err().unwrap().contains("alignment"));
    }

    #[test]
    fn duplicate_tensor_names_are_rejected() {
        let mut w = sample();
        w.tensor("t0", &[8], GgmlType::F32, vec![0; 32]);
        assert!(GgufFile::from_slice(&w.to_bytes()).err().unwrap().contains("duplicate tensor"));
    }
}
