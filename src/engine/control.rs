//! Slot control (llama-server's `/slots`): reading every slot's state, and erasing, saving
//! and restoring one slot's cached prompt. The decode thread owns the slots, so an operation
//! is queued to it (the same lock-free queue as submissions, its own instance) and answered
//! there at the start of its next turn, through the caller's `reply`. An operation on a busy
//! slot waits until the slot's request ends, as upstream defers it.

use std::path::PathBuf;
use std::sync::Arc as StdArc;

/// What one slot is doing, as llama-server's `/slots` reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct SlotInfo {
    pub id: u32,
    /// The most cells its sequence may hold.
    pub n_ctx: u32,
    pub is_processing: bool,
    /// The running request, or the last one that ran in this slot.
    pub task: Option<SlotTask>,
    /// Tokens the slot's KV cells hold (its cached prompt and output).
    pub n_cached_tokens: usize,
}

#[derive(Clone, Debug, PartialEq)]
pub struct SlotTask {
    pub id: u64,
    /// What the application attached to the request (`Request::tag`).
    pub tag: Option<StdArc<str>>,
    pub n_prompt_tokens: u32,
    /// Prompt tokens computed so far (not reused from a cache).
    pub n_prompt_processed: u32,
    pub n_prompt_cached: u32,
    /// Tokens generated; 0 once the request has ended (as upstream resets an idle slot's).
    pub n_decoded: u32,
    /// Tokens it may still generate (-1: no limit, or the request has ended).
    pub n_remain: i64,
    pub has_next_token: bool,
    /// Whether its output so far holds a newline.
    pub has_new_line: bool,
}

/// What is done to one slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SlotAction {
    /// Drops its cached cells.
    Erase,
    /// Writes its cached tokens and their KV cells to a file (llama.cpp's sequence state file).
    Save(PathBuf),
    /// Replaces its cache with a file's.
    Restore(PathBuf),
}

#[derive(Clone, Debug, PartialEq)]
pub enum ControlReply {
    Slots(Vec<SlotInfo>),
    Erased { n_erased: usize },
    Saved { n_tokens: usize, n_bytes: usize, ms: f64 },
    Restored { n_tokens: usize, n_bytes: usize, ms: f64 },
    /// The operation was refused or failed; the slot is usable (a failed restore leaves it empty).
    Error(ControlError),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ControlError {
    /// No such slot.
    InvalidSlot(String),
    /// The file could not be written, read, or used.
    Failed(String),
    /// The engine closed before the operation ran.
    Closed,
}

impl std::fmt::Display for ControlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ControlError::InvalidSlot(s) | ControlError::Failed(s) => f.write_str(s),
            ControlError::Closed => f.write_str("the engine is shutting down"),
        }
    }
}

/// Called once, on the decode thread, with the operation's answer.
pub type Reply = Box<dyn FnOnce(ControlReply) + Send>;

pub(crate) enum Op {
    Slots,
    Slot(u32, SlotAction),
}

pub(crate) struct Control {
    pub(crate) op: Op,
    pub(crate) reply: Reply,
}
