//! The seed corpus of the client's fuzz targets (`fuzz/corpus/<target>/seed-*`):
//! receipts and bridge request lines the real `latch` wrote, which must stay
//! accepted by the parsers they seed, so the fuzzer starts from the accepting
//! paths; and each runs cleanly through its entry point.

use std::path::{Path, PathBuf};

use latch_client::remote::proto::{decode_request, Op};
use latch_client::{fuzzing, Receipt};

fn seeds(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target);
    let mut out: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().starts_with("seed-"))
        .map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            (name, std::fs::read(e.path()).unwrap())
        })
        .collect();
    out.sort();
    assert!(!out.is_empty(), "no seeds in {}", dir.display());
    out
}

#[test]
fn receipt_seeds_parse() {
    for (name, bytes) in seeds("receipt") {
        Receipt::from_bytes(&bytes, Path::new(&name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        fuzzing::receipt(&bytes);
    }
}

#[test]
fn request_line_seeds_decode_and_cover_both_ops() {
    let (mut exec, mut connect) = (0, 0);
    for (name, bytes) in seeds("request_line") {
        match decode_request(&bytes)
            .unwrap_or_else(|e| panic!("{name}: {e}"))
            .op
        {
            Op::Exec { .. } => exec += 1,
            Op::Connect(_) => connect += 1,
            _ => {}
        }
        fuzzing::request_line(&bytes);
    }
    assert!(exec > 0 && connect > 0, "exec {exec}, connect {connect}");
}
