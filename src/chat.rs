//! chat: placeholder
