//! Entry points for the cargo-fuzz targets in `fuzz/` (not a public API; built
//! only with the `fuzzing` feature): arbitrary bytes through the parsers latch uses
//! for input someone else could shape, with a cheap invariant on what they accept.

use std::path::Path;

use crate::receipt::Receipt;
use crate::remote::proto::{decode_request, Op};

/// A receipt file as `Receipt::load` parses it (`Receipt::from_bytes`). A parsed receipt encodes as
/// `Receipt::write` encodes it and parses back equal.
pub fn receipt(data: &[u8]) {
    let Ok(r) = Receipt::from_bytes(data, Path::new("fuzz")) else {
        return;
    };
    let _ = r.session();
    let bytes = serde_json::to_vec_pretty(&r).expect("a parsed receipt encodes");
    let again = Receipt::from_bytes(&bytes, Path::new("fuzz")).expect("an encoded receipt parses");
    assert_eq!(again, r, "a receipt changed through a rewrite");
}

/// The bridge's request line (SPEC.md §12.2) as `latch bridge` decodes it. A
/// decoded request encodes (as the caller sends it) and decodes back equal; an
/// unknown operation (answered `unsupported`) is never sent, so never encoded.
pub fn request_line(data: &[u8]) {
    let Ok(req) = decode_request(data) else {
        return;
    };
    if matches!(req.op, Op::Unknown(_)) {
        return;
    }
    let line = serde_json::to_vec(&req).expect("a decoded request encodes");
    let again = decode_request(&line).expect("an encoded request decodes");
    assert_eq!(again, req, "a request changed through a re-encoding");
}
