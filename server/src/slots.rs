//! `/slots`: every slot's state (`GET`, with `--slots`), and erasing, saving and restoring one
//! slot's cached prompt (`POST /slots/{id}?action=erase|save|restore`, with
//! `--slot-save-path`), as llama-server b11312 serves them. The engine answers on its decode
//! thread at the start of its next step; an action on a busy slot waits for its request to end.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};

use deepseek::engine::{ControlError, ControlReply, Engine, SlotAction, SlotInfo};

use crate::error::ApiError;
use crate::App;

pub fn routes() -> Router<Arc<App>> {
    Router::new().route("/slots", get(get_slots)).route("/slots/{id_slot}", axum::routing::post(post_slot))
}

/// Runs a slot operation on the engine and waits (without holding a thread) for its answer.
async fn control(engine: &Engine, slot: Option<(u32, SlotAction)>) -> Result<ControlReply, ApiError> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let reply = Box::new(move |r| {
        let _ = tx.send(r);
    });
    match slot {
        None => engine.slots(reply),
        Some((id, action)) => engine.slot_action(id, action, reply),
    }
    match rx.await.unwrap_or(ControlReply::Error(ControlError::Closed)) {
        ControlReply::Error(ControlError::InvalidSlot(_)) => Err(ApiError::invalid("Invalid slot ID")),
        ControlReply::Error(ControlError::Failed(e)) => Err(ApiError::invalid(e)),
        ControlReply::Error(ControlError::Closed) => Err(ApiError::unavailable("the server is shutting down")),
        r => Ok(r),
    }
}

fn slot_json(s: &SlotInfo) -> Value {
    let mut v = json!({"id": s.id, "n_ctx": s.n_ctx, "speculative": false, "is_processing": s.is_processing});
    if let (Some(t), Some(o)) = (&s.task, v.as_object_mut()) {
        o.insert("id_task".into(), json!(t.id));
        o.insert("n_prompt_tokens".into(), json!(t.n_prompt_tokens));
        o.insert("n_prompt_tokens_processed".into(), json!(t.n_prompt_processed));
        o.insert("n_prompt_tokens_cache".into(), json!(t.n_prompt_cached));
        let params = t.tag.as_deref().and_then(|p| serde_json::from_str::<Value>(p).ok()).unwrap_or_else(|| json!({}));
        o.insert("params".into(), params);
        o.insert("next_token".into(), json!([{"has_next_token": t.has_next_token, "has_new_line": t.has_new_line, "n_remain": t.n_remain, "n_decoded": t.n_decoded}]));
    }
    v
}

async fn get_slots(State(app): State<Arc<App>>, RawQuery(q): RawQuery) -> Result<Response, ApiError> {
    if !app.args.slots {
        return Err(ApiError::not_supported("This server does not support slots endpoint. Start it with `--slots`"));
    }
    let r = app.ready()?;
    let ControlReply::Slots(slots) = control(&r.engine, None).await? else { return Err(ApiError::internal("unexpected answer to a slots query")) };
    if query(&q, "fail_on_no_slot").is_some_and(|v| !v.is_empty()) && slots.iter().all(|s| s.is_processing) {
        return Err(ApiError::unavailable("no slot available"));
    }
    Ok(Json(Value::Array(slots.iter().map(slot_json).collect())).into_response())
}

/// The value of `key` in a query string (the parameters here are plain words: no decoding).
fn query<'a>(q: &'a Option<String>, key: &str) -> Option<&'a str> {
    q.as_deref()?.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (k == key).then_some(v)
    })
}

/// llama.cpp's `fs_validate_filename` (no folders): a name that stays inside the save folder
/// on every file system.
pub fn valid_filename(name: &str) -> bool {
    if name.is_empty() || name.len() > 255 {
        return false;
    }
    let bad = |c: char| {
        let u = c as u32;
        u <= 0x1F || u == 0x7F || (0x80..=0x9F).contains(&u) || matches!(c, '\u{FF0E}' | '\u{2215}' | '\u{2216}' | '\u{FFFD}' | '\u{FEFF}' | ':' | '*' | '?' | '"' | '<' | '>' | '|' | '/' | '\\')
    };
    !(name.chars().any(bad) || name.starts_with(' ') || name.ends_with(' ') || name.ends_with('.') || name.contains("..") || name == ".")
}

async fn post_slot(State(app): State<Arc<App>>, Path(id_slot): Path<String>, RawQuery(q): RawQuery, body: Bytes) -> Result<Response, ApiError> {
    let Some(dir) = app.args.slot_save_path.as_ref() else {
        return Err(ApiError::not_supported("This server does not support slots action. Start it with `--slot-save-path`"));
    };
    let id: u32 = id_slot.parse().map_err(|_| ApiError::invalid("Invalid slot ID"))?;
    let r = app.ready()?;
    let action = query(&q, "action").unwrap_or("");
    let filename = || -> Result<String, ApiError> {
        let v: Value = serde_json::from_slice(&body).map_err(|e| ApiError::invalid(format!("the body is not JSON: {e}")))?;
        let name = v.get("filename").and_then(Value::as_str).ok_or_else(|| ApiError::param("filename", "'filename' (a string) is required"))?;
        if !valid_filename(name) {
            return Err(ApiError::param("filename", "Invalid filename"));
        }
        Ok(name.to_string())
    };
    let answer = match action {
        "save" => {
            let name = filename()?;
            match control(&r.engine, Some((id, SlotAction::Save(dir.join(&name))))).await? {
                ControlReply::Saved { n_tokens, n_bytes, ms } => json!({"id_slot": id, "filename": name, "n_saved": n_tokens, "n_written": n_bytes, "timings": {"save_ms": ms}}),
                _ => return Err(ApiError::internal("unexpected answer to a slot save")),
            }
        }
        "restore" => {
            let name = filename()?;
            match control(&r.engine, Some((id, SlotAction::Restore(dir.join(&name))))).await? {
                ControlReply::Restored { n_tokens, n_bytes, ms } => json!({"id_slot": id, "filename": name, "n_restored": n_tokens, "n_read": n_bytes, "timings": {"restore_ms": ms}}),
                _ => return Err(ApiError::internal("unexpected answer to a slot restore")),
            }
        }
        "erase" => match control(&r.engine, Some((id, SlotAction::Erase))).await? {
            ControlReply::Erased { n_erased } => json!({"id_slot": id, "n_erased": n_erased}),
            _ => return Err(ApiError::internal("unexpected answer to a slot erase")),
        },
        _ => return Err(ApiError::invalid("Invalid action")),
    };
    Ok((StatusCode::OK, Json(answer)).into_response())
}

#[cfg(test)]
mod tests {
    use super::valid_filename;

    #[test]
    fn filenames_stay_in_the_folder() {
        for ok in ["slot1.bin", "a b.bin", "ünï.bin", ".hidden"] {
            assert!(valid_filename(ok), "{ok}");
        }
        for bad in ["", ".", "..", "../x", "a/b", "a\\b", "x..y", "x.", " x", "x ", "a:b", "a\u{0}b", "a\u{2215}b", "a\u{FF0E}", &"x".repeat(256)] {
            assert!(!valid_filename(bad), "{bad:?}");
        }
    }
}
