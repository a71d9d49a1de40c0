//! GGUF reader: validates the whole header and tensor table of untrusted bytes, then gives
//! borrowed views of tensor data. Rejections carry a reason naming what was wrong and where.

use std::collections::HashMap;
use std::path::Path;

use super::cursor::Cursor;
use super::value::{GgufArray, GgufValue, ValueType};
use super::{DEFAULT_ALIGNMENT, MAGIC, MAX_DIMS};
use crate::quant::GgmlType;
use crate::sys::bytes::FileBytes;

/// Nesting limit for arrays of arrays: deep enough for any real file, shallow enough that a
/// hostile file cannot exhaust the stack.
const MAX_ARRAY_DEPTH: usize = 4;

#[derive(Clone, Debug)]
pub struct TensorInfo {
    pub name: String,
    /// ne[0] is the row length (contiguous), as in ggml.
    pub dims: Vec<usize>,
    pub ty: GgmlType,
    /// Which file of a split model holds the data (0 for an unsplit file).
    pub shard: usize,
    /// Offset of the data from the start of its file.
    pub file_offset: usize,
    pub n_bytes: usize,
}

impl TensorInfo {
    pub fn n_elements(&self) -> usize {
        self.dims.iter().product()
    }
    /// Dimension `i`, 1 beyond the stored ones (ggml's convention).
    pub fn ne(&self, i: usize) -> usize {
        self.dims.get(i).copied().unwrap_or(1)
    }
}

/// Where a model's GGUF data comes from.
#[derive(Clone, Copy, Debug)]
pub enum Source<'a> {
    /// One file; the first shard of a split model brings the others (`GgufFile::open`).
    File(&'a Path),
    /// The shards of a split model, in order (`GgufFile::open_paths`).
    Splits(&'a [&'a Path]),
}

impl Source<'_> {
    /// The path errors name: the file, or the first shard.
    pub fn display(&self) -> String {
        match self {
            Source::File(p) => p.display().to_string(),
            Source::Splits(ps) => ps.first().map_or_else(|| "(no files)".into(), |p| p.display().to_string()),
        }
    }
}

/// A model's GGUF data: one file, or the shards of a split model (`split.rs`) seen as one —
/// the first shard's metadata, every shard's tensors in one index, each shard's bytes mapped
/// (or read) separately and released together when this is dropped.
pub struct GgufFile {
    pub version: u32,
    pub alignment: usize,
    pub data_offset: usize,
    kvs: Vec<(String, GgufValue)>,
    kv_index: HashMap<String, usize>,
    tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
    shards: Vec<FileBytes>,
    /// Byte ranges given back to the OS (`release`), per shard, sorted: never read again.
    released: Vec<(usize, std::ops::Range<usize>)>,
}

// Opening by path (`open`, `open_paths`, `open_source`) and `from_slices` are in `split.rs`:
// they take a split model's shards as well as one file.
impl GgufFile {
    /// One file, its tensors marked as held by shard `shard`.
    pub(super) fn open_one(path: &Path, mmap: bool, shard: usize) -> Result<GgufFile, String> {
        let bytes = if mmap { FileBytes::map(path)? } else { FileBytes::read(path)? };
        Self::parse(bytes, shard)
    }

    /// Parses bytes already in memory (copied into an owned aligned buffer).
    pub fn from_slice(data: &[u8]) -> Result<GgufFile, String> {
        Self::parse(FileBytes::from_slice(data)?, 0)
    }

    pub(super) fn parse(bytes: FileBytes, shard: usize) -> Result<GgufFile, String> {
        let (version, alignment, data_offset, kvs, mut tensors) = parse_layout(bytes.as_slice())?;
        let mut kv_index = HashMap::with_capacity(kvs.len());
        for (i, (k, _)) in kvs.iter().enumerate() {
            if kv_index.insert(k.clone(), i).is_some() {
                return Err(format!("duplicate metadata key '{k}'"));
            }
        }
        let mut tensor_index = HashMap::with_capacity(tensors.len());
        for (i, t) in tensors.iter_mut().enumerate() {
            t.shard = shard;
            if tensor_index.insert(t.name.clone(), i).is_some() {
                return Err(format!("duplicate tensor name '{}'", t.name));
            }
        }
        Ok(GgufFile { version, alignment, data_offset, kvs, kv_index, tensors, tensor_index, shards: vec![bytes], released: Vec::new() })
    }

    /// Adds `other`'s tensors and bytes as the next shard (its metadata is dropped); a tensor
    /// name already present is an error naming both shards.
    pub(super) fn append_shard(&mut self, other: GgufFile) -> Result<(), String> {
        let shard = self.shards.len();
        for t in other.tensors {
            if let Some(&i) = self.tensor_index.get(&t.name) {
                return Err(format!("invalid model: tensor '{}' is duplicated (in shards {} and {})", t.name, self.tensors[i].shard + 1, shard + 1));
            }
            self.tensor_index.insert(t.name.clone(), self.tensors.len());
            self.tensors.push(TensorInfo { shard, ..t });
        }
        self.shards.extend(other.shards);
        Ok(())
    }

    /// Adds tensors the loader derives from the file's own (e.g. a legacy layout converted to
    /// the current one) as one more shard, owned (copied into one aligned buffer, 64-byte
    /// aligned each) and freed with the rest. Their names must be new.
    pub fn append_owned(&mut self, tensors: Vec<(String, Vec<usize>, GgmlType, Vec<u8>)>) -> Result<(), String> {
        const ALIGN: usize = 64;
        let total = tensors.iter().try_fold(0usize, |a, t| t.3.len().checked_next_multiple_of(ALIGN).and_then(|n| a.checked_add(n))).ok_or("derived tensors overflow")?;
        let mut buf = crate::sys::pages::Pages::<u8>::zeroed(total, "derived tensors")?;
        let shard = self.shards.len();
        let mut off = 0;
        for (name, dims, ty, bytes) in tensors {
            if self.tensor_index.contains_key(&name) {
                return Err(format!("derived tensor '{name}' already exists in the file"));
            }
            let n_elems: usize = dims.iter().product();
            if dims[0] % ty.block_len() != 0 || n_elems / ty.block_len() * ty.block_bytes() != bytes.len() {
                return Err(format!("derived tensor '{name}': {} bytes do not fit {dims:?} of {}", bytes.len(), ty.name()));
            }
            buf.as_mut_slice()[off..off + bytes.len()].copy_from_slice(&bytes);
            self.tensor_index.insert(name.clone(), self.tensors.len());
            self.tensors.push(TensorInfo { name, dims, ty, shard, file_offset: off, n_bytes: bytes.len() });
            off += bytes.len().next_multiple_of(ALIGN);
        }
        self.shards.push(FileBytes::from_pages(buf));
        Ok(())
    }

    /// Whether the bytes are mapped (all shards are, or none).
    pub fn is_mapped(&self) -> bool {
        self.shards[0].is_mapped()
    }
    /// The bytes of every shard (the files, and derived tensors).
    pub fn file_len(&self) -> usize {
        self.shards.iter().map(|b| b.as_slice().len()).sum()
    }
    /// Pages every shard's bytes in (see [`FileBytes::touch`]), but the released ones.
    pub fn touch(&self) {
        for (i, b) in self.shards.iter().enumerate() {
            self.kept(i).for_each(|r| b.touch(r));
        }
    }
    /// Locks every shard's bytes in RAM (see [`FileBytes::lock`]), but the released ones.
    pub fn lock_memory(&self) -> Result<(), String> {
        for (i, b) in self.shards.iter().enumerate() {
            self.kept(i).try_for_each(|r| b.lock(r))?;
        }
        Ok(())
    }
    /// Gives the pages of `ranges` (shard, bytes) back to the OS: tensors whose bytes nobody
    /// reads again (repacked into a buffer of their own). `touch` and `lock_memory` skip them.
    pub fn release(&mut self, ranges: &[(usize, std::ops::Range<usize>)]) {
        for (shard, r) in ranges {
            self.shards[*shard].release(r.clone());
        }
        self.mark_released(ranges);
    }
    /// The pages of `range` of shard `shard` back to the OS now, through a shared reference
    /// (threads repacking different tensors); [`GgufFile::mark_released`] records it after.
    ///
    /// # Safety
    /// As [`FileBytes::discard`]: nothing reads those bytes again.
    pub unsafe fn discard(&self, shard: usize, range: std::ops::Range<usize>) {
        // SAFETY: forwarded contract.
        unsafe { self.shards[shard].discard(range) }
    }
    /// Records ranges given back with [`GgufFile::discard`] (`touch` and `lock_memory` skip them).
    pub fn mark_released(&mut self, ranges: &[(usize, std::ops::Range<usize>)]) {
        self.released.extend(ranges.iter().cloned());
        self.released.sort_by_key(|(s, r)| (*s, r.start));
    }
    /// The byte ranges of shard `shard` not released, page-rounded outwards.
    fn kept(&self, shard: usize) -> impl Iterator<Item = std::ops::Range<usize>> + '_ {
        let page = crate::sys::bytes::page_size();
        let len = self.shards[shard].as_slice().len();
        let gone: Vec<std::ops::Range<usize>> = self.released.iter().filter(|(s, _)| *s == shard).map(|(_, r)| r.start.next_multiple_of(page)..r.end / page * page).filter(|r| r.start < r.end).collect();
        let mut at = 0;
        let mut out = Vec::with_capacity(gone.len() + 1);
        for g in gone {
            if g.start > at {
                out.push(at..g.start);
            }
            at = at.max(g.end);
        }
        if at < len {
            out.push(at..len);
        }
        out.into_iter()
    }
    /// How many files the model's data is in.
    pub fn n_shards(&self) -> usize {
        self.shards.len()
    }

    pub fn kvs(&self) -> &[(String, GgufValue)] {
        &self.kvs
    }
    pub fn get(&self, key: &str) -> Option<&GgufValue> {
        self.kv_index.get(key).map(|&i| &self.kvs[i].1)
    }
    pub fn get_str(&self, key: &str) -> Option<&str> {
        match self.get(key)? {
            GgufValue::Str(s) => Some(s),
            _ => None,
        }
    }
    pub fn get_i64(&self, key: &str) -> Option<i64> {
        self.get(key)?.as_i64()
    }
    /// An integer key that fits u32 (any integer type, as upstream's get_key accepts).
    pub fn get_u32(&self, key: &str) -> Option<u32> {
        u32::try_from(self.get_i64(key)?).ok()
    }
    pub fn get_f32(&self, key: &str) -> Option<f32> {
        self.get(key)?.as_f64().map(|v| v as f32)
    }
    pub fn get_bool(&self, key: &str) -> Option<bool> {
        match self.get(key)? {
            GgufValue::Bool(b) => Some(*b),
            v => v.as_i64().map(|i| i != 0),
        }
    }
    pub fn get_array(&self, key: &str) -> Option<&GgufArray> {
        match self.get(key)? {
            GgufValue::Array(a) => Some(a),
            _ => None,
        }
    }

    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }
    /// The bytes of a tensor (validated in bounds at parse time).
    pub fn tensor_data(&self, t: &TensorInfo) -> &[u8] {
        &self.shards[t.shard].as_slice()[t.file_offset..t.file_offset + t.n_bytes]
    }
    /// The whole of shard `shard` (0 for an unsplit file), for code that keeps byte ranges
    /// instead of slices.
    pub fn shard_bytes(&self, shard: usize) -> &[u8] {
        self.shards[shard].as_slice()
    }
}

type Layout = (u32, usize, usize, Vec<(String, GgufValue)>, Vec<TensorInfo>);

fn parse_layout(bytes: &[u8]) -> Result<Layout, String> {
    let mut c = Cursor::new(bytes);
    let magic = c.u32("magic")?;
    if magic != MAGIC {
        return Err(format!("bad magic 0x{magic:08x}: not a GGUF file"));
    }
    let version = c.u32("version")?;
    if version != 2 && version != 3 {
        return Err(format!("unsupported GGUF version {version} (2 and 3 are supported)"));
    }
    // Minimum encodings: a tensor info is name(8) + n_dims(4) + dims(8) + type(4) + offset(8);
    // a key-value pair is key(8) + type(4) + value(1).
    let n_tensors = c.u64("tensor count")?;
    let n_kv = c.u64("metadata count")?;
    let max_kv = (c.remaining() / 13) as u64;
    if n_kv > max_kv {
        return Err(format!("metadata count {n_kv} exceeds what the file can hold"));
    }
    let mut kvs = Vec::with_capacity(n_kv as usize);
    for i in 0..n_kv {
        let key = c.string(&format!("key of metadata entry {i}"))?;
        let ty = read_type(&mut c, &key)?;
        let value = read_value(&mut c, ty, &key, 0)?;
        kvs.push((key, value));
    }
    let alignment = match kvs.iter().find(|(k, _)| k == "general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some((_, GgufValue::U32(a))) if *a != 0 && a.is_power_of_two() => *a as usize,
        Some((_, v)) => return Err(format!("general.alignment must be a power-of-two u32, got {v:?}")),
    };
    let max_tensors = (c.remaining() / 32) as u64;
    if n_tensors > max_tensors {
        return Err(format!("tensor count {n_tensors} exceeds what the file can hold"));
    }
    let mut infos = Vec::with_capacity(n_tensors as usize);
    for i in 0..n_tensors {
        infos.push(read_tensor_info(&mut c, i)?);
    }
    let data_offset = c.pos().checked_next_multiple_of(alignment).ok_or("data offset overflows")?;
    let mut tensors = Vec::with_capacity(infos.len());
    let mut expected = 0usize;
    for (name, dims, ty, offset) in infos {
        let n_elems = dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d)).filter(|&n| n <= i64::MAX as usize);
        let n_elems = n_elems.ok_or_else(|| format!("tensor '{name}': dimensions {dims:?} overflow"))?;
        if dims[0] % ty.block_len() != 0 {
            return Err(format!("tensor '{name}': row length {} is not a multiple of {}'s block of {}", dims[0], ty.name(), ty.block_len()));
        }
        let n_bytes = (n_elems / ty.block_len())
            .checked_mul(ty.block_bytes())
            .ok_or_else(|| format!("tensor '{name}': byte size overflows"))?;
        if offset % alignment as u64 != 0 {
            return Err(format!("tensor '{name}': data offset {offset} is not aligned to {alignment}"));
        }
        if offset != expected as u64 {
            return Err(format!("tensor '{name}': data offset {offset}, expected {expected} (tensors must be packed in order)"));
        }
        let file_offset = usize::try_from(offset)
            .ok()
            .and_then(|o| o.checked_add(data_offset))
            .filter(|o| o.checked_add(n_bytes).is_some_and(|end| end <= bytes.len()))
            .ok_or_else(|| format!("tensor '{name}': data [{offset}, +{n_bytes}) lies beyond the end of the file ({} bytes)", bytes.len()))?;
        expected = n_bytes
            .checked_next_multiple_of(alignment)
            .and_then(|p| expected.checked_add(p))
            .ok_or_else(|| format!("tensor '{name}': data section size overflows"))?;
        tensors.push(TensorInfo { name, dims, ty, shard: 0, file_offset, n_bytes });
    }
    Ok((version, alignment, data_offset, kvs, tensors))
}

fn read_type(c: &mut Cursor<'_>, key: &str) -> Result<ValueType, String> {
    let t = c.u32(&format!("type of '{key}'"))?;
    ValueType::from_u32(t).ok_or_else(|| format!("metadata '{key}': unknown value type {t}"))
}

fn read_value(c: &mut Cursor<'_>, ty: ValueType, key: &str, depth: usize) -> Result<GgufValue, String> {
    Ok(match ty {
        ValueType::U8 => GgufValue::U8(c.u8(key)?),
        ValueType::I8 => GgufValue::I8(c.u8(key)? as i8),
        ValueType::U16 => GgufValue::U16(c.u16(key)?),
        ValueType::I16 => GgufValue::I16(c.u16(key)? as i16),
        ValueType::U32 => GgufValue::U32(c.u32(key)?),
        ValueType::I32 => GgufValue::I32(c.u32(key)? as i32),
        ValueType::F32 => GgufValue::F32(f32::from_bits(c.u32(key)?)),
        ValueType::U64 => GgufValue::U64(c.u64(key)?),
        ValueType::I64 => GgufValue::I64(c.u64(key)? as i64),
        ValueType::F64 => GgufValue::F64(f64::from_bits(c.u64(key)?)),
        ValueType::Bool => {
            let b = c.u8(key)?;
            if b > 1 {
                return Err(format!("metadata '{key}': bool value {b} is neither 0 nor 1"));
            }
            GgufValue::Bool(b == 1)
        }
        ValueType::String => GgufValue::Str(c.string(key)?),
        ValueType::Array => GgufValue::Array(read_array(c, key, depth)?),
    })
}

fn read_array(c: &mut Cursor<'_>, key: &str, depth: usize) -> Result<GgufArray, String> {
    if depth >= MAX_ARRAY_DEPTH {
        return Err(format!("metadata '{key}': arrays nested deeper than {MAX_ARRAY_DEPTH}"));
    }
    let ty = read_type(c, key)?;
    let n = c.count(ty.min_encoded_len(), &format!("length of array '{key}'"))?;
    macro_rules! prim {
        ($variant:ident, $read:ident, $conv:expr) => {{
            let mut v = Vec::with_capacity(n);
            for _ in 0..n {
                v.push($conv(c.$read(key)?));
            }
            GgufArray::$variant(v)
        }};
    }
    Ok(match ty {
        ValueType::U8 => GgufArray::U8(c.take(n, key)?.to_vec()),
        ValueType::I8 => GgufArray::I8(c.take(n, key)?.iter().map(|&b| b as i8).collect()),
        ValueType::U16 => prim!(U16, u16, |x| x),
        ValueType::I16 => prim!(I16, u16, |x: u16| x as i16),
        ValueType::U32 => prim!(U32, u32, |x| x),
        ValueType::I32 => prim!(I32, u32, |x: u32| x as i32),
        ValueType::F32 => prim!(F32, u32, f32::from_bits),
        ValueType::U64 => prim!(U64, u64, |x| x),
        ValueType::I64 => prim!(I64, u64, |x: u64| x as i64),
        ValueType::F64 => prim!(F64, u64, f64::from_bits),
        ValueType::Bool => {
            let raw = c.take(n, key)?;
            if let Some(b) = raw.iter().find(|&&b| b > 1) {
                return Err(format!("metadata '{key}': bool array holds {b}"));
            }
            GgufArray::Bool(raw.iter().map(|&b| b == 1).collect())
        }
        ValueType::String => {
            let mut v = Vec::with_capacity(n);
            for _ in 0..n {
                v.push(c.string(key)?);
            }
            GgufArray::Str(v)
        }
        ValueType::Array => {
            let mut v = Vec::with_capacity(n);
            for _ in 0..n {
                v.push(read_array(c, key, depth + 1)?);
            }
            GgufArray::Array(v)
        }
    })
}

fn read_tensor_info(c: &mut Cursor<'_>, i: u64) -> Result<(String, Vec<usize>, GgmlType, u64), String> {
    let name = c.string(&format!("name of tensor {i}"))?;
    let n_dims = c.u32(&format!("tensor '{name}' dimension count"))? as usize;
    if n_dims == 0 || n_dims > MAX_DIMS {
        return Err(format!("tensor '{name}': {n_dims} dimensions (1 to {MAX_DIMS} supported)"));
    }
    let mut dims = Vec::with_capacity(n_dims);
    for d in 0..n_dims {
        let v = c.u64(&format!("tensor '{name}' dimension {d}"))?;
        if v == 0 || v > i64::MAX as u64 {
            return Err(format!("tensor '{name}': dimension {d} = {v} is out of range"));
        }
        dims.push(usize::try_from(v).map_err(|_| format!("tensor '{name}': dimension {d} too large"))?);
    }
    let t = c.u32(&format!("tensor '{name}' type"))?;
    let ty = GgmlType::from_u32(t).ok_or_else(|| format!("tensor '{name}': unknown or unsupported tensor type {t}"))?;
    let offset = c.u64(&format!("tensor '{name}' offset"))?;
    Ok((name, dims, ty, offset))
}
