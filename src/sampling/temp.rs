//! Temperature samplers: fixed (`temp`) and entropy-driven dynamic temperature (`temp_ext`).

use std::ffi::CStr;

use super::ops::{softmax, temperature};
use super::{Candidates, Sampler};

#[derive(Clone)]
pub struct Temp {
    pub temp: f32,
}

impl Sampler for Temp {
    fn name(&self) -> &'static CStr {
        c"temp"
    }
    fn apply(&mut self, cur: &mut Candidates<'_>) {
        temperature(cur, self.temp);
    }
    fn clone_box(&self) -> Box<dyn Sampler + Send> {
        Box::new(self.clone())
    }
}

/// Dynamic temperature: maps the normalized entropy of the softmax into
/// [temp - delta, temp + delta] through `exponent`, then applies it.
#[derive(Clone)]
pub struct TempExt {
    pub temp: f32,
    pub delta: f32,
    pub exponent: f32,
}

impl Sampler for TempExt {
    fn name(&self) -> &'static CStr {
        c"temp-ext"
    }
    fn apply(&mut self, cur: &mut Candidates<'_>) {
        if self.delta <= 0.0 {
            temperature(cur, self.temp);
            return;
        }
        if cur.len() <= 1 {
            return;
        }
        let min_temp = (self.temp - self.delta).max(0.0);
        let max_temp = self.temp + self.delta;
        let max_entropy = -(1.0f32 / cur.len() as f32).ln();
        softmax(cur, true);
        let entropy = cur.data.iter().filter(|t| t.p > 0.0).fold(0.0f32, |e, t| e - t.p * t.p.ln());
        let dyn_temp = min_temp + (max_temp - min_temp) * (entropy / max_entropy).powf(self.exponent);
        temperature(cur, dyn_temp);
        let max_l = cur.data[0].logit as f64;
        let mut sum = 0.0f64;
        for t in cur.data.iter_mut() {
            let p = (t.logit as f64 - max_l).exp();
            t.p = p as f32;
            sum += p;
        }
        for t in cur.data.iter_mut() {
            t.p = (t.p as f64 / sum) as f32;
        }
    }
    fn clone_box(&self) -> Box<dyn Sampler + Send> {
        Box::new(self.clone())
    }
}
