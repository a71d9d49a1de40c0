//! api: the only `extern "C"` code. Each function checks its arguments, converts handles,
//! calls the engine and converts back, all inside `boundary::guard`. No engine logic here.

pub mod boundary;
pub mod counters;
pub mod handles;
pub mod types;

pub mod backend;
pub mod batch;
pub mod batch_ext;
pub mod chat;
pub mod context;
pub mod memory;
pub mod model;
pub mod state;
pub mod stats;
pub mod perf;
pub mod sampler_iface;
pub mod sampling;
pub mod vocab;
pub mod misc;
pub mod unsupported;
pub mod ext;
pub mod engine;
