//! The web UI, as llama-server serves one: a chat page at `/` (and `/index.html`), under
//! --api-prefix like every route. The page is `index.html` beside this file, embedded in the
//! binary: one file with its script and style inline, which loads nothing from elsewhere and
//! talks only to this server's /props, /v1/models and /v1/chat/completions. With --path the
//! files of that folder are served instead (GET and HEAD of any path no route takes), never a
//! file outside it. As upstream: --ui=false leaves `/` a 404, the page and its files need no
//! API key (the API they call does), and `/sw.js` is a service worker that removes itself, so
//! that a browser which ran llama-server's UI on this address (its worker caches that UI) shows
//! this one. `/props` passes --ui-config / --ui-config-file through as `ui_settings`.
//! Nothing here is on the decode path.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde_json::{json, Value};

use crate::args::Args;
use crate::error::ApiError;
use crate::App;

const INDEX: &str = include_str!("index.html");

/// FNV-1a, for the page's ETag (computed at compile time).
const fn fnv1a(b: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    let mut i = 0;
    while i < b.len() {
        h ^= b[i] as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
        i += 1;
    }
    h
}
const INDEX_HASH: u64 = fnv1a(INDEX.as_bytes());

const PAGE_POLICY: &str = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; frame-ancestors 'self'";

/// A service worker that unregisters itself, empties its caches and reloads its pages.
const SW_REMOVE: &str = r#"// deepseek-server's UI has no service worker: one left here by another UI removes itself.
self.addEventListener("install", () => self.skipWaiting());
self.addEventListener("activate", (event) => event.waitUntil((async () => {
  await self.registration.unregister();
  for (const name of await caches.keys()) await caches.delete(name);
  for (const page of await self.clients.matchAll({ type: "window" })) page.navigate(page.url);
})()));
"#;

/// The UI's routes, merged beside the API's (outside its key check).
pub fn routes(app: &App) -> Router<Arc<App>> {
    let r = Router::new().route("/sw.js", get(service_worker));
    if app.args.ui && app.args.path.is_none() {
        r.route("/", get(index)).route("/index.html", get(index))
    } else {
        r
    }
}

/// `PREFIX/` under --api-prefix, where upstream serves the page (the nested routes answer
/// `PREFIX` and `PREFIX/index.html`).
pub fn prefix_root(app: &App) -> Router<Arc<App>> {
    let r = Router::new();
    if !app.args.ui {
        return r;
    }
    r.route(&format!("{}/", app.args.api_prefix), get(prefix_index))
}

async fn prefix_index(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    match &app.args.path {
        Some(root) => static_file(root.clone(), "/".into()).await.unwrap_or_else(file_not_found),
        None => index(headers).await,
    }
}

fn file_not_found() -> Response {
    ApiError::new(StatusCode::NOT_FOUND, "not_found_error", "File Not Found").into_response()
}

/// `/props`'s `ui_settings`: the JSON of --ui-config or --ui-config-file, `{}` without.
pub fn settings(args: &Args) -> Value {
    args.ui_config_file.clone().or_else(|| args.ui_config.clone()).unwrap_or_else(|| json!({}))
}

/// --path: an existing folder, kept as its canonical path (which served files must stay in).
pub fn static_dir(v: &str) -> Result<PathBuf, String> {
    let p = Path::new(v).canonicalize().map_err(|e| format!("static assets path not found: {e}"))?;
    if !p.is_dir() {
        return Err("static assets path is not a folder".into());
    }
    Ok(p)
}

/// --ui-config: JSON (any value, passed through as upstream does).
pub fn config_json(v: &str) -> Result<Value, String> {
    serde_json::from_str(v).map_err(|e| format!("failed to parse UI config: {e}"))
}

/// --ui-config-file: a file of JSON.
pub fn config_file(v: &str) -> Result<Value, String> {
    let text = std::fs::read_to_string(v).map_err(|e| format!("cannot read {v}: {e}"))?;
    config_json(&text)
}

fn etag_matches(headers: &HeaderMap, etag: &str) -> bool {
    let Some(given) = headers.get(header::IF_NONE_MATCH).and_then(|v| v.to_str().ok()) else { return false };
    given.split(',').map(str::trim).any(|t| t == "*" || t == etag || t.strip_prefix("W/") == Some(etag))
}

async fn index(headers: HeaderMap) -> Response {
    let etag = format!("\"{INDEX_HASH:016x}\"");
    if etag_matches(&headers, &etag) {
        return (StatusCode::NOT_MODIFIED, [(header::ETAG, etag)]).into_response();
    }
    // no-cache: revalidated on every load, so a new build's page is picked up at once. The
    // policy holds the page to what it is: its own inline script and style, requests to this
    // server only, nothing loaded from elsewhere.
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8".to_string()),
            (header::CACHE_CONTROL, "no-cache".to_string()),
            (header::ETAG, etag),
            (header::CONTENT_SECURITY_POLICY, PAGE_POLICY.to_string()),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff".to_string()),
        ],
        INDEX,
    )
        .into_response()
}

async fn service_worker(State(app): State<Arc<App>>) -> Response {
    // A sw.js of --path's folder is served first, as upstream's mount point is.
    if let (true, Some(root)) = (app.args.ui, &app.args.path) {
        if let Some(r) = static_file(root.clone(), "/sw.js".into()).await {
            return r;
        }
    }
    ([(header::CONTENT_TYPE, "application/javascript"), (header::CACHE_CONTROL, "no-cache")], SW_REMOVE).into_response()
}

/// What no route takes: a file of --path's folder (GET, HEAD), else the API's 404.
pub async fn fallback(State(app): State<Arc<App>>, req: Request) -> Response {
    if let (true, Some(root)) = (app.args.ui, &app.args.path) {
        if req.method() == Method::GET || req.method() == Method::HEAD {
            return static_file(root.clone(), req.uri().path().to_string())
                .await
                .unwrap_or_else(file_not_found);
        }
    }
    ApiError::new(StatusCode::NOT_FOUND, "not_found_error", "no such endpoint").into_response()
}

/// The file `uri_path` names under `root`, read off the runtime's threads; None: no such file.
async fn static_file(root: PathBuf, uri_path: String) -> Option<Response> {
    let (path, bytes) = tokio::task::spawn_blocking(move || {
        let p = resolve(&root, &uri_path)?;
        let b = std::fs::read(&p).ok()?;
        Some((p, b))
    })
    .await
    .ok()??;
    Some(([(header::CONTENT_TYPE, content_type(&path)), (header::CACHE_CONTROL, "no-cache"), (header::X_CONTENT_TYPE_OPTIONS, "nosniff")], bytes).into_response())
}

/// The file under `root` (canonical) that a request's path names: percent-decoded, `..` refused,
/// a folder meaning its index.html, and the real path (symbolic links followed) inside `root`.
/// None when it names no such file.
pub fn resolve(root: &Path, uri_path: &str) -> Option<PathBuf> {
    let decoded = percent_decode(uri_path)?;
    let mut p = root.to_path_buf();
    for seg in decoded.split('/') {
        match seg {
            "" | "." => {}
            ".." => return None,
            s if s.contains(['\\', '\0']) => return None,
            s => p.push(s),
        }
    }
    let mut real = p.canonicalize().ok()?;
    if real.is_dir() {
        real = real.join("index.html").canonicalize().ok()?;
    }
    (real.starts_with(root) && real.is_file()).then_some(real)
}

/// `%XX` escapes of a URL path decoded; None for a bad escape or bytes that are not UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn content_type(p: &Path) -> &'static str {
    let ext = p.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase);
    match ext.as_deref() {
        Some("html" | "htm") => "text/html; charset=utf-8",
        Some("js" | "mjs") => "application/javascript",
        Some("css") => "text/css",
        Some("json" | "map") => "application/json",
        Some("webmanifest") => "application/manifest+json",
        Some("txt") => "text/plain; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("jpg" | "jpeg") => "image/jpeg",
        Some("gif") => "image/gif",
        Some("webp") => "image/webp",
        Some("ico") => "image/x-icon",
        Some("wasm") => "application/wasm",
        Some("woff") => "font/woff",
        Some("woff2") => "font/woff2",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A folder with a page, a subfolder, a file beside the folder and links in and out.
    fn tree() -> (PathBuf, PathBuf) {
        let top = std::env::temp_dir().join(format!("deepseek-webui-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&top);
        let root = top.join("public");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(root.join("index.html"), "<p>root</p>").unwrap();
        std::fs::write(root.join("sub/a b.js"), "1").unwrap();
        std::fs::create_dir_all(root.join("empty")).unwrap();
        std::fs::write(top.join("secret.txt"), "outside").unwrap();
        std::os::unix::fs::symlink(top.join("secret.txt"), root.join("out.txt")).unwrap();
        std::os::unix::fs::symlink(root.join("sub/a b.js"), root.join("in.js")).unwrap();
        (top, static_dir(root.to_str().unwrap()).unwrap())
    }

    #[test]
    fn files_inside_the_folder_only() {
        let (top, root) = tree();
        assert_eq!(resolve(&root, "/"), Some(root.join("index.html")));
        assert_eq!(resolve(&root, "/index.html"), Some(root.join("index.html")));
        assert_eq!(resolve(&root, "/sub/a%20b.js"), Some(root.join("sub/a b.js")));
        assert_eq!(resolve(&root, "/./sub//a%20b.js"), Some(root.join("sub/a b.js")));
        // a link inside the folder to a file inside it
        assert_eq!(resolve(&root, "/in.js"), Some(root.join("sub/a b.js")));
        for bad in ["/../secret.txt", "/sub/../../secret.txt", "/%2e%2e/secret.txt", "/sub/%2E%2E/%2e%2e/secret.txt", "/..%2fsecret.txt", "/..%5csecret.txt", "/out.txt", "/missing", "/empty/", "/sub", "/%zz", "/%c3", "/a%00b"] {
            assert_eq!(resolve(&root, bad), None, "{bad}");
        }
        std::fs::remove_dir_all(top).unwrap();
    }

    #[test]
    fn ui_config_is_json() {
        assert_eq!(config_json(r#"{"temperature": 0.5}"#).unwrap(), json!({"temperature": 0.5}));
        assert!(config_json("{temperature").unwrap_err().starts_with("failed to parse UI config"));
        assert!(static_dir("/nonexistent/deepseek-webui").is_err());
    }

    #[test]
    fn etag_forms() {
        let mut h = HeaderMap::new();
        assert!(!etag_matches(&h, "\"ab\""));
        h.insert(header::IF_NONE_MATCH, "\"xy\", W/\"ab\"".parse().unwrap());
        assert!(etag_matches(&h, "\"ab\""));
        assert!(!etag_matches(&h, "\"cd\""));
    }
}
