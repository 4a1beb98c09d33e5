//! The wire crate is sans-IO: it reads no clock (time comes in as a value)
//! and its fuzzing module is built only with the `fuzzing` feature, never into the
//! product. Pinned by reading the crate's own sources.

use std::path::{Path, PathBuf};

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn the_wire_crate_reads_no_clock() {
    let mut files = Vec::new();
    sources(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    assert!(!files.is_empty());
    let clocks = ["Instant::now", "SystemTime::now", "UNIX_EPOCH.elapsed"];
    let found: Vec<String> = files
        .iter()
        .flat_map(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            text.lines()
                .enumerate()
                .filter(|(_, l)| clocks.iter().any(|c| l.contains(c)))
                .map(|(n, l)| format!("{}:{}: {}", f.display(), n + 1, l.trim()))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(found.is_empty(), "the wire crate reads a clock: {found:#?}");
}

#[test]
fn the_fuzzing_module_is_built_only_with_its_feature() {
    let lib = include_str!("../src/lib.rs");
    let decl = lib
        .find("pub mod fuzzing;")
        .expect("lib.rs declares the fuzzing module");
    let attrs: Vec<&str> = lib[..decl]
        .lines()
        .rev()
        .map(str::trim)
        .take_while(|l| l.starts_with("#[") || l.starts_with("//"))
        .collect();
    assert!(
        attrs.contains(&r#"#[cfg(feature = "fuzzing")]"#),
        "pub mod fuzzing is not gated by the fuzzing feature: {attrs:?}"
    );
    let manifest = include_str!("../Cargo.toml");
    let features = &manifest[manifest.find("[features]").expect("a [features] table")..];
    let table = features.split("\n[").next().unwrap();
    assert!(
        !table.lines().any(|l| l.trim_start().starts_with("default")),
        "the fuzzing feature must not be on by default: {table}"
    );
}
