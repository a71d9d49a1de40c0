//! The steps upstream's samplers share: sorting by logit, softmax, temperature, top-k.

use std::cmp::Ordering;

use super::{Candidates, TokenData};

/// A NaN ranks as -inf: sorting stays a total order (Rust's sorts may panic otherwise, and
/// C++'s std::sort is undefined) and a NaN logit ends up last, never chosen over a number.
pub fn nan_lowest(x: f32) -> f32 {
    if x.is_nan() {
        f32::NEG_INFINITY
    } else {
        x
    }
}

/// Descending by logit (upstream's comparator `a.logit > b.logit`), NaN last.
fn by_logit_desc(a: &TokenData, b: &TokenData) -> Ordering {
    nan_lowest(b.logit).partial_cmp(&nan_lowest(a.logit)).unwrap_or(Ordering::Equal)
}

/// Sorts the best `k` candidates to the front in descending order, leaving the rest (all no
/// better than them) behind in any order. No allocation.
pub fn sort_front(data: &mut [TokenData], k: usize) {
    let k = k.min(data.len());
    if k == 0 {
        return;
    }
    if k < data.len() {
        data.select_nth_unstable_by(k - 1, by_logit_desc);
    }
    data[..k].sort_unstable_by(by_logit_desc);
}

/// Keeps the best `k` candidates, sorted (upstream's partial_sort_inplace).
pub fn partial_sort(cur: &mut Candidates<'_>, k: usize) {
    sort_front(cur.data, k);
    cur.truncate(k);
    cur.sorted = true;
}

/// Sets `p` to the softmax of the logits (sorting first when asked and not yet sorted).
pub fn softmax(cur: &mut Candidates<'_>, do_sort: bool) {
    assert!(!cur.is_empty(), "softmax of an empty candidate array");
    if do_sort && !cur.sorted {
        let n = cur.len();
        partial_sort(cur, n);
    }
    let max_l = if cur.sorted { cur.data[0].logit } else { cur.data.iter().fold(cur.data[0].logit, |m, t| m.max(t.logit)) };
    let mut sum = 0.0f32;
    for t in cur.data.iter_mut() {
        t.p = (t.logit - max_l).exp();
        sum += t.p;
    }
    for t in cur.data.iter_mut() {
        t.p /= sum;
    }
}

/// Divides logits by `temp`; `temp <= 0` keeps only the first maximum (the rest become -inf).
pub fn temperature(cur: &mut Candidates<'_>, temp: f32) {
    if cur.is_empty() {
        return;
    }
    if temp <= 0.0 {
        let mut max_i = 0;
        for i in 1..cur.len() {
            if cur.data[i].logit > cur.data[max_i].logit {
                cur.data[max_i].logit = f32::NEG_INFINITY;
                max_i = i;
            } else {
                cur.data[i].logit = f32::NEG_INFINITY;
            }
        }
        return;
    }
    for t in cur.data.iter_mut() {
        t.logit /= temp;
    }
}

/// Keeps the `k` best candidates (k <= 0: no-op).
pub fn top_k(cur: &mut Candidates<'_>, k: i32) {
    if k <= 0 {
        return;
    }
    let k = (k as usize).min(cur.len());
    if !cur.sorted {
        partial_sort(cur, k);
    }
    cur.truncate(k);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arr(logits: &[f32]) -> Vec<TokenData> {
        logits.iter().enumerate().map(|(i, &l)| TokenData { id: i as i32, logit: l, p: 0.0 }).collect()
    }

    #[test]
    fn sort_front_puts_the_best_first() {
        let mut d = arr(&[0.5, 3.0, -1.0, 2.0, 7.0, 1.0]);
        sort_front(&mut d, 3);
        assert_eq!(d[..3].iter().map(|t| t.id).collect::<Vec<_>>(), vec![4, 1, 3]);
        assert!(d[3..].iter().all(|t| t.logit <= 2.0));
    }

    #[test]
    fn softmax_sums_to_one_and_matches_exp_ratio() {
        let mut d = arr(&[1.0, 2.0, 3.0]);
        let mut c = Candidates::new(&mut d);
        softmax(&mut c, false);
        let z = 1f64.exp() + 2f64.exp() + 3f64.exp();
        for (t, l) in c.data.iter().zip([1.0f64, 2.0, 3.0]) {
            assert!((t.p as f64 - l.exp() / z).abs() < 1e-6);
        }
    }
}

#[cfg(test)]
mod nan_tests {
    use super::*;

    /// Found by the api_sequence fuzzer (tests/data/regressions/api_sequence/): NaN logits
    /// made the comparator inconsistent and the sort panicked. NaN now ranks last.
    #[test]
    fn nan_logits_sort_last_without_panicking() {
        let mut data: Vec<TokenData> = [1.0, f32::NAN, 3.0, f32::NAN, -2.0, f32::INFINITY, f32::NAN, 0.5, 2.0, f32::NAN, 7.0, -1.0, f32::NAN, 4.0, 9.0, 8.0, 6.0, 5.0, f32::NAN, 10.0, 11.0]
            .iter()
            .enumerate()
            .map(|(i, &logit)| TokenData { id: i as i32, logit, p: 0.0 })
            .collect();
        let n = data.len();
        let mut cur = Candidates::new(&mut data);
        partial_sort(&mut cur, n);
        let logits: Vec<f32> = cur.data.iter().map(|t| t.logit).collect();
        assert_eq!(logits[0], f32::INFINITY);
        assert!(logits[..15].windows(2).all(|w| w[0] >= w[1]), "{logits:?}");
        assert!(logits[15..].iter().all(|x| x.is_nan()), "{logits:?}");
    }
}
