//! The control methods (SPEC §13.4): each one the CLI command's own code, with
//! its params by name and its SPEC §10 shape as the result.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use latch_client::{Bound, ClientError, Condition, GcOptions, Receipt, Target, Waited};
use latch_wire::{Incarnation, SessionRef};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use base64::Engine as _;

use super::params::*;
use super::rpc::{self, RpcError};
use super::schema::*;
use super::{At, ClientRef, Failure, Server};
use crate::commands::{lifecycle, registry_ops, sessions};
use crate::shapes::{CreatedJson, OutputJson, RangeJson, RestartedJson, WaitedJson};

type Reply = Result<Value, Failure>;

/// Parses params of `T`, refusing a key `T` does not name (-32602).
pub(crate) fn parse<T: DeserializeOwned + JsonSchema>(params: Value) -> Result<T, Failure> {
    if let Value::Object(o) = &params {
        let known = fields::<T>();
        if let Some(k) = o.keys().find(|k| !known.contains(k)) {
            return Err(RpcError::params(format!("unknown param {k:?}")).into());
        }
    }
    serde_json::from_value(params).map_err(|e| RpcError::params(e.to_string()).into())
}

fn to_value<T: Serialize>(v: &T) -> Reply {
    serde_json::to_value(v).map_err(|e| ClientError::Other(e.to_string()).into())
}

fn usage(msg: impl Into<String>) -> Failure {
    Failure::Latch(Box::new(ClientError::Usage(msg.into())), None)
}

/// A duration param, `default` when absent.
pub(crate) fn duration(d: Option<&DurParam>, default: Duration) -> Result<Duration, Failure> {
    match d {
        None => Ok(default),
        Some(DurParam::Seconds(s)) if s.is_finite() && *s >= 0.0 => {
            Duration::try_from_secs_f64(*s).map_err(|_| usage(format!("invalid duration {s}")))
        }
        Some(DurParam::Seconds(s)) => Err(usage(format!("invalid duration {s}"))),
        Some(DurParam::Text(t)) => t.parse::<crate::cli::Dur>().map(|d| d.0).map_err(usage),
    }
}

/// `initialize`: the highest version both speak (SPEC §13.2).
pub(crate) fn initialize(params: &Value) -> Reply {
    let p: InitializeParams = parse(params.clone())?;
    let min = p.min_version.unwrap_or(1);
    let max = p.max_version.unwrap_or(min);
    let version = max.min(super::PROTOCOL_MAX);
    if version < min.max(super::PROTOCOL_MIN) || min > max {
        let e = ClientError::protocol(
            latch_client::Mismatch::Version,
            format!(
                "no common control-protocol version: the client speaks {min}-{max}, \
                 this latch {}-{}",
                super::PROTOCOL_MIN,
                super::PROTOCOL_MAX
            ),
        );
        return Err(e.into());
    }
    to_value(&InitializedJson {
        protocol_version: version,
        latch_version: env!("CARGO_PKG_VERSION"),
        capabilities: CapabilitiesJson {
            methods: METHODS.iter().map(|m| m.name).collect(),
            notifications: NOTIFICATIONS.iter().map(|(n, _)| *n).collect(),
            output_formats: vec!["base64", "text"],
            limits: LimitsJson {
                line_max: super::LINE_MAX,
                requests_max: super::REQUESTS_MAX,
                subscriptions_max: super::SUBSCRIPTIONS_MAX,
                subscription_queue_bytes: super::SUBSCRIPTION_QUEUE_BYTES,
            },
        },
    })
}

/// Serves one request; `None`: it answered itself (subscribe).
pub(crate) fn call(server: &Arc<Server>, method: &str, params: Value, id: &Value) -> Option<Reply> {
    Some(match method {
        "list" => list(server, parse(params)),
        "status" => with(server, params, status),
        "create" => create(server, parse(params)),
        "peek" => with(server, params, peek),
        "send" => with(server, params, send),
        "wait" => with(server, params, wait),
        "resize" => with(server, params, resize),
        "tag" => with(server, params, tag),
        "patch" => with(server, params, patch),
        "rename" => with(server, params, rename),
        "kill" => with(server, params, kill),
        "remove" => with(server, params, remove),
        "restart" => with(server, params, restart),
        "events" => events(server, parse(params)),
        "gc" => gc(server, parse(params)),
        "verifyReceipt" => verify(server, parse(params)),
        "subscribe" => return super::subscribe::start(server, params, id),
        "run" => with(server, params, run),
        other => Err(RpcError::new(rpc::METHOD_NOT_FOUND, format!("no method {other:?}")).into()),
    })
}

/// Params with a target: parsed, the target resolved under its preconditions.
trait HasTarget {
    fn target(&self) -> &TargetParams;
}

macro_rules! has_target {
    ($($t:ty),*) => { $(impl HasTarget for $t { fn target(&self) -> &TargetParams { &self.target } })* };
}
has_target!(
    StatusParams,
    PeekParams,
    SendParams,
    WaitParams,
    RunParams,
    ResizeParams,
    TagParams,
    PatchParams,
    RenameParams,
    KillParams,
    RemoveParams,
    RestartParams,
    SubscribeParams
);

fn with<P: DeserializeOwned + JsonSchema + HasTarget>(
    server: &Server,
    params: Value,
    f: fn(&ClientRef<'_>, &Target, P) -> Reply,
) -> Reply {
    let p: P = parse(params)?;
    let (client, target) = resolve(server, p.target())?;
    f(&client, &target, p)
}

/// The identity a REF names, when it names one (for errors before resolution).
fn named(reference: &str) -> Option<SessionRef> {
    reference.parse().ok()
}

/// Resolves a target as the CLI does (`expect`, `owner`, `receipt`; SPEC §9.11).
pub(crate) fn resolve<'s>(
    server: &'s Server,
    t: &TargetParams,
) -> Result<(ClientRef<'s>, Target), Failure> {
    let fail = |e: ClientError| Failure::Latch(Box::new(e), named(&t.session));
    let owner = crate::commands::parse_owner(t.owner.as_deref()).map_err(fail)?;
    let client = server.client(owner).map_err(fail)?;
    let want = t
        .expect
        .as_deref()
        .map(|s| {
            Incarnation::parse(s).map_err(|e| ClientError::Usage(format!("expect {s:?}: {e}")))
        })
        .transpose()
        .map_err(fail)?;
    let receipt = receipt(&client, t.receipt.as_ref()).map_err(fail)?;
    let target = crate::commands::resolve_with(&client, &t.session, want, receipt).map_err(fail)?;
    Ok((client, target))
}

fn receipt(
    client: &latch_client::Client,
    r: Option<&ReceiptParam>,
) -> Result<Option<Receipt>, ClientError> {
    match r {
        None => Ok(None),
        Some(ReceiptParam::Path(p)) => client.load_receipt(p).map(Some),
        Some(ReceiptParam::Contents(c)) => {
            let value = Value::Object(c.clone().into_iter().collect());
            let r: Receipt = serde_json::from_value(value)
                .map_err(|e| ClientError::Usage(format!("receipt: {e}")))?;
            client.check_receipt(r, "given in the request").map(Some)
        }
    }
}

fn list(server: &Server, p: Result<ListParams, Failure>) -> Reply {
    let p = p?;
    let owner = crate::commands::parse_owner(p.owner.as_deref())?;
    let tags: Vec<(String, String)> = p.tags.into_iter().collect();
    let entries =
        registry_ops::list_entries(&server.base, &tags, p.status.as_deref(), owner.as_ref())?;
    to_value(
        &entries
            .iter()
            .map(registry_ops::ls_entry)
            .collect::<Vec<_>>(),
    )
}

fn status(client: &ClientRef<'_>, t: &Target, _: StatusParams) -> Reply {
    let (derived, reply, output, casts) = registry_ops::status_parts(client, t).at(&t.session)?;
    to_value(&registry_ops::status_json(
        &t.record,
        &derived,
        (reply.as_ref(), output.as_ref(), casts),
    ))
}

fn legacy(name: Option<&str>) -> Result<Option<crate::cli::Legacy>, Failure> {
    use clap::ValueEnum;
    name.map(|n| crate::cli::Legacy::from_str(n, false).map_err(|_| usage(format!("legacy {n:?}"))))
        .transpose()
}

fn create(server: &Server, p: Result<CreateParams, Failure>) -> Reply {
    let p = p?;
    let owner = crate::commands::parse_owner(p.owner.as_deref())?;
    let id =
        p.id.as_deref()
            .map(|s| latch_wire::SessionId::new(s).map_err(|e| usage(format!("id {s:?}: {e}"))))
            .transpose()?;
    let kv = |m: &BTreeMap<String, String>| m.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let args = crate::cli::NewArgs {
        detached: true,
        no_shell_integration: p.shell_integration == Some(false),
        attach_or_create: false,
        detach_key: None,
        id: None,
        name: p.name.clone(),
        tags: kv(&p.tags),
        cwd: p.cwd.clone(),
        env: kv(&p.env),
        legacy: legacy(p.legacy.as_deref())?,
        receipt: None,
        owner: None,
        // Restart policies, parents, resume commands and recordings are the CLI's
        // for now (SPEC §13.4 lists what `create` takes).
        supervise: Default::default(),
        resume_cmd: None,
        cast: None,
        command: p.command.clone(),
    };
    let size = (p.rows.unwrap_or(24), p.cols.unwrap_or(80));
    latch_wire::limits::check_size(size.0, size.1).map_err(|e| usage(e.to_string()))?;
    let path = p
        .receipt
        .as_deref()
        .map(sessions::prepare_receipt)
        .transpose()?;
    let new = sessions::new_session(&server.base, &args, id, owner, size)?;
    let created = server.base.create(new)?;
    let shape = CreatedJson::from(&created);
    if let Some(path) = path {
        if let Err(e) = server.base.write_receipt(&path, &created) {
            let mut err = RpcError::new(
                i64::from(latch_client::exit::RECEIPT_NOT_WRITTEN),
                format!(
                    "session {} was created and runs, but its receipt could not be written: {e}",
                    created.session()
                ),
            );
            err.data = Some(serde_json::json!({
                "kind": "receipt-not-written",
                "class": "receipt-not-written",
                "exitCode": latch_client::exit::RECEIPT_NOT_WRITTEN,
                "id": shape.id,
                "incarnation": shape.incarnation,
                "created": shape,
            }));
            return Err(err.into());
        }
    }
    to_value(&shape)
}

/// The most `peek since` gives in one answer.
const SINCE_DEFAULT: u32 = 1 << 20;

fn peek(client: &ClientRef<'_>, t: &Target, p: PeekParams) -> Reply {
    use crate::pictures::Format;
    let picture = match p.format.as_deref() {
        Some("svg") => Some(("svg", Format::Svg)),
        Some("html") => Some(("html", Format::Html)),
        Some("png") => Some(("png", Format::Png)),
        _ => None,
    };
    let plain = match p.format.as_deref() {
        None | Some("plain") => true,
        Some("ansi") => false,
        Some(_) if picture.is_some() => false,
        Some(f) => {
            return Err(
                RpcError::params(format!("format {f:?}: plain, ansi, svg, html or png")).into(),
            )
        }
    };
    let s = &t.session;
    if let Some((name, format)) = picture {
        if p.since.is_some() {
            return Err(usage("since gives plain text of the output: not a picture"));
        }
        // The picture `peek --format` draws (SPEC §4.4); a PNG as base64.
        let bytes = crate::pictures::picture_of(client, t, p.full, format).at(s)?;
        let screen = match format {
            Format::Png => base64::engine::general_purpose::STANDARD.encode(&bytes),
            _ => String::from_utf8_lossy(&bytes).into_owned(),
        };
        return to_value(&PeekResult::Screen(ScreenJson {
            id: s.id.to_string(),
            incarnation: s.incarnation.to_string(),
            format: name,
            full: p.full,
            screen,
            exit_code: None,
            exit_signal: None,
        }));
    }
    if let Some(since) = p.since {
        if !plain || p.full {
            return Err(usage(
                "since gives plain text of the output: no format, no full",
            ));
        }
        let mut bound = client.connect(s).at(s)?;
        let max = p.max_bytes.unwrap_or(SINCE_DEFAULT).max(1);
        return to_value(&PeekResult::Output(
            output_since(&mut bound, since, max).at(s)?,
        ));
    }
    let opts = sessions::peek_options(plain, p.full);
    let shape = |screen: String, exit: Option<(Option<i32>, Option<i32>)>| ScreenJson {
        id: s.id.to_string(),
        incarnation: s.incarnation.to_string(),
        format: if plain { "plain" } else { "ansi" },
        full: p.full,
        screen,
        exit_code: exit.map(|e| e.0),
        exit_signal: exit.map(|e| e.1),
    };
    let live = client.connect(s).and_then(|mut b| b.peek(opts));
    match live {
        Ok(bytes) => to_value(&PeekResult::Screen(shape(
            String::from_utf8_lossy(&bytes).into_owned(),
            None,
        ))),
        Err(e) => {
            // An ended program: its kept final screen, as `latch peek` shows.
            let f = sessions::final_screen(client, t, e).at(s)?;
            let text = sessions::final_text(&f, plain, p.full).clone();
            to_value(&PeekResult::Screen(shape(
                text,
                Some((f.exit.code, f.exit.signal)),
            )))
        }
    }
}

/// The output after `since`, as plain text, at most `max` bytes of it: the
/// output shape, whose `outputRange.end` is where to continue (SPEC §4.7).
fn output_since(bound: &mut Bound, since: u64, max: u32) -> Result<OutputJson, ClientError> {
    let session = bound.target().clone();
    let mut plain = latch_screen::PlainStream::default();
    let (mut text, mut cursor, mut dropped, mut start) = (String::new(), since, 0u64, None);
    let mut left = max;
    loop {
        let range = bound.output_since(cursor, left)?;
        dropped += range.dropped;
        start.get_or_insert(range.start);
        let n = u32::try_from(range.bytes.len()).unwrap_or(u32::MAX);
        cursor = range.start + u64::from(n);
        text.push_str(&plain.strip(&range.bytes));
        left = left.saturating_sub(n);
        if cursor >= range.end || n == 0 || left == 0 {
            break;
        }
    }
    Ok(OutputJson {
        id: session.id.to_string(),
        incarnation: session.incarnation.to_string(),
        output_range: RangeJson {
            start: start.unwrap_or(since),
            end: cursor,
        },
        dropped_bytes: dropped,
        output: text,
    })
}

fn send(client: &ClientRef<'_>, t: &Target, p: SendParams) -> Reply {
    let mut bytes = p.text.clone().unwrap_or_default().into_bytes();
    bytes.extend(sessions::input_bytes(&p.keys, true));
    let s = &t.session;
    let delivered =
        p.paste || p.submit || p.when_ready || p.wait_idle.is_some() || p.wait_text.is_some();
    if !delivered {
        let confirmed = client.send(s, &bytes).at(s)?;
        return to_value(&SentJson {
            id: s.id.to_string(),
            incarnation: s.incarnation.to_string(),
            bytes: bytes.len(),
            confirmed,
            pasted: None,
            output_range: None,
        });
    }
    // `latch send`'s delivered send (SPEC §4.7): one bound connection types, a
    // second watches.
    let after = match (&p.wait_idle, p.wait_text) {
        (Some(d), _) => latch_client::After::Idle(duration(Some(d), Duration::ZERO)?),
        (None, Some(text)) => latch_client::After::Text(text),
        (None, None) => latch_client::After::Nothing,
    };
    let opts = latch_client::SendOptions {
        paste: p.paste,
        submit: p.submit,
        when_ready: p.when_ready,
        after,
        timeout: duration(p.timeout.as_ref(), Duration::from_secs(10))?,
    };
    let sent = client
        .connect(s)
        .and_then(|bound| {
            let watch = client.connect(s)?;
            latch_client::send_bound(bound, watch, &bytes, &opts)
        })
        .at(s)?;
    to_value(&SentJson {
        id: s.id.to_string(),
        incarnation: s.incarnation.to_string(),
        bytes: bytes.len(),
        confirmed: true,
        pasted: Some(sent.pasted),
        output_range: Some(RangeJson {
            start: sent.start,
            end: sent.end,
        }),
    })
}

fn wait(client: &ClientRef<'_>, t: &Target, p: WaitParams) -> Reply {
    let idle = p
        .idle
        .as_ref()
        .map(|d| duration(Some(d), Duration::ZERO))
        .transpose()?;
    let n = usize::from(p.text.is_some()) + usize::from(idle.is_some()) + usize::from(p.prompt);
    if n + usize::from(p.exit) != 1 {
        return Err(RpcError::params("give exactly one of text, idle, prompt, exit").into());
    }
    let condition = match (p.text, idle) {
        (Some(text), _) => Condition::Text(text),
        (None, Some(d)) => Condition::Idle(d),
        (None, None) if p.prompt => Condition::Prompt,
        (None, None) => Condition::Exit,
    };
    let timeout = duration(p.timeout.as_ref(), Duration::from_secs(10))?;
    let s = &t.session;
    let waited = client.wait(s, &condition, p.after, timeout).at(s)?;
    to_value(&waited_json(s, &condition, waited))
}

/// `run`: the same run as `latch run --json` (SPEC §4.7), and its shape.
fn run(client: &ClientRef<'_>, t: &Target, p: RunParams) -> Reply {
    let opts = latch_client::RunOptions {
        timeout: duration(p.timeout.as_ref(), Duration::from_secs(600))?,
        marker: p.marker,
    };
    let s = &t.session;
    let mut collected = crate::commands::run::Collected::new(true);
    let res = client
        .run(s, &p.command, &opts, None, &mut |b| collected.push(b))
        .at(s)?;
    to_value(&crate::commands::run::run_json(
        s, res, collected, &p.command,
    ))
}

/// `wait --json`'s shape.
pub(crate) fn waited_json(s: &SessionRef, condition: &Condition, waited: Waited) -> WaitedJson {
    let (cursor, exit) = match waited {
        Waited::At { cursor } => (Some(cursor), None),
        Waited::Exited(e) => (None, Some(e)),
        _ => (None, None),
    };
    WaitedJson {
        id: s.id.to_string(),
        incarnation: s.incarnation.to_string(),
        condition: condition.name(),
        output_cursor: cursor,
        exit_code: exit.and_then(|e| e.code),
        exit_signal: exit.and_then(|e| e.signal),
    }
}

fn resize(client: &ClientRef<'_>, t: &Target, p: ResizeParams) -> Reply {
    latch_wire::limits::check_size(p.rows, p.cols).map_err(|e| usage(e.to_string()))?;
    let s = &t.session;
    client
        .connect(s)
        .and_then(|mut b| b.resize(p.rows, p.cols))
        .at(s)?;
    to_value(&ResizedJson {
        id: s.id.to_string(),
        incarnation: s.incarnation.to_string(),
        rows: p.rows,
        cols: p.cols,
    })
}

fn patched(client: &ClientRef<'_>, t: &Target, patch: &latch_client::MetaPatch) -> Reply {
    let s = &t.session;
    let done = client.patch(&s.id, Some(&s.incarnation), patch).at(s)?;
    to_value(&registry_ops::patched_json(&done))
}

fn tag(client: &ClientRef<'_>, t: &Target, p: TagParams) -> Reply {
    let patch = registry_ops::tag_patch(p.tags.into_iter().collect()).at(&t.session)?;
    patched(client, t, &patch)
}

fn patch(client: &ClientRef<'_>, t: &Target, p: PatchParams) -> Reply {
    let mut obj = serde_json::Map::new();
    if let Some(name) = p.display_name {
        obj.insert("displayName".into(), serde_json::json!(name));
    }
    if let Some(tags) = p.tags {
        obj.insert("tags".into(), serde_json::json!(tags));
    }
    let text = Value::Object(obj).to_string();
    let patch = latch_client::MetaPatch::from_json(&text).at(&t.session)?;
    patched(client, t, &patch)
}

fn rename(client: &ClientRef<'_>, t: &Target, p: RenameParams) -> Reply {
    let patch = registry_ops::rename_patch(p.name).at(&t.session)?;
    patched(client, t, &patch)
}

fn signal(p: Option<&SignalParam>) -> Result<i32, Failure> {
    use clap::builder::TypedValueParser;
    match p {
        None => Ok(libc::SIGHUP),
        Some(SignalParam::Number(n)) => Ok(*n),
        Some(SignalParam::Name(name)) => crate::cli::SignalParser
            .parse_ref(
                &clap::Command::new("latch"),
                None,
                std::ffi::OsStr::new(name),
            )
            .map_err(|_| usage(format!("signal {name:?}: no such signal"))),
    }
}

fn kill(client: &ClientRef<'_>, t: &Target, p: KillParams) -> Reply {
    let sig = signal(p.signal.as_ref())?;
    let timeout = duration(p.timeout.as_ref(), Duration::from_secs(10))?;
    let s = &t.session;
    let outcome = client.kill(s, sig, p.wait.then_some(timeout)).at(s)?;
    let name = lifecycle::kill_outcome(outcome);
    to_value(&lifecycle::action_json(s, t.record.owner.clone(), name))
}

fn remove(client: &ClientRef<'_>, t: &Target, p: RemoveParams) -> Reply {
    let s = &t.session;
    client.remove(s, lifecycle::remove_mode(p.force)).at(s)?;
    to_value(&lifecycle::action_json(
        s,
        t.record.owner.clone(),
        "removed",
    ))
}

fn restart(client: &ClientRef<'_>, t: &Target, p: RestartParams) -> Reply {
    let grace = duration(p.grace.as_ref(), Duration::from_secs(5))?;
    let s = &t.session;
    let created = client.restart(s, grace).at(s)?;
    to_value(&RestartedJson {
        created: CreatedJson::from(&created),
        previous_incarnation: s.incarnation.to_string(),
    })
}

fn events(server: &Server, p: Result<EventsParams, Failure>) -> Reply {
    let p = p?;
    let client = &server.base;
    let scope = crate::events::scope(client, p.session.as_deref(), p.all)?;
    let mut follower = client.follow_events(scope)?;
    let mut events = Vec::new();
    follower.for_each_new(|ev| {
        if let Value::Object(o) = ev.read().to_value() {
            events.push(o);
        }
        true
    })?;
    to_value(&EventsJson { events })
}

fn gc(server: &Server, p: Result<GcParams, Failure>) -> Reply {
    let p = p?;
    let mut opts = GcOptions::default();
    opts.dry_run = p.dry_run;
    opts.abandoned_cwd = p.abandoned;
    opts.grace = duration(p.grace.as_ref(), Duration::from_secs(3))?;
    opts.idle = p
        .idle_days
        .map(|d| crate::commands::secs(d * 86_400.0))
        .transpose()?;
    let owner = crate::commands::parse_owner(p.owner.as_deref())?;
    let client = server.client(owner)?;
    to_value(&client.gc(&opts)?)
}

fn verify(server: &Server, p: Result<VerifyParams, Failure>) -> Reply {
    let p = p?;
    let client = &server.base;
    let (verdict, receipt, detail) = match p.receipt {
        ReceiptParam::Path(path) => client.verify_receipt(&path),
        ReceiptParam::Contents(c) => {
            let value = Value::Object(c.into_iter().collect());
            let r: Receipt =
                serde_json::from_value(value).map_err(|e| usage(format!("receipt: {e}")))?;
            client.verify_receipt_value(r)
        }
    };
    to_value(&registry_ops::verdict_json(
        verdict,
        receipt.as_ref(),
        detail,
    ))
}
