//! Weight matrix × activation rows. Weights stay in their GGUF block format; activations are
//! quantized once per row to the weight type's vec_dot_type (as ggml does), and every output
//! is one integer-accumulated dot product.
//!
//! Work is split over the pool in chunks of weight rows (`ThreadPool::run_chunks`): each thread
//! streams its own contiguous share of a job's rows, and a thread that is done takes chunks
//! from the ends of the others' shares, so one that starts late or runs slow takes fewer;
//! several products (each with its own activation rows) can share one pool job. With several activation rows (prefill, batched
//! decode) each chunk of weight rows is unpacked into a panel once and multiplied by tiles of
//! up to 8 activation rows while it stays in L1; a single activation row (decode) streams each
//! weight row once, several weight rows per pass where the type has [`simd::GemvFns`] (the
//! activation row is prepared for them once per batch).

use std::sync::atomic::{AtomicUsize, Ordering};

use super::simd;
use crate::quant::{self, GgmlType};
use crate::threads::{SharedOut, ThreadPool};

/// How a matrix's rows lie in its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// One row after the other, as in the file.
    Rows,
    /// In groups of four rows interleaved (`quant::interleave`, Q4_K), repacked at load for
    /// [`simd::gemv_fns_interleaved`]; the rows are a multiple of four.
    Interleaved4,
}

/// A borrowed weight matrix: `rows` rows of `cols` elements, each `ty.row_bytes(cols)` bytes.
#[derive(Clone, Copy)]
pub struct WeightMatrix<'a> {
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    pub data: &'a [u8],
    /// Whether several activation rows may be summed in a faster order than the reference's.
    pub order: simd::SumOrder,
    /// How llama.cpp multiplies this matrix (`quant::Repacked`): a matrix it repacks at load
    /// is multiplied in its repacked GEMM's or GEMV's order, which every kernel we use for it
    /// then follows.
    pub repacked: quant::Repacked,
    pub layout: Layout,
}

impl WeightMatrix<'_> {
    pub fn row_bytes(&self) -> usize {
        self.ty.row_bytes(self.cols).expect("validated at load")
    }
    /// Row `r` (of a matrix in the file's layout).
    pub fn row(&self, r: usize) -> &[u8] {
        assert_eq!(self.layout, Layout::Rows, "row() of an interleaved matrix");
        let rb = self.row_bytes();
        &self.data[r * rb..(r + 1) * rb]
    }
    /// The reference's dot product of weight row `row` (one of this matrix's, in the file's
    /// layout) with activation row `t` of a product of `n` activation rows (which upstream's
    /// repacked kernels multiply in two orders).
    fn dot_ref(&self, row: &[u8], act: &[u8], t: usize, n: usize) -> f32 {
        match self.repacked {
            quant::Repacked::No => quant::vec_dot(self.ty, self.cols, row, act),
            rp @ quant::Repacked::Sgemm if t < rp.gemm_rows(n) => quant::vec_dot_sgemm(self.ty, self.cols, row, act),
            quant::Repacked::Sgemm => quant::vec_dot(self.ty, self.cols, row, act),
            rp @ quant::Repacked::Tiled if t < rp.gemm_rows(n) => quant::vec_dot_tiled(self.ty, self.cols, row, act),
            quant::Repacked::Tiled => quant::vec_dot(self.ty, self.cols, row, act),
            rp => quant::vec_dot_repacked(self.ty, self.cols, row, act, t < rp.gemm_rows(n)),
        }
    }
}

/// Bytes needed to hold `n_rows` activation rows of `cols` elements quantized for `w_ty`.
pub fn activation_bytes(w_ty: GgmlType, cols: usize, n_rows: usize) -> usize {
    w_ty.vec_dot_type().row_bytes(cols).expect("validated at load") * n_rows
}

/// Rows of activations below which quantizing them on the pool costs more than it saves.
const POOL_QUANTIZE_ROWS: usize = 16;

/// Quantizes `n_rows` rows of `x` (each `cols` long) for multiplication with `w_ty` weights: on
/// the pool, a few rows per claim, when there are many (prefill), else on the calling thread.
pub fn quantize_activations(pool: &ThreadPool, w_ty: GgmlType, x: &[f32], cols: usize, n_rows: usize, dst: &mut [u8]) {
    let vt = w_ty.vec_dot_type();
    let rb = vt.row_bytes(cols).expect("validated at load");
    let q = simd::quantize_fn(vt);
    let one = |r: usize, d: &mut [u8]| {
        let src = &x[r * cols..(r + 1) * cols];
        match q {
            // SAFETY: quantize_fn only returns kernels whose CPU features are present; the
            // kernel checks the sizes.
            Some(f) => unsafe { f(src, d) },
            None => quant::quantize_row(vt, src, d),
        }
    };
    if n_rows < POOL_QUANTIZE_ROWS {
        for r in 0..n_rows {
            one(r, &mut dst[r * rb..(r + 1) * rb]);
        }
        return;
    }
    let out = SharedOut::new(&mut dst[..n_rows * rb]);
    let next = AtomicUsize::new(0);
    pool.run(&|_, _| loop {
        let r0 = 4 * next.fetch_add(1, Ordering::Relaxed);
        if r0 >= n_rows {
            break;
        }
        for r in r0..(r0 + 4).min(n_rows) {
            // SAFETY: row r is claimed by this thread only.
            one(r, unsafe { out.slice(r * rb..(r + 1) * rb) });
        }
    });
}

/// The pool's scratch buffers this module uses (see `ThreadPool::buffer`): per thread index,
/// the unpacked panel of weight rows; on index 0, filled by the caller before a job and read
/// by all of it, the prepared activation row of the decode kernels and the per-block
/// activation data of the panel kernels.
const PANEL: usize = 0;
const PREP: usize = 1;
const AUX: usize = 2;

/// The panel buffer a product of a `ty` matrix of `cols` columns may ask each thread for, at
/// this machine's level: the largest of the panels any sum order takes for the type.
pub fn panel_bytes(ty: GgmlType, cols: usize) -> usize {
    let nb = cols / ty.block_len().max(1);
    let orders = [simd::SumOrder::Reference, simd::SumOrder::Fast];
    let panels = orders.iter().flat_map(|&o| [simd::panel_fns(ty, o, false), simd::panel_fns(ty, o, true)]).chain([simd::panel_fns_tiled(ty)]);
    let panel = panels.flatten().map(|g| nb * g.block_bytes).max().unwrap_or(0);
    // an interleaved matrix's chunk is de-interleaved in front of the panel
    let rows = if simd::gemv_fns_interleaved(ty).is_some() { deinterleaved_bytes(ty, cols) } else { 0 };
    rows + panel
}

/// Most weight rows of a several-row (prefill) chunk (see [`chunk_rows`]).
const PREFILL_CHUNK_MAX: usize = 16;

/// Room for a prefill chunk of an interleaved matrix de-interleaved (64-byte multiple).
fn deinterleaved_bytes(ty: GgmlType, cols: usize) -> usize {
    (PREFILL_CHUNK_MAX * ty.row_bytes(cols).unwrap_or(0)).next_multiple_of(64)
}

/// Sizes every thread's panel buffer for products needing up to `bytes` (`panel_bytes`), so
/// that no matmul grows it later.
pub fn reserve_panels(pool: &ThreadPool, bytes: usize) {
    for ith in 0..pool.n_threads() {
        // SAFETY: called between jobs (at context creation): nothing else uses the buffers.
        unsafe { pool.buffer(ith, PANEL, bytes) };
    }
}

/// Activation rows per tile (the widest kernel).
const TILE: usize = 8;

/// Weight bytes a decode chunk streams at least: taking a chunk costs an atomic operation (a
/// cache-line transfer when it is taken from another thread's share), so a chunk must be long
/// enough that this is small against streaming it; 16 KB (under a microsecond per core) still
/// keeps the cores' finishing times within a microsecond of each other.
const DECODE_CHUNK_BYTES: usize = 16 << 10;

/// Decode chunks a pool job aims at when its matrices are small: enough that the cores finish
/// within a chunk of each other, few enough that claiming them stays cheap (an MoE layer's
/// fourteen expert matrices cut ~64 ways each made ~900 claims a job).
const DECODE_CHUNKS_PER_JOB: usize = 256;

/// Weight rows per chunk handed to a thread (`row_bytes` per weight row; `job_bytes` the decode
/// weight bytes of the whole pool job); for an interleaved matrix whole groups of four.
fn chunk_rows(rows: usize, row_bytes: usize, n_act: usize, job_bytes: usize, layout: Layout) -> usize {
    let c = chunk_rows_of(rows, row_bytes, n_act, job_bytes);
    match layout {
        Layout::Rows => c,
        Layout::Interleaved4 => c.next_multiple_of(quant::interleave::GROUP_ROWS),
    }
}

fn chunk_rows_of(rows: usize, row_bytes: usize, n_act: usize, job_bytes: usize) -> usize {
    if n_act == 1 {
        // decode: ~64 chunks per large matrix so both cores stay busy to the end, but none
        // shorter than DECODE_CHUNK_BYTES nor than 1/256 of the job (small matrices, such as
        // per-head projections and experts, share jobs); a multiple of 4 rows for the 4-row
        // kernels
        let min_bytes = DECODE_CHUNK_BYTES.max(job_bytes / DECODE_CHUNKS_PER_JOB);
        (rows / 64).min(256).max(min_bytes.div_ceil(row_bytes.max(1))).next_multiple_of(4)
    } else {
        // prefill: a chunk stays in L1/L2 while all tiles of activations pass over it; a
        // multiple of 8 and 16 rows for the panel kernels
        if rows >= 64 {
            PREFILL_CHUNK_MAX
        } else {
            (rows / 4).max(1)
        }
    }
}

/// out[t * w.rows + r] = dot(w.row(r), act row t), for t < n_rows.
pub fn matmul(pool: &ThreadPool, w: &WeightMatrix<'_>, act: &[u8], n_rows: usize, out: &mut [f32]) {
    run_batch(pool, &mut [Some((n_rows, Product { w: *w, act, out }))]);
}

/// One product of a batch: `w` × activation rows `act` (quantized for `w.ty`) into `out`
/// (`n_rows × w.rows`, the row count given beside it).
pub struct Product<'a> {
    pub w: WeightMatrix<'a>,
    pub act: &'a [u8],
    pub out: &'a mut [f32],
}

/// Most products one pool job runs.
const MAX_PRODUCTS: usize = 32;

/// Runs every product, all with `n_rows` activation rows (see [`matmul_batch`]).
pub fn matmul_all<'a>(pool: &ThreadPool, n_rows: usize, products: impl IntoIterator<Item = Product<'a>>) {
    matmul_batch(pool, products.into_iter().map(|p| (n_rows, p)));
}

/// Runs every `(n_rows, product)`, up to 32 products per pool job: a layer's Q, K and V, or an
/// MoE layer's experts (each with its own tokens), cost one hand-off to the workers instead of
/// one per matrix. The chunks of weight rows of all products of a job are numbered in one range
/// that `ThreadPool::run_chunks` shares out.
pub fn matmul_batch<'a>(pool: &ThreadPool, products: impl IntoIterator<Item = (usize, Product<'a>)>) {
    let mut batch: [Option<(usize, Product<'a>)>; MAX_PRODUCTS] = Default::default();
    let mut k = 0;
    for p in products {
        batch[k] = Some(p);
        k += 1;
        if k == MAX_PRODUCTS {
            run_batch(pool, &mut batch);
            k = 0;
        }
    }
    if k > 0 {
        run_batch(pool, &mut batch[..k]);
    }
}

/// What a product runs with. Decode (one activation row): the several-rows kernels on the
/// activation prepared at `prep_at` (in the pool's (0, PREP) buffer), else one row at a time.
/// Several rows: panels of weight rows with the per-block activation data at `aux_at` (in
/// ActAux units of the (0, AUX) buffer), else the batched kernels on the activation rows
/// prepared at `prep_at`, else the per-row kernels, with up to 8 activation rows per call.
#[derive(Clone, Copy)]
struct Plan {
    n_rows: usize,
    nb: usize,
    rb: usize,
    arb: usize,
    chunk: usize,
    single: Option<&'static simd::DotFns>,
    /// For a repacked matrix (`quant::Repacked::MulMat`), the first `gemm_rows` activation rows
    /// go in upstream's GEMM order: the panels, else these kernels; the rest in `single`'s.
    gemm_rows: usize,
    single_gemm: Option<&'static simd::DotFns>,
    gemv: Option<&'static simd::GemvFns>,
    batched: Option<&'static simd::BatchFns>,
    prep_at: usize,
    /// Whether this product prepares the rows at `prep_at` (else an earlier one of the batch does).
    prepared_here: bool,
    panels: Option<&'static simd::PanelFns>,
    aux_at: usize,
    /// The weights are interleaved (`Layout::Interleaved4`): decode takes `gemv` on whole
    /// groups; several rows de-interleave each chunk first.
    interleaved: bool,
}

impl Plan {
    /// The activation preparation of the product's kernels, if they take one.
    fn prep_fn(&self) -> Option<simd::PrepFn> {
        self.gemv.map(|g| g.prep).or(self.batched.map(|b| b.prep))
    }

    /// Bytes of one prepared activation row (64-byte multiple).
    fn prep_row_bytes(&self) -> usize {
        let bytes = self.gemv.map(|g| (g.prep_bytes)(self.nb)).or(self.batched.map(|b| (b.prep_bytes)(self.nb)));
        bytes.unwrap_or(0).next_multiple_of(64)
    }
}

fn run_batch(pool: &ThreadPool, batch: &mut [Option<(usize, Product<'_>)>]) {
    let n = batch.len();
    let mut plans = [None::<Plan>; MAX_PRODUCTS];
    // first chunk index of each product, and the total
    let mut first = [0usize; MAX_PRODUCTS + 1];
    let (mut prep_total, mut aux_total) = (0, 0);
    let decode_bytes: usize = batch.iter().map(|p| p.as_ref().expect("filled")).filter(|(n_rows, _)| *n_rows == 1).map(|(_, p)| p.w.rows * p.w.row_bytes()).sum();
    for j in 0..n {
        let (n_rows, p) = batch[j].as_ref().expect("filled");
        let (n_rows, w, rb) = (*n_rows, &p.w, p.w.row_bytes());
        let arb = w.ty.vec_dot_type().row_bytes(w.cols).expect("validated at load");
        assert!(p.act.len() >= arb * n_rows && p.out.len() >= w.rows * n_rows && w.data.len() >= rb * w.rows);
        let nb = w.cols / w.ty.block_len();
        let rp = w.repacked;
        let repacked = rp.is_repacked();
        let single = if repacked { simd::dot_fns_repacked(w.ty, false) } else { simd::dot_fns(w.ty) };
        // (in the fast order a tiled-order matrix sums as any other)
        let gemm_rows = if rp == quant::Repacked::Tiled && w.order == simd::SumOrder::Fast { 0 } else { rp.gemm_rows(n_rows) };
        let single_gemm = match (gemm_rows, rp) {
            (0, _) => None,
            (_, quant::Repacked::Sgemm) => simd::dot_fns_sgemm(w.ty),
            (_, quant::Repacked::Tiled) => simd::dot_fns_tiled(w.ty),
            _ => simd::dot_fns_repacked(w.ty, true),
        };
        let (mut gemv, mut batched, mut panels) = (None, None, None);
        let (mut prep_at, mut prepared_here, mut aux_at) = (0, false, 0);
        // the activation preparation this product needs, if any: (function, bytes per row)
        let mut prep_fn = None;
        let interleaved = w.layout == Layout::Interleaved4;
        // (the interleaved kernels sum in the repacked GEMV's order)
        assert!(!interleaved || (w.rows % quant::interleave::GROUP_ROWS == 0 && repacked), "interleaved: a repacked matrix in groups of four rows");
        if n_rows == 1 {
            gemv = if interleaved {
                Some(simd::gemv_fns_interleaved(w.ty).expect("matrices are interleaved only where the level has the kernel"))
            } else {
                single.and_then(|_| if repacked { simd::gemv_fns_repacked(w.ty) } else { simd::gemv_fns(w.ty) })
            };
            prep_fn = gemv.map(|g| (g.prep, (g.prep_bytes)(nb)));
        } else {
            // a repacked matrix's panels sum in upstream's GEMM order: its GEMM rows only
            let panel_rows = if repacked { gemm_rows } else { n_rows };
            // (an expert stack upstream multiplies with its GEMV only: no panel sums so; nor
            // in tinyBLAS's order)
            let gemv_only = rp == quant::Repacked::MulMatId && w.order == simd::SumOrder::Reference;
            // (a tinyBLAS product takes panels only where they sum in tinyBLAS's order)
            let sgemm = rp == quant::Repacked::Sgemm && w.order == simd::SumOrder::Reference && !simd::panel_is_sgemm_exact(simd::level(), w.ty);
            panels = if rp == quant::Repacked::Tiled && gemm_rows > 0 {
                // every row in the tiled matmul's order: from the panel's own minimum where it
                // has one (AVX2 Q6_K: 8), else from 9 rows where per-row kernels take that order
                // too (as the K-quant panels: unpacking pays from two tiles of rows)
                let from = if simd::dot_fns_tiled(w.ty).is_some() { TILE + 1 } else { 1 };
                simd::panel_fns_tiled(w.ty).filter(|g| gemm_rows >= if g.min_act_rows > 1 { g.min_act_rows } else { from })
            } else if gemv_only {
                // (the panels that sum in the GEMV's order)
                simd::panel_fns_gemv(w.ty).filter(|g| n_rows >= g.min_act_rows)
            } else {
                simd::panel_fns(w.ty, w.order, repacked).filter(|g| panel_rows >= g.min_act_rows && !sgemm)
            };
            if panels.is_some() {
                // (the K-quant panels read what they need from the Q8_K blocks)
                if simd::panel_takes_aux(w.ty) {
                    aux_at = aux_total;
                    aux_total += n_rows * nb;
                }
            } else {
                batched = match rp {
                    quant::Repacked::No => simd::batch_fns(w.ty),
                    // every row in tinyBLAS's order (`single_gemm`)
                    quant::Repacked::Sgemm if w.order == simd::SumOrder::Reference => None,
                    quant::Repacked::Sgemm => simd::batch_fns(w.ty),
                    // every row in the GEMV's order
                    quant::Repacked::MulMatId => simd::batch_fns_repacked(w.ty),
                    quant::Repacked::MulMat => None,
                    // every row in the tiled order (the batched kernels of that order, else
                    // `single_gemm`), or none
                    quant::Repacked::Tiled if gemm_rows > 0 => simd::batch_fns_tiled(w.ty),
                    quant::Repacked::Tiled => simd::batch_fns(w.ty),
                };
                prep_fn = batched.map(|b| (b.prep, (b.prep_bytes)(nb)));
            }
        }
        if let Some((f, row_bytes)) = prep_fn {
            // products on the same activation rows with the same preparation (q, k and v; an
            // MoE layer's experts) share them
            let shared = (0..j).find(|&i| {
                let (q, plan) = (batch[i].as_ref().expect("filled"), plans[i].expect("planned"));
                std::ptr::eq(q.1.act.as_ptr(), p.act.as_ptr()) && q.0 == n_rows && plan.nb == nb && plan.prep_fn().map(|h| h as usize) == Some(f as usize)
            });
            match shared {
                Some(i) => prep_at = plans[i].expect("planned").prep_at,
                None => {
                    (prep_at, prepared_here) = (prep_total, true);
                    prep_total += n_rows * row_bytes.next_multiple_of(64);
                }
            }
        }
        let chunk = chunk_rows(w.rows, rb, n_rows, decode_bytes, w.layout);
        plans[j] = Some(Plan { n_rows, nb, rb, arb, chunk, single, gemm_rows, single_gemm, gemv, batched, prep_at, prepared_here, panels, aux_at, interleaved });
        first[j + 1] = first[j] + if n_rows == 0 { 0 } else { w.rows.div_ceil(chunk) };
    }
    if first[n] == 0 {
        return;
    }
    // SAFETY: the caller owns the pool outside jobs and (0, PREP) / (0, AUX) are not asked for
    // inside them; the job only reads them through `prep` / `aux`. ActAux is plain f32/i32
    // fields (any bytes are a valid value) and the buffer is 64-byte aligned.
    let (prep, aux) = unsafe {
        let aux = std::slice::from_raw_parts_mut(pool.buffer(0, AUX, aux_total * std::mem::size_of::<simd::ActAux>()).cast::<simd::ActAux>(), aux_total);
        (pool.buffer(0, PREP, prep_total), aux)
    };
    for (p, plan) in batch.iter().zip(&plans) {
        let ((n_rows, p), plan) = (p.as_ref().expect("filled"), plan.expect("planned"));
        if let (Some(f), true) = (plan.prep_fn(), plan.prepared_here) {
            let row_bytes = plan.prep_row_bytes();
            for t in 0..*n_rows {
                // SAFETY: act holds n_rows rows of nb activation blocks (asserted above); the
                // region at prep_at holds n_rows prepared rows of row_bytes, each 64-byte
                // aligned; simd::gemv_fns / simd::batch_fns checked the CPU.
                unsafe { f(plan.nb, p.act.as_ptr().add(t * plan.arb), prep.add(plan.prep_at + t * row_bytes)) };
            }
        }
        if plan.panels.is_some() && simd::panel_takes_aux(p.w.ty) {
            simd::fill_act_aux(p.w.ty, &p.act[..n_rows * plan.arb], &mut aux[plan.aux_at..plan.aux_at + n_rows * plan.nb]);
        }
    }
    let outs: [Option<SharedOut<f32>>; MAX_PRODUCTS] = std::array::from_fn(|j| batch.get_mut(j).map(|p| SharedOut::new(p.as_mut().expect("filled").1.out)));
    let batch = &*batch;
    let (prep, aux) = (prep as usize, aux.as_ptr() as usize);
    pool.run_chunks(first[n], &|ith, c| {
        let j = first[1..=n].partition_point(|&f| f <= c);
        let (p, plan, out) = (&batch[j].as_ref().expect("filled").1, plans[j].expect("planned"), outs[j].expect("filled"));
        let start = (c - first[j]) * plan.chunk;
        let rows = start..(start + plan.chunk).min(p.w.rows);
        if plan.n_rows == 1 {
            decode_rows(&p.w, p.act, &plan, (prep + plan.prep_at) as *const u8, out, rows);
        } else {
            let aux = (aux as *const simd::ActAux).wrapping_add(plan.aux_at);
            prefill_rows(pool, ith, &p.w, p.act, &plan, (prep + plan.prep_at) as *const u8, aux, out, rows);
        }
    });
}

/// Decode rows `rows` of one product (see [`run_batch`]); only this call writes them.
fn decode_rows(w: &WeightMatrix<'_>, act: &[u8], plan: &Plan, prep: *const u8, out: SharedOut<f32>, rows: std::ops::Range<usize>) {
    let (nb, rb) = (plan.nb, plan.rb);
    let mut r = rows.start;
    // SAFETY: rows r.. lie inside w.data and their outputs inside out (asserted by
    // run_batch); the prepared activation lives until the pool job ends; the kernels' CPU
    // features were checked by simd::dot_fns / simd::gemv_fns.
    unsafe {
        let (wp, op) = (w.data.as_ptr(), out.ptr());
        if plan.interleaved {
            // whole groups only (chunks are whole groups, the rows a multiple of four)
            let g = plan.gemv.expect("interleaved decode kernel");
            while r < rows.end {
                (g.rows4)(nb, wp.add(r * rb), rb, prep, op.add(r));
                r += 4;
            }
            return;
        }
        if let Some(g) = plan.gemv {
            while r + 4 <= rows.end {
                (g.rows4)(nb, wp.add(r * rb), rb, prep, op.add(r));
                r += 4;
            }
            if r + 2 <= rows.end {
                (g.rows2)(nb, wp.add(r * rb), rb, prep, op.add(r));
                r += 2;
            }
            if let (Some(one), true) = (g.rows1, r < rows.end) {
                one(nb, wp.add(r * rb), rb, prep, op.add(r));
                r += 1;
            }
        }
        for r in r..rows.end {
            match plan.single {
                Some(k) => k[0](nb, wp.add(r * rb), act.as_ptr(), 0, op.add(r), 0),
                None => *op.add(r) = w.dot_ref(w.row(r), &act[..plan.arb], 0, 1),
            }
        }
    }
}

/// Weight rows `rows` of one product against its `plan.n_rows` activation rows (see
/// [`run_batch`]); only this call writes their outputs. `aux` holds the product's per-block
/// activation data when it has panels.
#[allow(clippy::too_many_arguments)]
fn prefill_rows(pool: &ThreadPool, ith: usize, w: &WeightMatrix<'_>, act: &[u8], plan: &Plan, prep: *const u8, aux: *const simd::ActAux, out: SharedOut<f32>, rows: std::ops::Range<usize>) {
    let (n_rows, nb, rb, arb) = (plan.n_rows, plan.nb, plan.rb, plan.arb);
    // a repacked matrix's GEMM rows, or every row of a tinyBLAS product, in their own order
    let repacked = matches!(w.repacked, quant::Repacked::MulMat | quant::Repacked::Sgemm | quant::Repacked::Tiled) && !(matches!(w.repacked, quant::Repacked::Sgemm | quant::Repacked::Tiled) && w.order == simd::SumOrder::Fast);
    // the activation rows the panels take: all, or a repacked matrix's GEMM rows
    let panel_rows = if repacked { plan.gemm_rows } else { n_rows };
    // This thread's (ith, PANEL) buffer: an interleaved matrix's chunk de-interleaved back to
    // the file's layout (so that every kernel below reads rows one after the other), then the
    // panel.
    // An interleaved matrix without panels: its own kernels, one group of four weight rows ×
    // up to 4 activation rows per call, the GEMM rows in that order, the rest in the GEMV's.
    if plan.interleaved && plan.panels.is_none() {
        if let (Some(gemm_k), Some(gemv_k)) = (simd::dot_fns_interleaved(w.ty, true), simd::dot_fns_interleaved(w.ty, false)) {
            let gemm_end = if repacked { plan.gemm_rows } else { 0 };
            assert!(rows.start % 4 == 0 && rows.len() % 4 == 0);
            for g in (rows.start..rows.end).step_by(4) {
                for (k, t_begin, t_end) in [(gemm_k, 0, gemm_end), (gemv_k, gemm_end, n_rows)] {
                    let mut t0 = t_begin;
                    while t0 < t_end {
                        let nt = (t_end - t0).min(4);
                        // SAFETY: group g / 4 lies inside w.data (rows are whole groups);
                        // activation rows t0..t0+nt lie inside act; outputs (t, g..g+4) lie
                        // inside out and only this chunk writes them; simd::dot_fns_interleaved
                        // checked the CPU.
                        unsafe { k[nt - 1](nb, w.data.as_ptr().add(g * rb), act.as_ptr().add(t0 * arb), arb, out.ptr().add(t0 * w.rows + g), w.rows) };
                        t0 += nt;
                    }
                }
            }
            return;
        }
    }
    let deint = if plan.interleaved { deinterleaved_bytes(w.ty, w.cols) } else { 0 };
    let need = deint + plan.panels.map_or(0, |g| nb * g.block_bytes);
    // SAFETY: only this job index uses its (ith, PANEL) buffer, asked for once per call.
    let buf = if need > 0 { unsafe { pool.buffer(ith, PANEL, need) } } else { std::ptr::null_mut() };
    let (wdata, r_base) = if plan.interleaved {
        assert!(rows.len() <= PREFILL_CHUNK_MAX && rows.start % 4 == 0 && rows.len() % 4 == 0);
        // SAFETY: buf holds deint >= PREFILL_CHUNK_MAX rows of rb bytes, written only here.
        let dst = unsafe { std::slice::from_raw_parts_mut(buf, rows.len() * rb) };
        simd::deinterleave_q4_k(&w.data[rows.start * rb..rows.end * rb], rows.len() / 4, w.cols, dst);
        (buf as *const u8, rows.start)
    } else {
        (w.data.as_ptr(), 0)
    };
    // weight row r (of this chunk) in the file's layout
    // SAFETY: r lies in `rows`: inside w.data, or inside the de-interleaved chunk.
    let wrow = |r: usize| unsafe { wdata.add((r - r_base) * rb) };
    let mut r_rest = rows.start;
    if let Some(g) = plan.panels {
        // g.rows weight rows at a time, unpacked once into this thread's panel, × up to 8
        // activation rows per call
        // SAFETY: the panel lies after the de-interleaved rows inside buf (`need`).
        let panel = unsafe { buf.add(deint) };
        let mut r0 = rows.start;
        while r0 + g.rows <= rows.end {
            // SAFETY: rows r0..r0+g.rows lie inside the chunk; the panel holds nb blocks, 64-byte
            // aligned (deint is a multiple of 64); the CPU features were detected by
            // simd::panel_fns.
            unsafe { (g.unpack)(nb, wrow(r0), rb, panel) };
            let mut t0 = 0;
            while t0 < panel_rows {
                let nt = (panel_rows - t0).min(8);
                // SAFETY: activation rows t0..t0+nt lie inside act and their aux entries inside
                // the product's aux region (filled for n_rows rows); outputs (t, r0..r0+g.rows)
                // lie inside out and only this chunk writes them.
                unsafe { g.gemm[nt - 1](nb, panel, act.as_ptr().add(t0 * arb), arb, aux.add(t0 * nb), out.ptr().add(t0 * w.rows + r0), w.rows) };
                t0 += nt;
            }
            r0 += g.rows;
        }
        r_rest = r0;
    }
    // What the panels left: for a repacked matrix its GEMM rows with the GEMM-order kernels
    // (from r_rest), then its GEMV rows with the others (every weight row); else every
    // activation row from r_rest.
    let (gemm_end, rest_from) = if repacked { (plan.gemm_rows, rows.start) } else { (0, r_rest) };
    let pb = plan.prep_row_bytes();
    for (seg, (t_begin, t_end)) in [(0, gemm_end), (gemm_end, n_rows)].into_iter().enumerate() {
        let gemm = seg == 0;
        // (a tiled-order matrix's batched kernels serve its GEMM rows: it has no others then)
        let gemm_batched = if w.repacked == quant::Repacked::Tiled { plan.batched } else { None };
        let (single, batched, r_from) = if gemm { (plan.single_gemm, gemm_batched, r_rest) } else { (plan.single, plan.batched, rest_from) };
        let mut t0 = t_begin;
        while t0 < t_end {
            let nt = (t_end - t0).min(TILE);
            for r in r_from..rows.end {
                match (batched, single) {
                    (Some(b), _) => {
                        // SAFETY: as below, with prepared activation rows t0..t0+nt at prep
                        // (run_batch prepared n_rows of them before the job); simd::batch_fns
                        // checked the CPU.
                        unsafe { b.rows[nt - 1](nb, wrow(r), prep.add(t0 * pb), pb, out.ptr().add(t0 * w.rows + r), w.rows) }
                    }
                    (None, Some(k)) => {
                        // SAFETY: row r has nb blocks inside w.data (asserted by run_batch);
                        // activation rows t0..t0+nt lie inside act; outputs (t, r) for t in
                        // t0..t0+nt lie inside out, and only this chunk writes column r. The
                        // kernel's CPU features were detected by simd::dot_fns.
                        unsafe { k[nt - 1](nb, wrow(r), act.as_ptr().add(t0 * arb), arb, out.ptr().add(t0 * w.rows + r), w.rows) }
                    }
                    (None, None) => {
                        // SAFETY: as wrow's: rb bytes of row r.
                        let row = unsafe { std::slice::from_raw_parts(wrow(r), rb) };
                        for t in t0..t0 + nt {
                            let v = w.dot_ref(row, &act[t * arb..(t + 1) * arb], t, n_rows);
                            // SAFETY: only this chunk writes column r of the output.
                            unsafe { out.slice(t * w.rows + r..t * w.rows + r + 1)[0] = v };
                        }
                    }
                }
            }
            t0 += nt;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch of products with different types and row counts (decode and prefill in one
    /// job, shared activations) gives each product what it gives alone, bit for bit.
    #[test]
    fn batch_equals_products_alone() {
        let pool = ThreadPool::new(2).unwrap();
        let mut seed = 11u64;
        let mut rnd = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            ((seed >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        };
        let cases = [(GgmlType::Q4K, 512, 300, 1), (GgmlType::Q4K, 512, 77, 1), (GgmlType::Q5_0, 96, 64, 3), (GgmlType::Q6K, 256, 40, 0), (GgmlType::Q8_0, 64, 33, 9), (GgmlType::F32, 9, 5, 2), (GgmlType::Q4K, 512, 20, 1), (GgmlType::Q4K, 512, 50, 3), (GgmlType::Q6K, 512, 30, 3)];
        let mats: Vec<(GgmlType, usize, usize, usize, Vec<u8>, Vec<u8>)> = cases
            .iter()
            .map(|&(ty, cols, rows, n)| {
                let rb = ty.row_bytes(cols).unwrap();
                let mut data = vec![0u8; rb * rows];
                for r in 0..rows {
                    let x: Vec<f32> = (0..cols).map(|_| rnd()).collect();
                    quant::quantize_row_ref(ty, &x, &mut data[r * rb..(r + 1) * rb]);
                }
                let x: Vec<f32> = (0..cols * n.max(1)).map(|_| rnd()).collect();
                let mut act = vec![0u8; activation_bytes(ty, cols, n.max(1))];
                quantize_activations(&pool, ty, &x, cols, n.max(1), &mut act);
                (ty, cols, rows, n, data, act)
            })
            .collect();
        let alone: Vec<Vec<f32>> = mats
            .iter()
            .map(|(ty, cols, rows, n, data, act)| {
                let mut out = vec![f32::NAN; rows * n];
                matmul(&pool, &WeightMatrix { ty: *ty, rows: *rows, cols: *cols, data, order: simd::SumOrder::Fast, repacked: quant::Repacked::No, layout: Layout::Rows }, act, *n, &mut out);
                out
            })
            .collect();
        let mut outs: Vec<Vec<f32>> = mats.iter().map(|(_, _, rows, n, _, _)| vec![f32::NAN; rows * n]).collect();
        // the first two Q4_K products share one activation row, and the last two (Q4_K and
        // Q6_K, like q and v) three rows: their preparations are shared
        let sharing = [(1, 0), (8, 7)];
        matmul_batch(
            &pool,
            mats.iter().zip(outs.iter_mut()).enumerate().map(|(i, ((ty, cols, rows, n, data, act), out))| {
                let act = sharing.iter().find(|s| s.0 == i).map_or(act, |s| &mats[s.1].5);
                (*n, Product { w: WeightMatrix { ty: *ty, rows: *rows, cols: *cols, data, order: simd::SumOrder::Fast, repacked: quant::Repacked::No, layout: Layout::Rows }, act, out })
            }),
        );
        for (i, (got, want)) in outs.iter().zip(&alone).enumerate() {
            if sharing.iter().any(|s| s.0 == i) {
                continue;
            }
            assert_eq!(got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), "product {i}");
        }
        for (i, from) in sharing {
            let (ty, cols, rows, n, data, _) = &mats[i];
            let mut want = vec![f32::NAN; rows * n];
            matmul(&pool, &WeightMatrix { ty: *ty, rows: *rows, cols: *cols, data, order: simd::SumOrder::Fast, repacked: quant::Repacked::No, layout: Layout::Rows }, &mats[from].5, *n, &mut want);
            assert_eq!(outs[i].iter().map(|v| v.to_bits()).collect::<Vec<_>>(), want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), "product {i} on a shared activation");
        }
    }

    /// llama.cpp's own output of a repacked Q4_K matrix (tests/data/upstream_ops: 39 rows, 36
    /// through its GEMM and 3 through its GEMV) on its own input, bit for bit: the scalar
    /// reference in the matching order, and the product at this machine's kernel level. The
    /// `vec_dot` order gets most of them wrong (so the data tells the orders apart).
    #[test]
    fn q4_k_is_llama_cpps_repacked_matmul() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let f32s = |name: &str| -> Vec<f32> { std::fs::read(root.join("tests/data/upstream_ops").join(name)).unwrap().chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect() };
        let (x, want) = (f32s("q4k_kv_a_in_39.f32"), f32s("q4k_kv_a_out_39.f32"));
        let file = crate::gguf::GgufFile::open(&root.join("tests/data/deepseek2/tiny-deepseek3-q4_k_m.gguf"), true).unwrap();
        let t = file.tensor("blk.0.attn_kv_a_mqa.weight").unwrap();
        let (cols, rows, n) = (t.dims[0], t.dims[1], 39);
        assert_eq!((t.ty, x.len(), want.len()), (GgmlType::Q4K, n * cols, n * rows));
        let w = WeightMatrix { ty: t.ty, rows, cols, data: file.tensor_data(t), order: simd::SumOrder::Reference, repacked: quant::Repacked::of(t.ty, rows, false), layout: Layout::Rows };
        assert_eq!(w.repacked, quant::Repacked::MulMat);
        let pool = ThreadPool::new(2).unwrap();
        let mut act = vec![0u8; activation_bytes(w.ty, cols, n)];
        quantize_activations(&pool, w.ty, &x, cols, n, &mut act);
        let arb = act.len() / n;
        let mut vec_dot_equal = 0;
        for t in 0..n {
            for r in 0..rows {
                let a = &act[t * arb..(t + 1) * arb];
                let got = w.dot_ref(w.row(r), a, t, n);
                assert_eq!(got.to_bits(), want[t * rows + r].to_bits(), "reference ({t}, {r}): {got} vs llama.cpp's {}", want[t * rows + r]);
                vec_dot_equal += (quant::vec_dot(w.ty, cols, w.row(r), a).to_bits() == got.to_bits()) as usize;
            }
        }
        assert!(vec_dot_equal < n * rows / 2, "vec_dot's order matched {vec_dot_equal} of {}", n * rows);
        let mut out = vec![f32::NAN; n * rows];
        matmul(&pool, &w, &act, n, &mut out);
        for (i, (g, e)) in out.iter().zip(&want).enumerate() {
            assert_eq!(g.to_bits(), e.to_bits(), "{:?} level, output ({}, {}): {g} vs llama.cpp's {e}", simd::level(), i / rows, i % rows);
        }
        // one row alone (decode) goes through upstream's GEMV
        let mut one = vec![f32::NAN; rows];
        matmul(&pool, &w, &act[36 * arb..37 * arb], 1, &mut one);
        assert_eq!(one.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), want[36 * rows..37 * rows].iter().map(|v| v.to_bits()).collect::<Vec<_>>());
        // interleaved as a model loads it where the level has the kernel: the same bits
        if simd::gemv_fns_interleaved(w.ty).is_some() {
            let mut il = vec![0u8; w.data.len()];
            quant::interleave::interleave_q4_k(w.data, rows, cols, &mut il);
            let wi = WeightMatrix { data: &il, layout: Layout::Interleaved4, ..w };
            out.fill(f32::NAN);
            matmul(&pool, &wi, &act, n, &mut out);
            assert_eq!(out.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), "interleaved");
            one.fill(f32::NAN);
            matmul(&pool, &wi, &act[36 * arb..37 * arb], 1, &mut one);
            assert_eq!(one.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), want[36 * rows..37 * rows].iter().map(|v| v.to_bits()).collect::<Vec<_>>(), "interleaved decode");
        }
    }

    /// A Q4_K matrix interleaved four rows at a time gives, bit for bit, what its rows give in
    /// the file's layout: decode (the interleaved kernel), batched decode and prefill (chunks
    /// de-interleaved for the per-row kernels and panels), repacked 2-D matrices and expert
    /// stacks, both sum orders, one and two threads, alone and in a batch with another product.
    #[test]
    fn interleaved_equals_rows() {
        if simd::gemv_fns_interleaved(GgmlType::Q4K).is_none() {
            eprintln!("no interleaved kernel at the {:?} level: nothing to compare", simd::level());
            return;
        }
        let mut seed = 5u64;
        let mut rnd = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            ((seed >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        };
        let ty = GgmlType::Q4K;
        for threads in [1, 2] {
            let pool = ThreadPool::new(threads).unwrap();
            reserve_panels(&pool, panel_bytes(ty, 768));
            for (cols, rows, experts) in [(512, 8, false), (768, 40, false), (256, 296, false), (512, 40, true), (256, 1032, false)] {
                let rb = ty.row_bytes(cols).unwrap();
                let mut data = vec![0u8; rb * rows];
                for r in 0..rows {
                    let x: Vec<f32> = (0..cols).map(|_| rnd()).collect();
                    quant::quantize_row_ref(ty, &x, &mut data[r * rb..(r + 1) * rb]);
                }
                let mut il = vec![0u8; data.len()];
                quant::interleave::interleave_q4_k(&data, rows, cols, &mut il);
                for order in [simd::SumOrder::Reference, simd::SumOrder::Fast] {
                    let w = WeightMatrix { ty, rows, cols, data: &data, order, repacked: quant::Repacked::of(ty, rows, experts), layout: Layout::Rows };
                    assert!(w.repacked.is_repacked());
                    let wi = WeightMatrix { data: &il, layout: Layout::Interleaved4, ..w };
                    for n in [1, 2, 3, 4, 5, 8, 9, 16, 17, 33] {
                        let x: Vec<f32> = (0..cols * n).map(|_| rnd()).collect();
                        let mut act = vec![0u8; activation_bytes(ty, cols, n)];
                        quantize_activations(&pool, ty, &x, cols, n, &mut act);
                        let (mut want, mut got) = (vec![f32::NAN; rows * n], vec![f32::NAN; rows * n]);
                        matmul(&pool, &w, &act, n, &mut want);
                        matmul(&pool, &wi, &act, n, &mut got);
                        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                        assert_eq!(bits(&got), bits(&want), "{threads} threads, {cols} x {rows}, experts {experts}, {order:?}, {n} rows");
                        // beside another product in one job (the other's chunks interleave with these)
                        let mut got2 = vec![f32::NAN; rows * n];
                        let mut other = vec![f32::NAN; rows * n];
                        matmul_all(&pool, n, [Product { w, act: &act, out: &mut other }, Product { w: wi, act: &act, out: &mut got2 }]);
                        assert_eq!(bits(&got2), bits(&want), "in a batch: {threads} threads, {cols} x {rows}, {n} rows");
                        assert_eq!(bits(&other), bits(&want));
                    }
                }
            }
        }
    }

    /// The driver (chunks, tiles, threads) gives the reference's dot product for every output.
    #[test]
    fn matmul_matches_vec_dot() {
        let pool = ThreadPool::new(2).unwrap();
        let mut seed = 7u64;
        let mut rnd = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            ((seed >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        };
        for (ty, cols) in [(GgmlType::Q5_0, 96), (GgmlType::Q4_1, 64), (GgmlType::Q4K, 512), (GgmlType::Q8_0, 64), (GgmlType::F32, 9), (GgmlType::Q6K, 256), (GgmlType::Q5K, 256), (GgmlType::IQ4_NL, 96)] {
            for rows in [1, 3, 37, 40, 300] {
                for n in [1, 2, 5, 8, 9, 17] {
                    let rb = ty.row_bytes(cols).unwrap();
                    let mut data = vec![0u8; rb * rows];
                    for r in 0..rows {
                        let x: Vec<f32> = (0..cols).map(|_| rnd()).collect();
                        quant::quantize_row_ref(ty, &x, &mut data[r * rb..(r + 1) * rb]);
                    }
                    let x: Vec<f32> = (0..cols * n).map(|_| rnd()).collect();
                    let mut act = vec![0u8; activation_bytes(ty, cols, n)];
                    quantize_activations(&pool, ty, &x, cols, n, &mut act);
                  use quant::Repacked;
                  for (order, repacked) in [(simd::SumOrder::Reference, Repacked::No), (simd::SumOrder::Fast, Repacked::No), (simd::SumOrder::Reference, Repacked::MulMat), (simd::SumOrder::Fast, Repacked::MulMat), (simd::SumOrder::Reference, Repacked::MulMatId), (simd::SumOrder::Reference, Repacked::Sgemm), (simd::SumOrder::Reference, Repacked::Tiled)] {
                    if repacked.is_repacked() && !quant::repacked_order(ty, rows) || repacked == Repacked::Sgemm && !quant::sgemm_order(ty) || repacked == Repacked::Tiled && !quant::tiled_order(ty) {
                        continue;
                    }
                    let w = WeightMatrix { ty, rows, cols, data: &data, order, repacked, layout: Layout::Rows };
                    let mut out = vec![f32::NAN; rows * n];
                    matmul(&pool, &w, &act, n, &mut out);
                    let arb = ty.vec_dot_type().row_bytes(cols).unwrap();
                    let mut act_ref = vec![0u8; arb * n];
                    for t in 0..n {
                        quant::quantize_row(ty.vec_dot_type(), &x[t * cols..(t + 1) * cols], &mut act_ref[t * arb..(t + 1) * arb]);
                    }
                    for t in 0..n {
                        for r in 0..rows {
                            let want = w.dot_ref(w.row(r), &act_ref[t * arb..(t + 1) * arb], t, n);
                            let got = out[t * rows + r];
                            let rp = repacked.is_repacked();
                            // tinyBLAS's order: panels only where they sum so, else the per-row kernels
                            let exact_panel = order == simd::SumOrder::Reference && (simd::panel_is_exact(simd::level(), ty, rp) || repacked == Repacked::Sgemm);
                            let panel_rows = if rp { repacked.gemm_rows(n) } else { n };
                            if exact_panel || t >= panel_rows || simd::panel_fns(ty, order, rp).is_none_or(|g| panel_rows < g.min_act_rows) {
                                // the reference's order, decode and the per-row kernels: bit for bit
                                assert_eq!(got.to_bits(), want.to_bits(), "{} {order:?} {repacked:?} rows {rows} n {n} ({t}, {r})", ty.name());
                            } else {
                                let (mut wf, mut af) = (vec![0f32; cols], vec![0f32; cols]);
                                quant::dequantize_row(ty, w.row(r), &mut wf);
                                quant::dequantize_row(ty.vec_dot_type(), &act_ref[t * arb..(t + 1) * arb], &mut af);
                                let sum_abs: f32 = wf.iter().zip(&af).map(|(x, y)| (x * y).abs()).sum();
                                assert!((got - want).abs() <= 1e-5 * sum_abs, "{} rows {rows} n {n} ({t}, {r}): {got} vs {want}", ty.name());
                            }
                        }
                    }
                  }
                }
            }
        }
    }
}
