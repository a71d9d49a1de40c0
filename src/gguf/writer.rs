//! GGUF writer (version 3) for tests and tools: metadata in insertion order, tensors packed
//! in order at the file's alignment.

use super::value::{GgufArray, GgufValue};
use super::{DEFAULT_ALIGNMENT, MAGIC};
use crate::quant::GgmlType;

pub struct GgufWriter {
    kvs: Vec<(String, GgufValue)>,
    tensors: Vec<(String, Vec<usize>, GgmlType, Vec<u8>)>,
}

impl Default for GgufWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl GgufWriter {
    pub fn new() -> Self {
        GgufWriter { kvs: Vec::new(), tensors: Vec::new() }
    }

    /// Sets a key (replacing an earlier value of the same key).
    pub fn kv(&mut self, key: &str, value: GgufValue) -> &mut Self {
        match self.kvs.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = value,
            None => self.kvs.push((key.to_string(), value)),
        }
        self
    }

    pub fn remove_kv(&mut self, key: &str) -> &mut Self {
        self.kvs.retain(|(k, _)| k != key);
        self
    }

    /// Adds a tensor whose data is already encoded in `ty` (`dims[0]` is the row length).
    pub fn tensor(&mut self, name: &str, dims: &[usize], ty: GgmlType, data: Vec<u8>) -> &mut Self {
        self.tensors.push((name.to_string(), dims.to_vec(), ty, data));
        self
    }

    pub fn alignment(&self) -> usize {
        match self.kvs.iter().find(|(k, _)| k == "general.alignment") {
            Some((_, GgufValue::U32(a))) if a.is_power_of_two() => *a as usize,
            _ => DEFAULT_ALIGNMENT,
        }
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let align = self.alignment();
        let mut out = self.header();
        for (_, _, _, data) in &self.tensors {
            out.extend_from_slice(data);
            out.resize(out.len().next_multiple_of(align), 0);
        }
        out
    }

    /// Everything before the tensor data: header, metadata, tensor infos, padding.
    fn header(&self) -> Vec<u8> {
        let align = self.alignment();
        let mut out = Vec::new();
        out.extend_from_slice(&MAGIC.to_le_bytes());
        out.extend_from_slice(&3u32.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.kvs.len() as u64).to_le_bytes());
        for (k, v) in &self.kvs {
            put_str(&mut out, k);
            out.extend_from_slice(&(v.value_type() as u32).to_le_bytes());
            put_value(&mut out, v);
        }
        let mut offset = 0usize;
        for (name, dims, ty, data) in &self.tensors {
            put_str(&mut out, name);
            out.extend_from_slice(&(dims.len() as u32).to_le_bytes());
            for d in dims {
                out.extend_from_slice(&(*d as u64).to_le_bytes());
            }
            out.extend_from_slice(&(*ty as u32).to_le_bytes());
            out.extend_from_slice(&(offset as u64).to_le_bytes());
            offset += data.len().next_multiple_of(align);
        }
        out.resize(out.len().next_multiple_of(align), 0);
        out
    }

    /// Writes the file, streaming the tensors (no second copy of their data in memory).
    pub fn write(&self, path: &std::path::Path) -> std::io::Result<()> {
        use std::io::Write;
        let align = self.alignment();
        let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
        let header = self.header();
        f.write_all(&header)?;
        let pad = [0u8; 4096];
        for (_, _, _, data) in &self.tensors {
            f.write_all(data)?;
            let mut left = data.len().next_multiple_of(align) - data.len();
            while left > 0 {
                let k = left.min(pad.len());
                f.write_all(&pad[..k])?;
                left -= k;
            }
        }
        f.flush()
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_value(out: &mut Vec<u8>, v: &GgufValue) {
    match v {
        GgufValue::U8(x) => out.push(*x),
        GgufValue::I8(x) => out.push(*x as u8),
        GgufValue::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::Bool(x) => out.push(*x as u8),
        GgufValue::Str(s) => put_str(out, s),
        GgufValue::Array(a) => put_array(out, a),
    }
}

fn put_array(out: &mut Vec<u8>, a: &GgufArray) {
    out.extend_from_slice(&(a.elem_type() as u32).to_le_bytes());
    out.extend_from_slice(&(a.len() as u64).to_le_bytes());
    macro_rules! each {
        ($v:expr) => {
            for x in $v {
                out.extend_from_slice(&x.to_le_bytes());
            }
        };
    }
    match a {
        GgufArray::U8(v) => out.extend_from_slice(v),
        GgufArray::I8(v) => out.extend(v.iter().map(|&x| x as u8)),
        GgufArray::Bool(v) => out.extend(v.iter().map(|&x| x as u8)),
        GgufArray::U16(v) => each!(v),
        GgufArray::I16(v) => each!(v),
        GgufArray::U32(v) => each!(v),
        GgufArray::I32(v) => each!(v),
        GgufArray::F32(v) => each!(v),
        GgufArray::U64(v) => each!(v),
        GgufArray::I64(v) => each!(v),
        GgufArray::F64(v) => each!(v),
        GgufArray::Str(v) => v.iter().for_each(|s| put_str(out, s)),
        GgufArray::Array(v) => v.iter().for_each(|x| put_array(out, x)),
    }
}
