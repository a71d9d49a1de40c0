//! What the server's client tests share: the repository root, a fetched model, and the Python
//! of the clients' virtualenv (scripts/server-venv.sh makes it: PyPI on first use).

use std::path::PathBuf;
use std::process::Command;

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A model scripts/fetch-models.sh fetched (`fetch` names its argument there).
pub fn model(file: &str, fetch: &str) -> PathBuf {
    let models = std::env::var_os("DEEPSEEK_MODELS").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/deepseek/models"));
    let model = models.join(file);
    assert!(model.is_file(), "{} is missing: scripts/fetch-models.sh {fetch}", model.display());
    model
}

/// The virtualenv's python.
pub fn python() -> String {
    let venv = Command::new(root().join("scripts/server-venv.sh")).output().expect("scripts/server-venv.sh");
    assert!(venv.status.success(), "cannot make the client's virtualenv: {}", String::from_utf8_lossy(&venv.stderr));
    String::from_utf8(venv.stdout).unwrap().trim().to_string()
}
