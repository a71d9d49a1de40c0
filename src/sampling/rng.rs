//! The random numbers of upstream's samplers: `std::mt19937` and libstdc++'s conversions to
//! uniform reals (`generate_canonical`) and to a discrete index (`discrete_distribution`), so that
//! a seed gives the same draws as llama.cpp built with GCC. Each sampler owns its generator.

const N: usize = 624;
const M: usize = 397;

/// The 32-bit Mersenne Twister (std::mt19937).
#[derive(Clone)]
pub struct Mt19937 {
    state: Box<[u32; N]>,
    index: usize,
}

impl Mt19937 {
    pub fn new(seed: u32) -> Mt19937 {
        let mut state = Box::new([0u32; N]);
        state[0] = seed;
        for i in 1..N {
            state[i] = 1_812_433_253u32.wrapping_mul(state[i - 1] ^ (state[i - 1] >> 30)).wrapping_add(i as u32);
        }
        Mt19937 { state, index: N }
    }

    pub fn reseed(&mut self, seed: u32) {
        *self = Mt19937::new(seed);
    }

    fn twist(&mut self) {
        let s = &mut self.state;
        for i in 0..N {
            let y = (s[i] & 0x8000_0000) | (s[(i + 1) % N] & 0x7fff_ffff);
            let mut v = s[(i + M) % N] ^ (y >> 1);
            if y & 1 != 0 {
                v ^= 0x9908_b0df;
            }
            s[i] = v;
        }
        self.index = 0;
    }

    pub fn next_u32(&mut self) -> u32 {
        if self.index >= N {
            self.twist();
        }
        let mut y = self.state[self.index];
        self.index += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^ (y >> 18)
    }

    /// `std::uniform_real_distribution<double>(0, 1)`: two draws, as libstdc++'s
    /// `generate_canonical<double, 53>` takes them.
    pub fn uniform_f64(&mut self) -> f64 {
        let lo = self.next_u32() as f64;
        let hi = self.next_u32() as f64;
        let r = (lo + hi * 4_294_967_296.0) / 18_446_744_073_709_551_616.0;
        if r >= 1.0 {
            1.0f64.next_down()
        } else {
            r
        }
    }

    /// `std::uniform_real_distribution<float>(0, 1)`: one draw, computed in float.
    pub fn uniform_f32(&mut self) -> f32 {
        let r = self.next_u32() as f32 / 4_294_967_296.0f32;
        if r >= 1.0 {
            1.0f32.next_down()
        } else {
            r
        }
    }

    /// `std::discrete_distribution<int>(weights)(rng)`: normalizes the weights in double,
    /// accumulates them (the last cumulative value forced to 1) and returns the first index
    /// whose cumulative value reaches a uniform draw. Fewer than two weights: 0, no draw.
    pub fn discrete(&mut self, weights: impl Iterator<Item = f32> + Clone) -> usize {
        let n = weights.clone().count();
        if n < 2 {
            return 0;
        }
        let sum: f64 = weights.clone().fold(0.0, |s, w| s + w as f64);
        let u = self.uniform_f64();
        let mut cum = 0.0f64;
        for (i, w) in weights.enumerate() {
            cum += w as f64 / sum;
            if i + 1 == n || cum >= u {
                return i;
            }
        }
        n - 1
    }
}

/// llama.h's LLAMA_DEFAULT_SEED: asks for a fresh random seed.
pub const DEFAULT_SEED: u32 = u32::MAX;

/// The seed a sampler uses: `seed` itself, or a fresh random one for [`DEFAULT_SEED`].
pub fn resolve_seed(seed: u32) -> u32 {
    if seed != DEFAULT_SEED {
        return seed;
    }
    let mut bytes = [0u8; 4];
    // SAFETY: getrandom writes at most bytes.len() bytes into the buffer we own.
    let n = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    if n == 4 {
        u32::from_ne_bytes(bytes)
    } else {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u32).unwrap_or(0x5eed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mt19937_matches_the_cxx_standard() {
        // [rand.predef]: the 10000th consecutive output of a default-constructed mt19937
        // (seed 5489) is 4123659995.
        let mut g = Mt19937::new(5489);
        let mut v = 0;
        for _ in 0..10000 {
            v = g.next_u32();
        }
        assert_eq!(v, 4_123_659_995);
    }

    #[test]
    fn discrete_follows_cumulative_weights() {
        // u from the same generator state decides the index: recompute it independently.
        let w = [0.1f32, 0.2, 0.3, 0.4];
        for seed in 0..50 {
            let mut a = Mt19937::new(seed);
            let mut b = Mt19937::new(seed);
            let u = b.uniform_f64();
            let expect = if u <= 0.1 { 0 } else if u <= 0.1 + 0.2 { 1 } else if u <= 0.6 { 2 } else { 3 };
            let got = a.discrete(w.iter().copied());
            // Boundaries within rounding of the sums are not decisive.
            if [0.1, 0.3, 0.6].iter().all(|b: &f64| (u - b).abs() > 1e-6) {
                assert_eq!(got, expect, "seed {seed}, u {u}");
            }
        }
    }
}
