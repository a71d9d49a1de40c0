//! gguf: the GGUF container, versions 2 and 3. `reader` parses and validates untrusted bytes
//! (every count and length is checked against the bytes that remain before anything is
//! allocated from it); `writer` produces files for tests and tools.

mod cursor;
pub mod reader;
pub mod value;
pub mod writer;

pub use reader::{GgufFile, TensorInfo};
pub use value::{GgufArray, GgufValue, ValueType};
pub use writer::GgufWriter;

/// "GGUF" read as a little-endian u32.
pub const MAGIC: u32 = 0x4655_4747;
pub const DEFAULT_ALIGNMENT: usize = 32;
pub const MAX_DIMS: usize = 4;
