//! Split models: the shards `NAME-00001-of-0000N.gguf` … that `llama-gguf-split` writes. The first
//! shard holds every metadata key plus `split.no` (0-based), `split.count` and
//! `split.tensors.count`; the others hold those three keys and their tensors (offsets relative
//! to their own data section). Rules, as upstream b11312's loader (`src/llama-model-loader.cpp`)
//! and stricter where it trusts the files: the first file given is shard 0; every shard `i`
//! says `split.no = i`; every shard carries the first one's `split.count` and
//! `split.tensors.count` (a shard of another split set is named as such); a tensor lives in one
//! shard only; the shards' tensors add up to `split.tensors.count`. Never reads a file's data
//! beyond what `reader` validated.

use std::path::{Path, PathBuf};

use super::reader::{GgufFile, Source};
use crate::sys::bytes::FileBytes;

/// Opening a model: one file, or every shard of a split one.
impl GgufFile {
    /// Opens a model file, mapped (`mmap = true`) or read into an owned buffer. The first
    /// shard of a split model (`split.count` > 1) brings the others, named as upstream names
    /// them (`NAME-%05d-of-%05d.gguf`).
    pub fn open(path: &Path, mmap: bool) -> Result<GgufFile, String> {
        let first = Self::open_one(path, mmap, 0)?;
        match shard_count(&first)? {
            1 => Ok(first),
            n => {
                let paths = shard_paths(path, n)?;
                join(first, &paths, mmap)
            }
        }
    }

    /// Opens a split model from the list of its shards, in order (llama.h's
    /// `llama_model_load_from_splits`): the list's length must be the first shard's
    /// `split.count`. One path of an unsplit file opens it as `open` does.
    pub fn open_paths(paths: &[&Path], mmap: bool) -> Result<GgufFile, String> {
        let first_path = paths.first().ok_or("the list of split files is empty")?;
        let first = Self::open_one(first_path, mmap, 0)?;
        let n = shard_count(&first)?;
        if n != paths.len() {
            return Err(format!("invalid split count, given: {} splits, but expected {n}", paths.len()));
        }
        if n == 1 {
            return Ok(first);
        }
        join(first, paths, mmap)
    }

    /// Opens what `source` names.
    pub fn open_source(source: Source<'_>, mmap: bool) -> Result<GgufFile, String> {
        match source {
            Source::File(p) => Self::open(p, mmap),
            Source::Splits(ps) => Self::open_paths(ps, mmap),
        }
    }

    /// The shards of a split model already in memory (tests, fuzzing), in order: joined as
    /// `open_paths` joins files; one unsplit file parses as `from_slice`.
    pub fn from_slices(shards: &[&[u8]]) -> Result<GgufFile, String> {
        let first = Self::parse(FileBytes::from_slice(shards.first().ok_or("the list of split files is empty")?)?, 0)?;
        let n = shard_count(&first)?;
        if n != shards.len() {
            return Err(format!("invalid split count, given: {} splits, but expected {n}", shards.len()));
        }
        if n == 1 {
            return Ok(first);
        }
        join_with(first, n, |i| Ok((format!("shard {}", i + 1), Self::parse(FileBytes::from_slice(shards[i])?, i)?)))
    }
}

pub const KEY_NO: &str = "split.no";
pub const KEY_COUNT: &str = "split.count";
pub const KEY_TENSORS: &str = "split.tensors.count";

/// Upstream's `-%05d-of-%05d.gguf` ending of shard `no` (0-based) of `count`.
pub fn suffix(no: i64, count: i64) -> String {
    format!("-{:05}-of-{:05}.gguf", no + 1, count)
}

/// `llama_split_path`: the name of shard `no` (0-based) of `count` for `prefix`.
pub fn path(prefix: &[u8], no: i64, count: i64) -> Vec<u8> {
    let mut s = prefix.to_vec();
    s.extend_from_slice(suffix(no, count).as_bytes());
    s
}

/// `llama_split_prefix`: `path` without the ending of shard `no` of `count`, if it has it and
/// something precedes it.
pub fn prefix(path: &[u8], no: i64, count: i64) -> Option<&[u8]> {
    let suffix = suffix(no, count);
    (path.len() > suffix.len() && path.ends_with(suffix.as_bytes())).then(|| &path[..path.len() - suffix.len()])
}

/// `split.count` of a file: 1 when absent (an unsplit file) or 0 (what `llama-gguf-split
/// --merge` leaves); a value that is not an integer of at most u16 is an error. When above 1,
/// the file must be shard 0.
pub(super) fn shard_count(f: &GgufFile) -> Result<usize, String> {
    let Some(v) = f.get(KEY_COUNT) else { return Ok(1) };
    let n = v.as_i64().filter(|n| (0..=u16::MAX as i64).contains(n)).ok_or_else(|| format!("{KEY_COUNT} must be an integer from 0 to 65535, got {v:?}"))?;
    if n <= 1 {
        return Ok(1);
    }
    let no = shard_no(f).ok_or_else(|| format!("missing key {KEY_NO} in the first file of a model split in {n}"))?;
    if no != 0 {
        return Err(format!("illegal split file idx: {no} (this file is shard {} of {n}), model must be loaded with the first split", no + 1));
    }
    Ok(n as usize)
}

fn shard_no(f: &GgufFile) -> Option<i64> {
    f.get(KEY_NO)?.as_i64()
}

/// The paths of all `count` shards of the model whose first shard is `first`.
pub(super) fn shard_paths(first: &Path, count: usize) -> Result<Vec<PathBuf>, String> {
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    let bytes = first.as_os_str().as_bytes();
    let prefix = prefix(bytes, 0, count as i64).ok_or_else(|| {
        format!("invalid split file name: {} (the first of {count} shards must end in {})", first.display(), suffix(0, count as i64))
    })?;
    Ok((0..count).map(|i| PathBuf::from(std::ffi::OsString::from_vec(path(prefix, i as i64, count as i64)))).collect())
}

/// Opens shards 1.. of `paths` (shard 0 is `first`, already open) and joins them into one.
pub(super) fn join(first: GgufFile, paths: &[impl AsRef<Path>], mmap: bool) -> Result<GgufFile, String> {
    let count = paths.len();
    join_with(first, count, |i| {
        let p = paths[i].as_ref();
        let shard = GgufFile::open_one(p, mmap, i).map_err(|e| format!("failed to load GGUF split {} of {count} from {}: {e}", i + 1, p.display()))?;
        Ok((p.display().to_string(), shard))
    })
}

/// Joins `first` (shard 0 of `count`) with shards 1.. that `open(i)` gives (a name for errors,
/// and the parsed shard), checking every rule of the module header.
pub(super) fn join_with(mut first: GgufFile, count: usize, mut open: impl FnMut(usize) -> Result<(String, GgufFile), String>) -> Result<GgufFile, String> {
    let n_tensors = first.get(KEY_TENSORS).ok_or_else(|| format!("key not found in model: {KEY_TENSORS} (the first of {count} shards)"))?;
    let n_tensors = n_tensors.as_i64().ok_or_else(|| format!("{KEY_TENSORS} must be an integer, got {n_tensors:?}"))?;
    for i in 1..count {
        let (name, shard) = open(i)?;
        let no = shard_no(&shard).ok_or_else(|| format!("missing key {KEY_NO} in GGUF split {name}"))?;
        if no != i as i64 {
            return Err(format!("invalid split file idx: {no} (file: {name}), expected {i}"));
        }
        let other_count = shard.get(KEY_COUNT).and_then(|v| v.as_i64());
        let other_tensors = shard.get(KEY_TENSORS).and_then(|v| v.as_i64());
        if other_count != Some(count as i64) || other_tensors != Some(n_tensors) {
            return Err(format!(
                "{name} is not a shard of this model: it says {KEY_COUNT} = {}, {KEY_TENSORS} = {}, the first shard {count} and {n_tensors}",
                other_count.map_or("(none)".into(), |v| v.to_string()),
                other_tensors.map_or("(none)".into(), |v| v.to_string())
            ));
        }
        first.append_shard(shard)?;
    }
    let found = first.tensors().len() as i64;
    if found != n_tensors {
        return Err(format!("corrupted model: {n_tensors} tensors expected but {found} found in {count} shards"));
    }
    Ok(first)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::{GgufValue, GgufWriter};
    use crate::quant::GgmlType;

    #[test]
    fn names_as_upstream() {
        // llama_split_path takes a 0-based split_no (the header comment is off by one)
        assert_eq!(path(b"/m/x", 2, 4), b"/m/x-00003-of-00004.gguf");
        assert_eq!(prefix(b"/m/x-00002-of-00004.gguf", 1, 4), Some(&b"/m/x"[..]));
        assert_eq!(prefix(b"/m/x-00002-of-00004.gguf", 0, 4), None);
        assert_eq!(prefix(b"-00001-of-00002.gguf", 0, 2), None);
    }

    /// Writes a model of `count` shards into `dir`, tensor `t{i}` in shard `i % count`, every
    /// shard claiming `claimed` tensors in all; `edit` may add to a shard before it is written.
    fn write_claiming(dir: &Path, name: &str, count: usize, n_tensors: usize, claimed: usize, edit: impl Fn(usize, &mut GgufWriter)) -> Vec<PathBuf> {
        (0..count)
            .map(|s| {
                let mut w = GgufWriter::new();
                if s == 0 {
                    w.kv("general.architecture", GgufValue::Str("llama".into()));
                }
                w.kv(KEY_NO, GgufValue::U16(s as u16)).kv(KEY_COUNT, GgufValue::U16(count as u16)).kv(KEY_TENSORS, GgufValue::I32(claimed as i32));
                for i in (0..n_tensors).filter(|i| i % count == s) {
                    w.tensor(&format!("t{i}"), &[8], GgmlType::F32, vec![i as u8; 32]);
                }
                edit(s, &mut w);
                let p = dir.join(format!("{name}{}", suffix(s as i64, count as i64)));
                std::fs::write(&p, w.to_bytes()).unwrap();
                p
            })
            .collect()
    }

    fn write_set(dir: &Path, name: &str, count: usize, n_tensors: usize, edit: impl Fn(usize, &mut GgufWriter)) -> Vec<PathBuf> {
        write_claiming(dir, name, count, n_tensors, n_tensors, edit)
    }

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("ds-split-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn joins_and_checks() {
        let d = tmpdir("join");
        let paths = write_set(&d, "m", 3, 7, |_, _| {});
        for mmap in [true, false] {
            let f = GgufFile::open(&paths[0], mmap).unwrap();
            assert_eq!((f.n_shards(), f.tensors().len()), (3, 7));
            for i in 0..7 {
                let t = f.tensor(&format!("t{i}")).unwrap();
                assert_eq!(t.shard, i % 3);
                assert!(f.tensor_data(t).iter().all(|&b| b == i as u8));
            }
            let refs: Vec<&Path> = paths.iter().map(|p| p.as_path()).collect();
            assert_eq!(GgufFile::open_paths(&refs, mmap).unwrap().tensors().len(), 7);
            let e = GgufFile::open_paths(&refs[..2], mmap).err().unwrap();
            assert!(e.contains("invalid split count, given: 2 splits, but expected 3"), "{e}");
        }
        // not the first shard
        let e = GgufFile::open(&paths[1], true).err().unwrap();
        assert!(e.contains("illegal split file idx: 1"), "{e}");
        // a missing shard
        std::fs::remove_file(&paths[2]).unwrap();
        let e = GgufFile::open(&paths[0], true).err().unwrap();
        assert!(e.contains("failed to load GGUF split 3 of 3") && e.contains("cannot open"), "{e}");
        // a name that does not follow the pattern
        let odd = d.join("odd.gguf");
        std::fs::copy(&paths[0], &odd).unwrap();
        let e = GgufFile::open(&odd, true).err().unwrap();
        assert!(e.contains("invalid split file name"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn rejects_inconsistent_sets() {
        let d = tmpdir("bad");
        // a shard of another split set (same place in it, other tensor count)
        let paths = write_set(&d, "a", 2, 4, |_, _| {});
        let other = write_set(&d, "b", 2, 6, |_, _| {});
        std::fs::copy(&other[1], &paths[1]).unwrap();
        let e = GgufFile::open(&paths[0], true).err().unwrap();
        assert!(e.contains("is not a shard of this model"), "{e}");
        // shards swapped
        let paths = write_set(&d, "c", 3, 6, |_, _| {});
        let refs = [paths[0].as_path(), paths[2].as_path(), paths[1].as_path()];
        let e = GgufFile::open_paths(&refs, true).err().unwrap();
        assert!(e.contains("invalid split file idx: 2") && e.contains("expected 1"), "{e}");
        // a tensor in two shards
        let paths = write_set(&d, "e", 2, 4, |s, w| {
            if s == 1 {
                w.tensor("t0", &[8], GgmlType::F32, vec![0; 32]);
            }
        });
        let e = GgufFile::open(&paths[0], true).err().unwrap();
        assert!(e.contains("tensor 't0' is duplicated (in shards 1 and 2)"), "{e}");
        // fewer tensors than split.tensors.count
        let paths = write_claiming(&d, "f", 2, 4, 5, |_, _| {});
        let e = GgufFile::open(&paths[0], true).err().unwrap();
        assert!(e.contains("corrupted model: 5 tensors expected but 4 found in 2 shards"), "{e}");
        // no split.no in a later shard
        let paths = write_set(&d, "g", 2, 2, |_, _| {});
        let mut w = GgufWriter::new();
        w.kv(KEY_COUNT, GgufValue::U16(2)).kv(KEY_TENSORS, GgufValue::I32(2)).tensor("t1", &[8], GgmlType::F32, vec![1; 32]);
        std::fs::write(&paths[1], w.to_bytes()).unwrap();
        let e = GgufFile::open(&paths[0], true).err().unwrap();
        assert!(e.contains("missing key split.no in GGUF split"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
