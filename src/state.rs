//! state: a context's state as bytes (llama_state_* and llama_state_seq_*): the occupied KV
//! cells with their rows (in the cache's types) and, for the whole-context state, the last decode's outputs.
//! Restoring into a context of the same model and shape reproduces the next logits bit for
//! bit (cells return to the same indices, so attention visits them in the same order). Input
//! bytes are untrusted: every length is checked against what remains before it is used.

use crate::context::Context;
use crate::gguf::cursor::Cursor;
use crate::kv::{Cell, SeqSet};

const MAGIC_FULL: u32 = 0x4453_5354; // "DSST"
const MAGIC_SEQ: u32 = 0x4453_5351; // "DSSQ"
const VERSION: u32 = 3;

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// Counts are u64, as the reader's `count` expects.
fn put_count(out: &mut Vec<u8>, n: usize) {
    out.extend_from_slice(&(n as u64).to_le_bytes());
}

/// What must match between the saving and the loading context: the model's cache layout, and
/// for a whole-context state also the cache's shape (cells return to their indices). A
/// sequence state goes to free cells of any context of the same model.
fn fingerprint(ctx: &Context, whole: bool) -> [u32; 9] {
    let hp = &ctx.model.hp;
    let kv = &ctx.kv;
    let (streams, cells) = if whole { (kv.shape.n_stream as u32, kv.shape.n_cells as u32) } else { (0, 0) };
    let (k, v) = (kv.shape.k_type.ggml() as u32, kv.shape.v_type.ggml() as u32);
    [hp.n_layer as u32, hp.n_vocab as u32, hp.n_embd as u32, kv.kv_dim() as u32, kv.shape.with_v as u32, streams, cells, k, v]
}

/// The names of the fingerprint's fields, for the error that says which one differs.
const FINGERPRINT: [&str; 9] = ["layers", "vocabulary", "embedding width", "KV row width", "V cache", "streams", "cells per stream", "K cache type", "V cache type"];

/// Serialises the context (seq = None) or one sequence's cells.
pub fn save(ctx: &Context, seq: Option<usize>, out: &mut Vec<u8>) {
    out.clear();
    put_u32(out, if seq.is_some() { MAGIC_SEQ } else { MAGIC_FULL });
    put_u32(out, VERSION);
    for v in fingerprint(ctx, seq.is_none()) {
        put_u32(out, v);
    }
    let kv = &ctx.kv;
    let cells: Vec<usize> = (0..kv.n_cells_total())
        .filter(|&i| {
            let c = kv.cell(i);
            !c.is_empty() && seq.is_none_or(|s| c.seqs.contains(s))
        })
        .collect();
    put_count(out, cells.len());
    // A sequence state holds positions only (as upstream's, with no cell indices or sequence
    // sets): restored into other cells, it serialises to the same bytes again.
    for &i in &cells {
        let c = kv.cell(i);
        if seq.is_none() {
            put_u32(out, i as u32);
        }
        put_u32(out, c.pos as u32);
        if seq.is_none() {
            for w in c.seqs.words() {
                out.extend_from_slice(&w.to_le_bytes());
            }
        }
    }
    for layer in 0..ctx.model.hp.n_layer {
        for &i in &cells {
            out.extend_from_slice(kv.k_bytes(layer, i));
            out.extend_from_slice(kv.v_bytes_raw(layer, i));
        }
    }
    // deepseek4: the compressed caches and compressor states of the streams saved
    if let Some(d) = &kv.dsv4 {
        for stream in saved_streams(ctx, seq) {
            // streams are sequences in deepseek4's cache
            let seq_of_stream = seq.unwrap_or(stream);
            d.save_stream(stream, kv.seq_pos_max(seq_of_stream), out);
        }
    }
    if seq.is_none() {
        let (logits, embd) = (ctx.logits(), ctx.embeddings_all());
        put_u32(out, ctx.n_outputs() as u32);
        put_count(out, ctx.output_ids().len());
        for &id in ctx.output_ids() {
            put_u32(out, id as u32);
        }
        put_count(out, logits.len());
        logits.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes()));
        put_count(out, embd.len());
        embd.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes()));
    }
    // a checksum of everything before it: a damaged state is refused before the cache changes
    let sum = checksum(out);
    out.extend_from_slice(&sum.to_le_bytes());
}

/// A 64-bit checksum of `bytes` (four independent multiply-xor lanes over 8-byte words, so it
/// runs at several GB/s; not cryptographic, it only has to catch damage).
pub fn checksum(bytes: &[u8]) -> u64 {
    const K: [u64; 4] = [0x9E37_79B9_7F4A_7C15, 0xC2B2_AE3D_27D4_EB4F, 0x1656_67B1_9E37_79F9, 0x27D4_EB2F_1656_67C5];
    let mut h = K;
    let mut chunks = bytes.chunks_exact(32);
    for c in &mut chunks {
        for (l, w) in c.chunks_exact(8).enumerate() {
            let w = u64::from_le_bytes(w.try_into().expect("8 bytes"));
            h[l] = (h[l] ^ w).wrapping_mul(K[(l + 1) % 4]).rotate_left(29);
        }
    }
    let mut t = 0xFF51_AFD7_ED55_8CCD ^ bytes.len() as u64;
    for (i, &b) in chunks.remainder().iter().enumerate() {
        t ^= (b as u64) << (8 * (i % 8));
        if i % 8 == 7 {
            t = t.wrapping_mul(K[0]).rotate_left(31);
        }
    }
    let mut r = t.wrapping_mul(K[1]);
    for x in h {
        r = (r ^ x).wrapping_mul(K[2]).rotate_left(27);
    }
    r ^ (r >> 33)
}

/// The streams whose deepseek4 caches a state carries: all, or the sequence's.
fn saved_streams(ctx: &Context, seq: Option<usize>) -> std::ops::Range<usize> {
    match seq {
        None => 0..ctx.kv.shape.n_stream,
        Some(s) => {
            let st = ctx.kv.stream_of(s);
            st..st + 1
        }
    }
}

/// Restores what `save` wrote. For a sequence state, the cells go to `dest` (whose previous
/// cells are dropped) in the destination's stream. Returns the bytes read.
pub fn load(ctx: &mut Context, bytes: &[u8], dest: Option<usize>) -> Result<usize, String> {
    let mut c = Cursor::new(bytes);
    let magic = c.u32("state magic")?;
    let want = if dest.is_some() { MAGIC_SEQ } else { MAGIC_FULL };
    if magic != want {
        return Err(format!("not a {} state (magic 0x{magic:08x})", if dest.is_some() { "sequence" } else { "context" }));
    }
    let version = c.u32("state version")?;
    if version != VERSION {
        return Err(format!("state version {version} is not supported (expected {VERSION})"));
    }
    for (i, want) in fingerprint(ctx, dest.is_none()).into_iter().enumerate() {
        let got = c.u32("state fingerprint")?;
        if got != want {
            return Err(format!("state was saved by a different model or context shape ({}: {got} != {want})", FINGERPRINT[i]));
        }
    }
    let n_total = ctx.kv.n_cells_total();
    let n = c.count(if dest.is_some() { 4 } else { 40 }, "saved cell count")?;
    let mut cells = Vec::with_capacity(n);
    for _ in 0..n {
        let idx = if dest.is_none() { c.u32("cell index")? as usize } else { 0 };
        let pos = c.u32("cell position")? as i32;
        let mut words = [0u64; 4];
        if dest.is_none() {
            for w in &mut words {
                *w = c.u64("cell sequences")?;
            }
        }
        if (dest.is_none() && idx >= n_total) || pos < 0 {
            return Err(format!("cell {idx} at position {pos} is out of range"));
        }
        let seqs = SeqSet::from_words(words);
        // A whole-context state puts cells back where they were: each must belong to sequences
        // this context has, in the stream that holds them.
        if dest.is_none() && (seqs.is_empty() || seqs.iter().any(|s| s >= ctx.n_seq_max as usize || ctx.kv.stream_of(s) != idx / ctx.kv.shape.n_cells)) {
            return Err(format!("cell {idx} belongs to sequences that do not fit this context"));
        }
        cells.push((idx, pos, seqs));
    }
    let (k_bytes, v_bytes) = ctx.kv.row_bytes();
    let row = k_bytes + v_bytes;
    let n_layer = ctx.model.hp.n_layer;
    let data_len = n.checked_mul(row).and_then(|x| x.checked_mul(n_layer)).ok_or("state size overflows")?;
    let data = c.take(data_len, "KV rows")?;
    // Place the cells (validated above) before touching the cache, so a failure leaves it as it was.
    let targets: Vec<usize> = match dest {
        None => cells.iter().map(|&(i, _, _)| i).collect(),
        Some(d) => {
            let stream = ctx.kv.stream_of(d);
            let mut free: Vec<usize> = ctx.kv.cells_of_stream(stream).filter(|(_, cell)| cell.is_empty() || cell.seqs == SeqSet::single(d)).map(|(i, _)| i).collect();
            if free.len() < cells.len() {
                return Err(format!("sequence {d} has room for {} cells, the state holds {}", free.len(), cells.len()));
            }
            free.truncate(cells.len());
            free
        }
    };
    // deepseek4's compressed caches: parsed into a scratch cache first, so that a bad state
    // leaves the context as it was
    let extra = match &ctx.kv.dsv4 {
        Some(d) => {
            let mut shape = d.shape.clone();
            shape.n_stream = saved_streams(ctx, dest).len();
            let mut tmp = crate::kv::dsv4::Dsv4Cache::new(shape)?;
            for stream in 0..tmp.shape.n_stream {
                tmp.load_stream(stream, &mut c)?;
            }
            Some(tmp)
        }
        None => None,
    };
    let outputs = if dest.is_none() { Some(read_outputs(&mut c, ctx)?) } else { None };
    let body = c.pos();
    if c.u64("state checksum")? != checksum(&bytes[..body]) {
        return Err("the state is damaged (its checksum does not match its contents)".into());
    }
    match dest {
        None => ctx.kv.clear(false),
        Some(d) => {
            ctx.kv.seq_rm(d as i32, -1, -1);
        }
    }
    for (j, (&(_, pos, seqs), &target)) in cells.iter().zip(&targets).enumerate() {
        let seqs = match dest {
            None => seqs,
            Some(d) => SeqSet::single(d),
        };
        ctx.kv.restore_cell(target, Cell { pos, seqs });
        for layer in 0..n_layer {
            let off = (layer * n + j) * row;
            let src = &data[off..off + row];
            ctx.kv.restore_rows(layer, target, &src[..k_bytes], &src[k_bytes..]);
        }
    }
    if let Some(tmp) = extra {
        let streams = saved_streams(ctx, dest);
        ctx.kv.dsv4.as_mut().expect("checked").copy_streams_from(&tmp, streams.start);
    }
    ctx.kv.sync_seqs();
    if let Some((n_outputs, ids, logits, embd)) = outputs {
        ctx.restore_outputs(n_outputs, &ids, &logits, &embd)?;
    }
    Ok(c.pos())
}

type Outputs = (usize, Vec<i32>, Vec<f32>, Vec<f32>);

fn read_outputs(c: &mut Cursor<'_>, ctx: &Context) -> Result<Outputs, String> {
    let n_outputs = c.u32("output count")? as usize;
    let n_ids = c.count(4, "output id count")?;
    let ids = (0..n_ids).map(|_| c.u32("output id").map(|v| v as i32)).collect::<Result<Vec<_>, _>>()?;
    let n_logits = c.count(4, "logit count")?;
    let logits = (0..n_logits).map(|_| c.u32("logit").map(f32::from_bits)).collect::<Result<Vec<_>, _>>()?;
    let n_embd = c.count(4, "embedding count")?;
    let embd = (0..n_embd).map(|_| c.u32("embedding").map(f32::from_bits)).collect::<Result<Vec<_>, _>>()?;
    if n_logits != n_outputs * ctx.model.hp.n_vocab || ids.iter().any(|&i| i >= n_outputs as i32 || i < -1) {
        return Err("the saved outputs are inconsistent".into());
    }
    Ok((n_outputs, ids, logits, embd))
}

/// llama.cpp's sequence state file (`llama_state_seq_save_file`): its magic ("ggsq") and
/// version, which llama-server's slot files carry too.
pub(crate) const SEQ_FILE_MAGIC: u32 = 0x6767_7371;
pub(crate) const SEQ_FILE_VERSION: u32 = 3;

/// Writes a state file — magic, version, token count, tokens, then the state bytes — so that
/// a crash leaves either the old file or the new one whole: the bytes go to a temporary file
/// beside it, which is synced and renamed over the target (and the folder synced). Returns
/// the bytes written.
pub fn write_file(path: &std::path::Path, magic: u32, version: u32, tokens: &[i32], state: &[u8]) -> Result<usize, String> {
    use std::io::Write;
    let mut out = Vec::new();
    out.try_reserve_exact(16 + tokens.len() * 4 + state.len()).map_err(|_| format!("cannot allocate {} bytes for {}", 16 + tokens.len() * 4 + state.len(), path.display()))?;
    out.extend_from_slice(&magic.to_le_bytes());
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&(tokens.len() as u64).to_le_bytes());
    tokens.iter().for_each(|t| out.extend_from_slice(&t.to_le_bytes()));
    out.extend_from_slice(state);
    let name = path.file_name().ok_or_else(|| format!("{} names no file", path.display()))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".{}.tmp", std::process::id()));
    let tmp = path.with_file_name(tmp_name);
    let written = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&out)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            // The rename itself reaches the disk once the folder is synced.
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok::<_, std::io::Error>(())
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(format!("cannot write {}: {e}", path.display()));
    }
    Ok(out.len())
}

/// Reads what `write_file` wrote: (tokens, state bytes, file size).
pub fn read_file(path: &std::path::Path, magic: u32, version: u32) -> Result<(Vec<i32>, Vec<u8>, usize), String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut c = Cursor::new(&bytes);
    if c.u32("session magic")? != magic || c.u32("session version")? != version {
        return Err(format!("{} is not a session file of this kind and version", path.display()));
    }
    let n = c.count(4, "token count")?;
    let tokens = (0..n).map(|_| c.u32("token").map(|t| t as i32)).collect::<Result<Vec<_>, _>>()?;
    Ok((tokens, bytes[c.pos()..].to_vec(), bytes.len()))
}
