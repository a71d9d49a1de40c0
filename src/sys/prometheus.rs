//! Prometheus text exposition (format 0.0.4) of plain values and latency histograms.

use std::fmt::Write;

use super::stats::{HistogramSnapshot, LATENCY_BOUNDS_US};

pub enum Kind {
    Gauge,
    Counter,
}

pub struct Metric {
    name: &'static str,
    kind: Kind,
    help: &'static str,
    value: f64,
}

impl Metric {
    pub fn new(name: &'static str, kind: Kind, help: &'static str, value: f64) -> Metric {
        Metric { name, kind, help, value }
    }
}

/// The metrics, then the latency histograms (name, help, snapshot; in seconds).
pub fn render(metrics: &[Metric], histograms: &[(&str, &str, HistogramSnapshot)]) -> String {
    let mut out = String::with_capacity(4096);
    for m in metrics {
        let kind = match m.kind {
            Kind::Gauge => "gauge",
            Kind::Counter => "counter",
        };
        let _ = write!(out, "# HELP {} {}\n# TYPE {} {kind}\n{} {}\n", m.name, m.help, m.name, m.name, m.value);
    }
    for (name, help, h) in histograms {
        histogram(&mut out, name, help, h);
    }
    out
}

fn histogram(out: &mut String, name: &str, help: &str, h: &HistogramSnapshot) {
    let _ = write!(out, "# HELP {name} {help}\n# TYPE {name} histogram\n");
    let mut cumulative = 0u64;
    for (i, &bound_us) in LATENCY_BOUNDS_US.iter().enumerate() {
        cumulative += h.buckets[i];
        let _ = writeln!(out, "{name}_bucket{{le=\"{}\"}} {cumulative}", bound_us as f64 / 1e6);
    }
    let total: u64 = h.buckets.iter().sum();
    let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {total}");
    let _ = writeln!(out, "{name}_sum {}", h.sum_ns as f64 / 1e9);
    let _ = writeln!(out, "{name}_count {total}");
}
