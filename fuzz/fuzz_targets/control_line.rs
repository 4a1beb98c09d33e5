//! Arbitrary bytes as `latch control`'s input (SPEC §13.1), through the same line
//! reader and parser the server runs (the file itself, included): no panic; every
//! line is a request, a notification or an error answer; a request's answer is
//! one line of JSON.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../src/control/rpc.rs"]
#[allow(dead_code)]
mod rpc;

fuzz_target!(|data: &[u8]| {
    let mut reader = std::io::BufReader::with_capacity(7, data);
    let mut buf = Vec::new();
    loop {
        match rpc::read_line_capped(&mut reader, &mut buf, 256) {
            Ok(rpc::LineRead::Eof) | Err(_) => break,
            Ok(rpc::LineRead::TooLong) => assert!(buf.is_empty()),
            Ok(rpc::LineRead::Line) => {
                assert!(buf.len() <= 256 && !buf.contains(&b'\n'));
                let line = match rpc::parse_line(&buf) {
                    rpc::Incoming::Request { id, params, .. } => {
                        assert!(params.is_object());
                        rpc::result_line(&id, &params)
                    }
                    rpc::Incoming::Notification { method, params } => {
                        rpc::notification_line(&method, &params)
                    }
                    rpc::Incoming::Invalid { id, error } => rpc::error_line(&id, &error),
                };
                assert!(!line.contains('\n'));
                let back: serde_json::Value = serde_json::from_str(&line).expect("JSON");
                assert_eq!(back["jsonrpc"], "2.0");
            }
        }
    }
});
