//! Orders that upstream gets from libstdc++ containers and algorithms, reproduced so that the
//! results that depend on them are the same:
//!
//! - `token_to_id` is a `std::unordered_map<std::string, llama_token>`; the auto-detection of
//!   EOT/EOM/FIM tokens from their text walks it and keeps the *first* match, so when a vocabulary
//!   has several candidates (Qwen2: `<|im_end|>` and `<|endoftext|>`) the winner is decided by
//!   the map's iteration order. [`unordered_map_order`] computes that order (libstdc++'s
//!   `_Hashtable`: `std::hash<std::string>` = `_Hash_bytes(seed 0xc70f6907)`, prime rehash policy
//!   with max load factor 1, insertion at the front of a bucket).
//! - `cache_special_tokens` is ordered by `std::sort` on text length, which is not stable;
//!   [`std_sort`] is libstdc++'s introsort, so equal-length special tokens are tried in the same
//!   order.

/// libstdc++ `std::_Hash_bytes` (64-bit), as used by `std::hash<std::string>`.
pub(super) fn hash_bytes(data: &[u8], seed: u64) -> u64 {
    const MUL: u64 = (0xc6a4_a793u64 << 32) + 0x5bd1_e995;
    let shift_mix = |v: u64| v ^ (v >> 47);
    let len = data.len();
    let aligned = len & !7;
    let mut hash = seed ^ (len as u64).wrapping_mul(MUL);
    for chunk in data[..aligned].chunks_exact(8) {
        let d = shift_mix(u64::from_le_bytes(chunk.try_into().unwrap()).wrapping_mul(MUL)).wrapping_mul(MUL);
        hash ^= d;
        hash = hash.wrapping_mul(MUL);
    }
    if len & 7 != 0 {
        let mut d = 0u64;
        for &b in data[aligned..].iter().rev() {
            d = (d << 8) | b as u64;
        }
        hash ^= d;
        hash = hash.wrapping_mul(MUL);
    }
    hash = shift_mix(hash).wrapping_mul(MUL);
    shift_mix(hash)
}

pub(super) fn std_string_hash(s: &[u8]) -> u64 {
    hash_bytes(s, 0xc70f_6907)
}

/// `__prime_list` of libstdc++ from 17 on (the entries `_M_next_bkt` searches), up to 2^32.
static PRIMES: [u64; 250] = [
    17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 89, 97, 103, 109, 113, 127, 137, 139, 149,
    157, 167, 179, 193, 199, 211, 227, 241, 257, 277, 293, 313, 337, 359, 383, 409, 439, 467, 503, 541, 577, 619,
    661, 709, 761, 823, 887, 953, 1031, 1109, 1193, 1289, 1381, 1493, 1613, 1741, 1879, 2029, 2179, 2357, 2549,
    2753, 2971, 3209, 3469, 3739, 4027, 4349, 4703, 5087, 5503, 5953, 6427, 6949, 7517, 8123, 8783, 9497, 10273,
    11113, 12011, 12983, 14033, 15173, 16411, 17749, 19183, 20753, 22447, 24281, 26267, 28411, 30727, 33223, 35933,
    38873, 42043, 45481, 49201, 53201, 57557, 62233, 67307, 72817, 78779, 85229, 92203, 99733, 107897, 116731,
    126271, 136607, 147793, 159871, 172933, 187091, 202409, 218971, 236897, 256279, 277261, 299951, 324503, 351061,
    379787, 410857, 444487, 480881, 520241, 562841, 608903, 658753, 712697, 771049, 834181, 902483, 976369, 1056323,
    1142821, 1236397, 1337629, 1447153, 1565659, 1693859, 1832561, 1982627, 2144977, 2320627, 2510653, 2716249,
    2938679, 3179303, 3439651, 3721303, 4026031, 4355707, 4712381, 5098259, 5515729, 5967347, 6456007, 6984629,
    7556579, 8175383, 8844859, 9569143, 10352717, 11200489, 12117689, 13109983, 14183539, 15345007, 16601593,
    17961079, 19431899, 21023161, 22744717, 24607243, 26622317, 28802401, 31160981, 33712729, 36473443, 39460231,
    42691603, 46187573, 49969847, 54061849, 58488943, 63278561, 68460391, 74066549, 80131819, 86693767, 93793069,
    101473717, 109783337, 118773397, 128499677, 139022417, 150406843, 162723577, 176048909, 190465427, 206062531,
    222936881, 241193053, 260944219, 282312799, 305431229, 330442829, 357502601, 386778277, 418451333, 452718089,
    489790921, 529899637, 573292817, 620239453, 671030513, 725980837, 785430967, 849749479, 919334987, 994618837,
    1076067617, 1164186217, 1259520799, 1362662261, 1474249943, 1594975441, 1725587117, 1866894511, 2019773507,
    2185171673, 2364114217, 2557710269, 2767159799, 2993761039, 3238918481, 3504151727, 3791104843, 4101556399,
    4294967291,
];

/// `_Prime_rehash_policy` with max_load_factor 1.0.
struct RehashPolicy {
    next_resize: u64,
}

impl RehashPolicy {
    fn next_bkt(&mut self, n: u64) -> u64 {
        const FAST: [u8; 14] = [2, 2, 2, 3, 5, 5, 7, 7, 11, 11, 11, 11, 13, 13];
        if n < FAST.len() as u64 {
            if n == 0 {
                return 1;
            }
            self.next_resize = FAST[n as usize] as u64;
            return FAST[n as usize] as u64;
        }
        let i = PRIMES.partition_point(|&p| p < n).min(PRIMES.len() - 1);
        self.next_resize = PRIMES[i];
        PRIMES[i]
    }

    /// `_M_need_rehash(n_bkt, n_elt, 1)`: the new bucket count, if a rehash is due.
    fn need_rehash(&mut self, n_bkt: u64, n_elt: u64) -> Option<u64> {
        if n_elt + 1 <= self.next_resize {
            return None;
        }
        let min_bkts = (n_elt + 1).max(if self.next_resize == 0 { 11 } else { 0 });
        if min_bkts >= n_bkt {
            Some(self.next_bkt((min_bkts + 1).max(n_bkt * 2)))
        } else {
            self.next_resize = n_bkt;
            None
        }
    }
}

const NIL: u32 = u32::MAX;
/// Index of the list head (`_M_before_begin`) in the `next` array.
const HEAD: u32 = 0;

/// Iteration order of a libstdc++ `std::unordered_map<std::string, V>` after inserting `keys`
/// in order with `operator[]` (keys must be distinct). Returns indices into `keys`.
pub(super) fn unordered_map_order<K: AsRef<[u8]>>(keys: &[K]) -> Vec<usize> {
    let n = keys.len();
    let hashes: Vec<u64> = keys.iter().map(|k| std_string_hash(k.as_ref())).collect();
    // node i (key index i) is slot i + 1; slot 0 is the list head
    let mut next = vec![NIL; n + 1];
    // buckets[b] = slot of the node *before* the first node of bucket b, or NIL
    let mut buckets: Vec<u32> = vec![NIL; 1];
    let mut n_bkt = 1u64;
    let mut policy = RehashPolicy { next_resize: 0 };

    for i in 0..n {
        if let Some(new_bkt) = policy.need_rehash(n_bkt, i as u64) {
            // _M_rehash_aux(n, true_type)
            let mut nb = vec![NIL; new_bkt as usize];
            let mut p = next[HEAD as usize];
            next[HEAD as usize] = NIL;
            let mut bbegin_bkt = 0usize;
            while p != NIL {
                let after = next[p as usize];
                let b = (hashes[p as usize - 1] % new_bkt) as usize;
                if nb[b] == NIL {
                    next[p as usize] = next[HEAD as usize];
                    next[HEAD as usize] = p;
                    nb[b] = HEAD;
                    if next[p as usize] != NIL {
                        nb[bbegin_bkt] = p;
                    }
                    bbegin_bkt = b;
                } else {
                    next[p as usize] = next[nb[b] as usize];
                    next[nb[b] as usize] = p;
                }
                p = after;
            }
            buckets = nb;
            n_bkt = new_bkt;
        }
        // _M_insert_bucket_begin
        let node = i as u32 + 1;
        let b = (hashes[i] % n_bkt) as usize;
        if buckets[b] != NIL {
            next[node as usize] = next[buckets[b] as usize];
            next[buckets[b] as usize] = node;
        } else {
            next[node as usize] = next[HEAD as usize];
            next[HEAD as usize] = node;
            if next[node as usize] != NIL {
                let nb = (hashes[next[node as usize] as usize - 1] % n_bkt) as usize;
                buckets[nb] = node;
            }
            buckets[b] = HEAD;
        }
    }

    let mut order = Vec::with_capacity(n);
    let mut p = next[HEAD as usize];
    while p != NIL {
        order.push(p as usize - 1);
        p = next[p as usize];
    }
    order
}

/// libstdc++ `std::sort` (introsort: median-of-three quicksort down to 16-element runs, heapsort
/// when the depth limit is hit, then a final insertion sort) with a strict weak order `less`.
pub(super) fn std_sort<T: Copy>(v: &mut [T], less: &impl Fn(&T, &T) -> bool) {
    let n = v.len();
    if n <= 1 {
        return;
    }
    let depth = 2 * (usize::BITS - 1 - n.leading_zeros()) as usize;
    introsort_loop(v, depth, less);
    final_insertion_sort(v, less);
}

const THRESHOLD: usize = 16;

fn introsort_loop<T: Copy>(v: &mut [T], mut depth: usize, less: &impl Fn(&T, &T) -> bool) {
    let mut last = v.len();
    while last > THRESHOLD {
        if depth == 0 {
            partial_sort_all(&mut v[..last], less);
            return;
        }
        depth -= 1;
        let cut = unguarded_partition_pivot(&mut v[..last], less);
        introsort_loop(&mut v[cut..last], depth, less);
        last = cut;
    }
}

fn move_median_to_first<T: Copy>(v: &mut [T], result: usize, a: usize, b: usize, c: usize, less: &impl Fn(&T, &T) -> bool) {
    if less(&v[a], &v[b]) {
        if less(&v[b], &v[c]) {
            v.swap(result, b);
        } else if less(&v[a], &v[c]) {
            v.swap(result, c);
        } else {
            v.swap(result, a);
        }
    } else if less(&v[a], &v[c]) {
        v.swap(result, a);
    } else if less(&v[b], &v[c]) {
        v.swap(result, c);
    } else {
        v.swap(result, b);
    }
}

fn unguarded_partition_pivot<T: Copy>(v: &mut [T], less: &impl Fn(&T, &T) -> bool) -> usize {
    let last = v.len();
    let mid = last / 2;
    move_median_to_first(v, 0, 1, mid, last - 1, less);
    // __unguarded_partition(first + 1, last, first)
    let mut first = 1;
    let mut last = last;
    loop {
        while less(&v[first], &v[0]) {
            first += 1;
        }
        last -= 1;
        while less(&v[0], &v[last]) {
            last -= 1;
        }
        if first >= last {
            return first;
        }
        v.swap(first, last);
        first += 1;
    }
}

fn final_insertion_sort<T: Copy>(v: &mut [T], less: &impl Fn(&T, &T) -> bool) {
    if v.len() > THRESHOLD {
        insertion_sort(&mut v[..THRESHOLD], less);
        for i in THRESHOLD..v.len() {
            unguarded_linear_insert(v, i, less);
        }
    } else {
        insertion_sort(v, less);
    }
}

fn insertion_sort<T: Copy>(v: &mut [T], less: &impl Fn(&T, &T) -> bool) {
    for i in 1..v.len() {
        if less(&v[i], &v[0]) {
            let val = v[i];
            v.copy_within(0..i, 1);
            v[0] = val;
        } else {
            unguarded_linear_insert(v, i, less);
        }
    }
}

fn unguarded_linear_insert<T: Copy>(v: &mut [T], mut i: usize, less: &impl Fn(&T, &T) -> bool) {
    let val = v[i];
    while less(&val, &v[i - 1]) {
        v[i] = v[i - 1];
        i -= 1;
    }
    v[i] = val;
}

/// `std::__partial_sort(first, last, last)`: heap_select then sort_heap.
fn partial_sort_all<T: Copy>(v: &mut [T], less: &impl Fn(&T, &T) -> bool) {
    let len = v.len();
    // make_heap
    if len >= 2 {
        let mut parent = (len - 2) / 2;
        loop {
            let val = v[parent];
            adjust_heap(v, parent, len, val, less);
            if parent == 0 {
                break;
            }
            parent -= 1;
        }
    }
    // heap_select with middle == last does nothing more; sort_heap:
    let mut last = len;
    while last > 1 {
        last -= 1;
        let val = v[last];
        v[last] = v[0];
        adjust_heap(v, 0, last, val, less);
    }
}

fn adjust_heap<T: Copy>(v: &mut [T], mut hole: usize, len: usize, val: T, less: &impl Fn(&T, &T) -> bool) {
    let top = hole;
    let mut child = hole;
    while child < (len.saturating_sub(1)) / 2 {
        child = 2 * (child + 1);
        if less(&v[child], &v[child - 1]) {
            child -= 1;
        }
        v[hole] = v[child];
        hole = child;
    }
    if len & 1 == 0 && len >= 2 && child == (len - 2) / 2 {
        child = 2 * (child + 1);
        v[hole] = v[child - 1];
        hole = child - 1;
    }
    // push_heap
    let mut parent = if hole > 0 { (hole - 1) / 2 } else { 0 };
    while hole > top && less(&v[parent], &val) {
        v[hole] = v[parent];
        hole = parent;
        parent = if hole > 0 { (hole - 1) / 2 } else { 0 };
    }
    v[hole] = val;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sort_sorts() {
        let mut x: Vec<u32> = (0..1000u32).map(|i| (i * 7919) % 1009).collect();
        std_sort(&mut x, &|a, b| a < b);
        assert!(x.windows(2).all(|w| w[0] <= w[1]));
        let mut y: Vec<u32> = vec![5; 40];
        std_sort(&mut y, &|a, b| a < b);
        // heap path: force depth 0 through a large adversarial-free input is hard; exercise directly
        let mut z: Vec<u32> = (0..100u32).rev().collect();
        partial_sort_all(&mut z, &|a, b| a < b);
        assert!(z.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn order_is_a_permutation() {
        let keys: Vec<String> = (0..5000).map(|i| format!("k{i}")).collect();
        let mut o = unordered_map_order(&keys);
        assert_eq!(o.len(), keys.len());
        o.sort();
        assert!(o.iter().enumerate().all(|(i, &k)| i == k));
    }
}

