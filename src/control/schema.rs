//! The control protocol's own result and notification shapes, and the JSON
//! Schema of every method, result and notification, generated from the types
//! (SPEC §13.7). SPEC §13.4's method table is pinned against [`METHODS`].

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::Serialize;
use serde_json::{json, Value};

use super::params::*;
use crate::shapes::{
    ActionJson, CreatedJson, EntryJson, OutputJson, PatchedJson, RangeJson, RestartedJson,
    StatusJson, VerdictJson, WaitedJson,
};

/// `initialize`'s result.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InitializedJson {
    pub protocol_version: u32,
    pub latch_version: &'static str,
    pub capabilities: CapabilitiesJson,
}

/// What this server offers.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapabilitiesJson {
    pub methods: Vec<&'static str>,
    pub notifications: Vec<&'static str>,
    pub output_formats: Vec<&'static str>,
    pub limits: LimitsJson,
}

/// The caps of one connection (SPEC §13.6).
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LimitsJson {
    pub line_max: usize,
    pub requests_max: usize,
    pub subscriptions_max: usize,
    pub subscription_queue_bytes: usize,
}

/// `peek`'s result without since: the screen.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScreenJson {
    pub id: String,
    pub incarnation: String,
    /// `plain` or `ansi`.
    pub format: &'static str,
    pub full: bool,
    pub screen: String,
    /// Set when the program has ended: the kept final screen.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<Option<i32>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_signal: Option<Option<i32>>,
}

/// `send`'s result.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SentJson {
    pub id: String,
    pub incarnation: String,
    /// Bytes written to the terminal.
    pub bytes: usize,
    /// False when the session ended while the input was being confirmed.
    pub confirmed: bool,
    /// A delivered send: whether it went inside bracketed paste.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pasted: Option<bool>,
    /// A delivered send: the output from just before the send to its end (or to
    /// where its wait held).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_range: Option<RangeJson>,
}

/// `resize`'s result.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ResizedJson {
    pub id: String,
    pub incarnation: String,
    pub rows: u16,
    pub cols: u16,
}

/// `events`' result: the events, each as `events --json` prints it (SPEC §9.9).
#[derive(Debug, Serialize, JsonSchema)]
pub struct EventsJson {
    pub events: Vec<serde_json::Map<String, Value>>,
}

/// One element of `gc`'s result (latch-client's report, SPEC §10 "gc report").
#[derive(Debug, Serialize, JsonSchema)]
pub struct GcReportJson {
    pub id: String,
    pub incarnation: Option<String>,
    pub observed: String,
    pub action: String,
    pub reason: Option<String>,
}

/// `subscribe`'s result.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubscribedJson {
    pub subscription: u64,
    pub id: String,
    pub incarnation: String,
    /// Output notifications start at this cursor.
    pub output_cursor: u64,
}

/// `cancel`'s result.
#[derive(Debug, Serialize, JsonSchema)]
pub struct CancelledJson {
    pub cancelled: bool,
}

/// Notification `output`: program output in `outputRange` (exactly `data`'s
/// bytes, or `text`'s, which holds back a split UTF-8 sequence).
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OutputNote {
    pub subscription: u64,
    pub id: String,
    pub incarnation: String,
    pub output_range: RangeJson,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

/// Notification `lagged`: what this subscriber lost; output resumes at
/// `outputCursor` (the previous output ended `droppedBytes` before it).
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LaggedNote {
    pub subscription: u64,
    pub id: String,
    pub incarnation: String,
    pub dropped_bytes: u64,
    pub output_cursor: u64,
    pub dropped_events: u64,
}

/// Notification `event`: one event of the creation (SPEC §9.9).
#[derive(Debug, Serialize, JsonSchema)]
pub struct EventNote {
    pub subscription: u64,
    pub id: String,
    pub incarnation: String,
    pub event: serde_json::Map<String, Value>,
}

/// Notification `exit`: the program ended; the subscription is over.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExitNote {
    pub subscription: u64,
    pub id: String,
    pub incarnation: String,
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    pub output_cursor: u64,
}

/// Notification `replaced`: the id holds another creation now (or none); the
/// subscription is over and never follows the new one.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplacedNote {
    pub subscription: u64,
    pub id: String,
    pub incarnation: String,
    pub actual_incarnation: Option<String>,
}

/// Notification `closed`: the subscription is over (`cancelled`, or the
/// daemon closed the stream: `closed`).
#[derive(Debug, Serialize, JsonSchema)]
pub struct ClosedNote {
    pub subscription: u64,
    pub id: String,
    pub incarnation: String,
    pub reason: &'static str,
}

/// A method: name, params, result.
pub struct Method {
    pub name: &'static str,
    pub params: SchemaFn,
    pub result: SchemaFn,
}

fn s<T: JsonSchema>(g: &mut SchemaGenerator) -> Schema {
    g.subschema_for::<T>()
}

macro_rules! methods {
    ($($name:literal => $p:ty, $r:ty;)*) => {
        /// Every method, in SPEC §13.4's order.
        pub const METHODS: &[Method] = &[$(Method { name: $name, params: s::<$p>, result: s::<$r> },)*];
    };
}

methods! {
    "initialize" => InitializeParams, InitializedJson;
    "list" => ListParams, Vec<EntryJson>;
    "status" => StatusParams, StatusJson;
    "create" => CreateParams, CreatedJson;
    "peek" => PeekParams, PeekResult;
    "send" => SendParams, SentJson;
    "wait" => WaitParams, WaitedJson;
    "run" => RunParams, crate::commands::run::RunJson;
    "resize" => ResizeParams, ResizedJson;
    "tag" => TagParams, PatchedJson;
    "patch" => PatchParams, PatchedJson;
    "rename" => RenameParams, PatchedJson;
    "kill" => KillParams, ActionJson;
    "remove" => RemoveParams, ActionJson;
    "restart" => RestartParams, RestartedJson;
    "events" => EventsParams, EventsJson;
    "gc" => GcParams, Vec<GcReportJson>;
    "verifyReceipt" => VerifyParams, VerdictJson;
    "subscribe" => SubscribeParams, SubscribedJson;
    "cancel" => CancelParams, CancelledJson;
}

/// `peek`'s result: a screen, or (with since) the output shape.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum PeekResult {
    Screen(ScreenJson),
    Output(OutputJson),
}

/// Every notification: name and params.
/// A type's schema, by the generator.
pub type SchemaFn = fn(&mut SchemaGenerator) -> Schema;

pub const NOTIFICATIONS: &[(&str, SchemaFn)] = &[
    ("output", s::<OutputNote>),
    ("lagged", s::<LaggedNote>),
    ("event", s::<EventNote>),
    ("exit", s::<ExitNote>),
    ("replaced", s::<ReplacedNote>),
    ("closed", s::<ClosedNote>),
];

/// The document `latch control --schema` prints.
pub fn document() -> Value {
    let mut g = SchemaGenerator::default();
    let mut methods = serde_json::Map::new();
    for m in METHODS {
        let params = (m.params)(&mut g);
        let result = (m.result)(&mut g);
        methods.insert(m.name.into(), json!({"params": params, "result": result}));
    }
    let mut notes = serde_json::Map::new();
    for (name, f) in NOTIFICATIONS {
        notes.insert((*name).into(), json!({ "params": f(&mut g) }));
    }
    let defs: serde_json::Map<String, Value> = g.take_definitions(true).into_iter().collect();
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "latch control protocol",
        "protocolVersion": {"min": super::PROTOCOL_MIN, "max": super::PROTOCOL_MAX},
        "methods": methods,
        "notifications": notes,
        "$defs": defs,
    })
}

/// The keys a params object of `T` may hold (flattened fields included).
pub fn fields<T: JsonSchema>() -> Vec<String> {
    let schema = schemars::schema_for!(T);
    schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC: &str = include_str!("../../SPEC.md");

    /// SPEC §13.4's table: method -> its params' names, as written.
    fn spec_methods() -> Vec<(String, Vec<String>)> {
        let start = SPEC.find("### 13.4 Methods").expect("SPEC §13.4");
        SPEC[start..]
            .lines()
            .skip_while(|l| !l.starts_with("| "))
            .take_while(|l| l.starts_with('|'))
            .skip(2)
            .map(|l| {
                let cells: Vec<&str> = l.trim_matches('|').split('|').map(str::trim).collect();
                let mut params: Vec<String> = cells[1]
                    .split(", ")
                    .filter(|p| !p.is_empty() && *p != "-")
                    .map(|p| p.trim_matches('`').trim_end_matches('?').to_owned())
                    .collect();
                params.sort();
                (cells[0].trim_matches('`').to_owned(), params)
            })
            .collect()
    }

    #[test]
    fn spec_section_13_names_every_method_and_its_params() {
        let doc = document();
        let spec = spec_methods();
        let names: Vec<&str> = spec.iter().map(|(n, _)| n.as_str()).collect();
        let ours: Vec<&str> = METHODS.iter().map(|m| m.name).collect();
        assert_eq!(names, ours, "SPEC §13.4 and METHODS differ");
        for (name, params) in spec {
            let p = &doc["methods"][&name]["params"];
            let reference = p["$ref"].as_str().expect("a $ref");
            let def = reference.trim_start_matches("#/$defs/");
            let mut keys: Vec<String> = doc["$defs"][def]["properties"]
                .as_object()
                .map(|o| o.keys().cloned().collect())
                .unwrap_or_default();
            keys.sort();
            assert_eq!(
                keys, params,
                "method {name}: SPEC §13.4 and the schema differ"
            );
        }
    }

    #[test]
    fn spec_section_13_names_every_notification_and_its_fields() {
        let doc = document();
        let start = SPEC.find("### 13.5 Subscriptions").expect("SPEC §13.5");
        let end = SPEC[start..]
            .find("### 13.6")
            .map_or(SPEC.len(), |e| start + e);
        let listed: Vec<(String, Vec<String>)> = SPEC[start..end]
            .lines()
            .filter_map(|l| l.strip_prefix("- `"))
            .filter_map(|l| l.split_once('`').map(|(head, _)| head))
            .filter_map(|head| head.split_once(" {"))
            .map(|(name, fields)| {
                let mut f: Vec<String> = fields
                    .trim_end_matches('}')
                    .split([',', '|'])
                    .map(|f| f.trim().to_owned())
                    .collect();
                f.extend(["subscription", "id", "incarnation"].map(String::from));
                f.sort();
                (name.to_owned(), f)
            })
            .collect();
        let names: Vec<&str> = listed.iter().map(|(n, _)| n.as_str()).collect();
        let ours: Vec<&str> = NOTIFICATIONS.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ours, "SPEC §13.5 and NOTIFICATIONS differ");
        for (name, fields) in listed {
            let reference = doc["notifications"][&name]["params"]["$ref"]
                .as_str()
                .expect("a $ref")
                .trim_start_matches("#/$defs/")
                .to_owned();
            let mut keys: Vec<String> = doc["$defs"][&reference]["properties"]
                .as_object()
                .map(|o| o.keys().cloned().collect())
                .unwrap_or_default();
            keys.sort();
            assert_eq!(
                keys, fields,
                "notification {name}: SPEC §13.5 and the schema differ"
            );
        }
    }

    #[test]
    fn spec_section_13_6_caps_are_the_constants() {
        let start = SPEC.find("### 13.6 Caps").expect("SPEC §13.6");
        let rows: Vec<(String, usize)> = SPEC[start..]
            .lines()
            .skip_while(|l| !l.starts_with("| "))
            .take_while(|l| l.starts_with('|'))
            .skip(2)
            .map(|l| {
                let c: Vec<&str> = l.trim_matches('|').split('|').map(str::trim).collect();
                (c[0].to_owned(), c[1].parse().expect("a number"))
            })
            .collect();
        let want = [
            ("LINE_MAX", super::super::LINE_MAX),
            ("REQUESTS_MAX", super::super::REQUESTS_MAX),
            ("SUBSCRIPTIONS_MAX", super::super::SUBSCRIPTIONS_MAX),
            (
                "SUBSCRIPTION_QUEUE_BYTES",
                super::super::SUBSCRIPTION_QUEUE_BYTES,
            ),
            ("CONNECTIONS_KEPT", super::super::CONNECTIONS_KEPT),
        ]
        .map(|(n, v)| (n.to_owned(), v));
        assert_eq!(rows, want);
    }

    #[test]
    fn the_gc_report_schema_is_the_library_report() {
        let report = latch_client::GcReport::new("a", "exited", latch_client::GcAction::Removed);
        let v = serde_json::to_value(&report).unwrap();
        let mut have: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        have.sort();
        let mut want = fields::<GcReportJson>();
        want.sort();
        assert_eq!(have, want);
    }
}
