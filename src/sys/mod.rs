//! sys: the bottom layer. File bytes (mapped or owned), logging sink, live-object counters.
//! Nothing here knows about models or tensors.

pub mod alloc;
pub mod bytes;
pub mod log;
pub mod stats;
