//! The committed include/deepseek.h must be exactly what build.rs generates from the sources.

#[test]
fn committed_header_matches_generated() {
    let generated = std::fs::read_to_string(env!("DS_GENERATED_HEADER")).expect("generated header");
    let committed = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/include/deepseek.h")).expect("include/deepseek.h");
    assert!(generated == committed, "include/deepseek.h is stale: run scripts/update-header.sh and commit the result");
}
