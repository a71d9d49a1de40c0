//! deepseek-server over HTTPS: --ssl-key-file / --ssl-cert-file (and their LLAMA_ARG_*
//! variables). A self-signed certificate is made at test time with the `openssl` command; the
//! server runs SmolLM2-135M and tests/python/test_tls.py checks it with real clients (httpx,
//! the openai client, Python's ssl) that verify that certificate: /health, chat completions
//! plain and streamed, ALPN, keep-alive, plain HTTP to the HTTPS port, stalled handshakes
//! beside other clients, graceful shutdown. Here: every bad key / certificate / flag
//! combination stops the start with a non-zero exit and a message naming the file or flag.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl").args(args).current_dir(dir).output().expect("the openssl command (Debian's openssl package)");
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A fresh folder with key.pem + cert.pem (RSA, self-signed for localhost and 127.0.0.1),
/// other-key.pem and other-rsa.pem (an EC and an RSA key that are not cert.pem's),
/// encrypted-key.pem (key.pem under a password), and files that are not keys or certs.
fn material(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    openssl(&dir, &["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "key.pem", "-out", "cert.pem", "-days", "2", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"]);
    openssl(&dir, &["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "other-key.pem"]);
    openssl(&dir, &["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", "other-rsa.pem"]);
    openssl(&dir, &["pkcs8", "-topk8", "-in", "key.pem", "-out", "encrypted-key.pem", "-passout", "pass:secret"]);
    std::fs::write(dir.join("not-pem.txt"), "this is not a PEM file\n").unwrap();
    std::fs::write(dir.join("bad-der.pem"), "-----BEGIN CERTIFICATE-----\naGVsbG8gd29ybGQ=\n-----END CERTIFICATE-----\n").unwrap();
    std::fs::write(dir.join("bad-base64.pem"), "-----BEGIN CERTIFICATE-----\n!!!! not base64 !!!!\n-----END CERTIFICATE-----\n").unwrap();
    dir
}

fn model() -> PathBuf {
    let model = common::model("smollm2-135m-instruct-q4_1.gguf", "smollm2");
    model
}

/// Starts the server with `args` (and `env`), which must exit on its own within 60 s; its exit
/// code and stderr.
fn start_expecting_exit(args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let server = env!("CARGO_BIN_EXE_deepseek-server");
    let mut cmd = Command::new(server);
    cmd.args(["-m", model().to_str().unwrap(), "--host", "127.0.0.1", "--port", "0", "-t", "1"]).args(args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("deepseek-server");
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t0.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("deepseek-server {args:?} {env:?} did not exit: it started in spite of the bad TLS setup");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    (status.code().unwrap_or(-1), err)
}

#[test]
fn bad_tls_setups_stop_the_start_with_a_message_naming_the_file_or_flag() {
    let d = material("tls-bad");
    let p = |f: &str| d.join(f).to_str().unwrap().to_string();
    let (key, cert, other, other_rsa, not_pem, bad64, missing) = (p("key.pem"), p("cert.pem"), p("other-key.pem"), p("other-rsa.pem"), p("not-pem.txt"), p("bad-base64.pem"), p("missing.pem"));
    let (bad_der, encrypted) = (p("bad-der.pem"), p("encrypted-key.pem"));
    let cases: Vec<(Vec<&str>, Vec<(&str, &str)>, Vec<String>)> = vec![
        // one of the two flags
        (vec!["--ssl-key-file", &key], vec![], vec![format!("--ssl-key-file {key} needs --ssl-cert-file")]),
        (vec!["--ssl-cert-file", &cert], vec![], vec![format!("--ssl-cert-file {cert} needs --ssl-key-file")]),
        (vec![], vec![("LLAMA_ARG_SSL_CERT_FILE", &cert)], vec![format!("--ssl-cert-file {cert} needs --ssl-key-file")]),
        // files that are not there, or not what they should be
        (vec!["--ssl-key-file", &missing, "--ssl-cert-file", &cert], vec![], vec![format!("--ssl-key-file {missing}: No such file or directory")]),
        (vec!["--ssl-key-file", &key, "--ssl-cert-file", &missing], vec![], vec![format!("--ssl-cert-file {missing}: No such file or directory")]),
        (vec!["--ssl-key-file", &key, "--ssl-cert-file", d.to_str().unwrap()], vec![], vec![format!("--ssl-cert-file {}: Is a directory", d.display())]),
        (vec!["--ssl-key-file", &cert, "--ssl-cert-file", &cert], vec![], vec![format!("--ssl-key-file {cert}: no PEM private key")]),
        (vec!["--ssl-key-file", &key, "--ssl-cert-file", &key], vec![], vec![format!("--ssl-cert-file {key}: no PEM certificate")]),
        (vec!["--ssl-key-file", &key, "--ssl-cert-file", &not_pem], vec![], vec![format!("--ssl-cert-file {not_pem}: no PEM certificate")]),
        (vec!["--ssl-key-file", &key, "--ssl-cert-file", &bad64], vec![], vec![format!("--ssl-cert-file {bad64}: ")]),
        (vec!["--ssl-key-file", &key, "--ssl-cert-file", &bad_der], vec![], vec![format!("--ssl-cert-file {bad_der}: the server's certificate (the first in the file) is not a valid X.509 certificate")]),
        (vec!["--ssl-key-file", &encrypted, "--ssl-cert-file", &cert], vec![], vec![format!("--ssl-key-file {encrypted}: an encrypted private key is not supported")]),
        // a key that is not the certificate's, from the flags and from the environment
        (vec!["--ssl-key-file", &other, "--ssl-cert-file", &cert], vec![], vec![format!("--ssl-key-file {other} with --ssl-cert-file {cert}: the key is not the certificate's")]),
        (vec!["--ssl-key-file", &other_rsa, "--ssl-cert-file", &cert], vec![], vec![format!("--ssl-key-file {other_rsa} with --ssl-cert-file {cert}: the key is not the certificate's")]),
        (vec![], vec![("LLAMA_ARG_SSL_KEY_FILE", &other), ("LLAMA_ARG_SSL_CERT_FILE", &cert)], vec![format!("--ssl-key-file {other} with --ssl-cert-file {cert}: ")]),
        // the command line wins over the environment
        (vec!["--ssl-key-file", &other], vec![("LLAMA_ARG_SSL_KEY_FILE", &key), ("LLAMA_ARG_SSL_CERT_FILE", &cert)], vec![format!("--ssl-key-file {other} with --ssl-cert-file {cert}: ")]),
    ];
    for (args, env, want) in &cases {
        let (code, err) = start_expecting_exit(args, env);
        assert_eq!(code, 1, "{args:?} {env:?}: exit {code}\n{err}");
        for w in want {
            assert!(err.contains(w.as_str()), "{args:?} {env:?}: stderr lacks {w:?}:\n{err}");
        }
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(!err.contains("listening on"), "{args:?}: listened before the TLS check: {err}");
    }
}

#[test]
fn https_with_real_clients() {
    let root = common::root();
    let d = material("tls-good");
    let python = common::python();
    let out = Command::new(&python)
        .arg(root.join("server/tests/python/test_tls.py"))
        .arg(env!("CARGO_BIN_EXE_deepseek-server"))
        .arg(model())
        .arg(d.join("key.pem"))
        .arg(d.join("cert.pem"))
        .output()
        .expect("python");
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}");
    assert!(out.status.success(), "tls checks failed:\n{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("all tls checks passed"), "{stdout}");
}
