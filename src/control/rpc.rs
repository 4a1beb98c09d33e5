//! The control protocol's framing (SPEC §13.1): JSON-RPC 2.0, one JSON object per
//! line. Sans-IO except [`read_line_capped`], and free of the rest of latch, so
//! the fuzz target `control_line` includes this file as it is.

use std::io::BufRead;

use serde_json::{json, Map, Value};

/// The line is not JSON.
pub const PARSE_ERROR: i64 = -32700;
/// Not a request object (a batch, no `method`, a wrong `jsonrpc`, an overlong line).
pub const INVALID_REQUEST: i64 = -32600;
/// No such method.
pub const METHOD_NOT_FOUND: i64 = -32601;
/// The params do not fit the method's schema.
pub const INVALID_PARAMS: i64 = -32602;
/// A failure of the server itself.
pub const INTERNAL_ERROR: i64 = -32603;
/// A connection cap was reached (requests in flight, subscriptions).
pub const OVERLOADED: i64 = -32001;
/// A method other than `initialize` before `initialize`, or a second `initialize`.
pub const NOT_INITIALIZED: i64 = -32002;
/// The request was cancelled (`cancel`) before it finished.
pub const CANCELLED: i64 = -32800;

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }

    pub fn params(message: impl Into<String>) -> Self {
        Self::new(INVALID_PARAMS, message)
    }
}

/// One line, read.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    /// A request: answered exactly once, with its `id`.
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    /// A notification (no `id`): never answered.
    Notification { method: String, params: Value },
    /// Not a request: answered with this error (`id` null unless the line had one).
    Invalid { id: Value, error: RpcError },
}

/// Reads one line of `r` (without its `\n`) into `buf`, keeping at most `cap`
/// bytes: a longer line is read to its end and dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineRead {
    Eof,
    Line,
    TooLong,
}

pub fn read_line_capped(
    r: &mut impl BufRead,
    buf: &mut Vec<u8>,
    cap: usize,
) -> std::io::Result<LineRead> {
    buf.clear();
    let mut over = false;
    let mut any = false;
    loop {
        let chunk = match r.fill_buf() {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if chunk.is_empty() {
            return Ok(match (any, over) {
                (false, _) => LineRead::Eof,
                (true, true) => LineRead::TooLong,
                (true, false) => LineRead::Line,
            });
        }
        any = true;
        let (part, done) = match memchr_nl(chunk) {
            Some(i) => (&chunk[..i], Some(i + 1)),
            None => (chunk, None),
        };
        if !over {
            if buf.len() + part.len() > cap {
                over = true;
                buf.clear();
            } else {
                buf.extend_from_slice(part);
            }
        }
        let used = done.unwrap_or(chunk.len());
        r.consume(used);
        if done.is_some() {
            return Ok(if over {
                LineRead::TooLong
            } else {
                LineRead::Line
            });
        }
    }
}

fn memchr_nl(b: &[u8]) -> Option<usize> {
    b.iter().position(|&c| c == b'\n')
}

/// Parses one line (SPEC §13.1). Never panics.
pub fn parse_line(line: &[u8]) -> Incoming {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let value: Value = match serde_json::from_slice(line) {
        Ok(v) => v,
        Err(e) => {
            return Incoming::Invalid {
                id: Value::Null,
                error: RpcError::new(PARSE_ERROR, format!("parse error: {e}")),
            }
        }
    };
    let invalid = |id: Value, msg: &str| Incoming::Invalid {
        id,
        error: RpcError::new(INVALID_REQUEST, msg),
    };
    let mut obj = match value {
        Value::Object(o) => o,
        Value::Array(_) => return invalid(Value::Null, "batches are not supported"),
        _ => return invalid(Value::Null, "a request is a JSON object"),
    };
    let id = match obj.remove("id") {
        None => None,
        Some(id @ (Value::Number(_) | Value::String(_))) => Some(id),
        Some(_) => return invalid(Value::Null, "id is a number or a string"),
    };
    let echo = id.clone().unwrap_or(Value::Null);
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return invalid(echo, "jsonrpc must be \"2.0\"");
    }
    let Some(Value::String(method)) = obj.remove("method") else {
        return invalid(echo, "method is a string");
    };
    let params = match obj.remove("params") {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(p @ Value::Object(_)) => p,
        Some(_) => {
            return Incoming::Invalid {
                id: echo,
                error: RpcError::params("params is an object (by name)"),
            }
        }
    };
    match id {
        Some(id) => Incoming::Request { id, method, params },
        None => Incoming::Notification { method, params },
    }
}

/// A result line.
pub fn result_line(id: &Value, result: &Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string()
}

/// An error line.
pub fn error_line(id: &Value, e: &RpcError) -> String {
    let mut err = json!({"code": e.code, "message": e.message});
    if let Some(d) = &e.data {
        err["data"] = d.clone();
    }
    json!({"jsonrpc": "2.0", "id": id, "error": err}).to_string()
}

/// A notification line.
pub fn notification_line(method: &str, params: &Value) -> String {
    json!({"jsonrpc": "2.0", "method": method, "params": params}).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(i: &Incoming) -> Option<i64> {
        match i {
            Incoming::Invalid { error, .. } => Some(error.code),
            _ => None,
        }
    }

    #[test]
    fn lines_are_requests_notifications_or_typed_errors() {
        let r = parse_line(br#"{"jsonrpc":"2.0","id":1,"method":"list"}"#);
        assert!(matches!(r, Incoming::Request { ref method, .. } if method == "list"));
        let n = parse_line(br#"{"jsonrpc":"2.0","method":"cancel","params":{"id":1}}"#);
        assert!(matches!(n, Incoming::Notification { .. }));
        assert_eq!(code(&parse_line(b"{")), Some(PARSE_ERROR));
        assert_eq!(code(&parse_line(b"\xff")), Some(PARSE_ERROR));
        assert_eq!(code(&parse_line(b"[]")), Some(INVALID_REQUEST));
        assert_eq!(code(&parse_line(b"3")), Some(INVALID_REQUEST));
        let no_version = parse_line(br#"{"id":"x","method":"list"}"#);
        assert_eq!(code(&no_version), Some(INVALID_REQUEST));
        assert!(matches!(
            no_version,
            Incoming::Invalid {
                id: Value::String(_),
                ..
            }
        ));
        let positional = parse_line(br#"{"jsonrpc":"2.0","id":2,"method":"list","params":[1]}"#);
        assert_eq!(code(&positional), Some(INVALID_PARAMS));
        let null_id = parse_line(br#"{"jsonrpc":"2.0","id":null,"method":"list"}"#);
        assert_eq!(code(&null_id), Some(INVALID_REQUEST));
    }

    #[test]
    fn an_overlong_line_is_dropped_whole_and_the_next_read() {
        let input = b"0123456789\nabc\nlast".to_vec();
        let mut r = std::io::BufReader::with_capacity(4, &input[..]);
        let mut buf = Vec::new();
        assert_eq!(
            read_line_capped(&mut r, &mut buf, 5).unwrap(),
            LineRead::TooLong
        );
        assert_eq!(
            read_line_capped(&mut r, &mut buf, 5).unwrap(),
            LineRead::Line
        );
        assert_eq!(buf, b"abc");
        assert_eq!(
            read_line_capped(&mut r, &mut buf, 5).unwrap(),
            LineRead::Line
        );
        assert_eq!(buf, b"last");
        assert_eq!(
            read_line_capped(&mut r, &mut buf, 5).unwrap(),
            LineRead::Eof
        );
    }
}
