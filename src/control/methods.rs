//! The control methods (SPEC §13.4): each one the CLI command's own code, with
//! its params by name and its SPEC §10 shape as the result.

use std::sync::Arc;
use std::time::Duration;

use latch_client::{ClientError, Found, GcOptions, Receipt};
use latch_wire::{Incarnation, SessionRef};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use super::params::*;
use super::rpc::{self, RpcError};
use super::schema::*;
use super::{At, Failure, Place, Server};
use crate::commands::{lifecycle, registry_ops};
use crate::shapes::{CreatedJson, RestartedJson};

pub(super) type Reply = Result<Value, Failure>;

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

pub(super) fn to_value<T: Serialize>(v: &T) -> Reply {
    serde_json::to_value(v).map_err(|e| ClientError::failed("", e).into())
}

pub(super) fn usage(msg: impl Into<String>) -> Failure {
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
        "create" => super::create::create(server, parse(params)),
        "peek" => {
            let p: PeekParams = match parse(params) {
                Ok(p) => p,
                Err(e) => return Some(Err(e)),
            };
            resolve(server, &p.target)
                .and_then(|(place, target)| super::peek::peek(server, &place, &target, p))
        }
        "send" => with(server, params, super::turns::send),
        "wait" => with(server, params, super::turns::wait),
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
        "run" => with(server, params, super::turns::run),
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
    f: fn(&Place<'_>, &Found, P) -> Reply,
) -> Reply {
    let p: P = parse(params)?;
    let (place, target) = resolve(server, p.target())?;
    f(&place, &target, p)
}

/// The identity a REF names, when it names one (for errors before resolution).
fn named(reference: &str) -> Option<SessionRef> {
    reference.parse().ok()
}

/// Resolves a target as the CLI does (`expect`, `owner`, `receipt`; SPEC §9.11).
pub(crate) fn resolve<'s>(
    server: &'s Server,
    t: &TargetParams,
) -> Result<(Place<'s>, Found), Failure> {
    let fail = |e: ClientError| Failure::Latch(Box::new(e), named(&t.session));
    let owner = crate::commands::parse_owner(t.owner.as_deref()).map_err(fail)?;
    let place = server.place(owner).map_err(fail)?;
    let want = t
        .expect
        .as_deref()
        .map(|s| {
            Incarnation::parse(s).map_err(|e| ClientError::Usage(format!("expect {s:?}: {e}")))
        })
        .transpose()
        .map_err(fail)?;
    let receipt = receipt(&place, t.receipt.as_ref()).map_err(fail)?;
    let target = place
        .loc()
        .resolve(&t.session, want, receipt)
        .map_err(fail)?;
    Ok((place, target))
}

/// The receipt a request names: checked here against this registry, or (through
/// `--host`) one of that host's, its host taken out, for the host to check.
fn receipt(place: &Place<'_>, r: Option<&ReceiptParam>) -> Result<Option<Receipt>, ClientError> {
    let r = match r {
        None => return Ok(None),
        Some(ReceiptParam::Path(p)) => match place {
            Place::Here(client) => return client.load_receipt(p).map(Some),
            Place::There(_) => Receipt::load(p)?,
        },
        Some(ReceiptParam::Contents(c)) => {
            let value = Value::Object(c.clone().into_iter().collect());
            serde_json::from_value(value)
                .map_err(|e| ClientError::Usage(format!("receipt: {e}")))?
        }
    };
    match place {
        Place::Here(client) => client.check_receipt(r, "given in the request").map(Some),
        Place::There(t) => host_receipt(r, &t.remote.host).map(Some),
    }
}

/// A receipt of `host`'s, its host taken out (SPEC §9.10, §12.2).
fn host_receipt(mut r: Receipt, host: &latch_client::remote::Host) -> Result<Receipt, ClientError> {
    match r.host.as_deref() {
        Some(h) if h == host.as_str() => {
            r.host = None;
            Ok(r)
        }
        other => Err(ClientError::Usage(format!(
            "the receipt is for {}, not for host {host}",
            other.map_or("a session of this host".to_owned(), |h| format!("host {h}"))
        ))),
    }
}

fn list(server: &Server, p: Result<ListParams, Failure>) -> Reply {
    let p = p?;
    let owner = crate::commands::parse_owner(p.owner.as_deref())?;
    let tags: Vec<(String, String)> = p.tags.into_iter().collect();
    if let Some(host) = server.host() {
        let req = latch_client::remote::proto::LsRequest {
            root: server.there_root(),
            tags: tags.iter().map(|(k, v)| format!("{k}={v}")).collect(),
            status: p.status.clone(),
            owner: owner.map(|o| o.as_str().to_owned()),
        };
        return to_value(&crate::commands::there::entries_of(host, req)?);
    }
    let entries =
        registry_ops::list_entries(&server.base, &tags, p.status.as_deref(), owner.as_ref())?;
    to_value(&registry_ops::ls_entries(&entries))
}

fn status(place: &Place<'_>, t: &Found, _: StatusParams) -> Reply {
    let (derived, reply, output, casts) = registry_ops::status_at(place.loc(), t).at(&t.session)?;
    to_value(&registry_ops::status_json(
        &t.record,
        &derived,
        (reply.as_ref(), output.as_ref(), casts),
    ))
}

fn resize(place: &Place<'_>, t: &Found, p: ResizeParams) -> Reply {
    latch_wire::limits::check_size(p.rows, p.cols).map_err(|e| usage(e.to_string()))?;
    let s = &t.session;
    place
        .loc()
        .connect(t)
        .and_then(|mut b| b.resize(p.rows, p.cols))
        .at(s)?;
    to_value(&ResizedJson {
        id: s.id.to_string(),
        incarnation: s.incarnation.to_string(),
        rows: p.rows,
        cols: p.cols,
    })
}

fn patched(place: &Place<'_>, t: &Found, patch: &latch_client::MetaPatch) -> Reply {
    let s = &t.session;
    let done = place
        .loc()
        .patch(&s.to_string(), Some(s.incarnation), None, patch, false)
        .at(s)?;
    to_value(&registry_ops::patched_json(&done))
}

fn tag(place: &Place<'_>, t: &Found, p: TagParams) -> Reply {
    let patch = registry_ops::tag_patch(p.tags.into_iter().collect()).at(&t.session)?;
    patched(place, t, &patch)
}

fn patch(place: &Place<'_>, t: &Found, p: PatchParams) -> Reply {
    let mut obj = serde_json::Map::new();
    if let Some(name) = p.display_name {
        obj.insert("displayName".into(), serde_json::json!(name));
    }
    if let Some(tags) = p.tags {
        obj.insert("tags".into(), serde_json::json!(tags));
    }
    let text = Value::Object(obj).to_string();
    let patch = latch_client::MetaPatch::from_json(&text).at(&t.session)?;
    patched(place, t, &patch)
}

fn rename(place: &Place<'_>, t: &Found, p: RenameParams) -> Reply {
    let patch = registry_ops::rename_patch(p.name).at(&t.session)?;
    patched(place, t, &patch)
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

fn kill(place: &Place<'_>, t: &Found, p: KillParams) -> Reply {
    let sig = signal(p.signal.as_ref())?;
    let timeout = duration(p.timeout.as_ref(), Duration::from_secs(10))?;
    let s = &t.session;
    // kill_requested is recorded as the creation resolves (SPEC §9.9): pinned.
    let loc = place.loc();
    let outcome = loc
        .resolve_for_kill(&s.to_string(), Some(s.incarnation), None, sig)
        .and_then(|found| loc.kill(&found, sig, p.wait.then_some(timeout)))
        .at(s)?;
    let name = lifecycle::kill_outcome(outcome);
    to_value(&lifecycle::action_json(s, t.record.owner.clone(), name))
}

fn remove(place: &Place<'_>, t: &Found, p: RemoveParams) -> Reply {
    let s = &t.session;
    place
        .loc()
        .remove(&s.to_string(), Some(s.incarnation), None, p.force)
        .at(s)?;
    to_value(&lifecycle::action_json(
        s,
        t.record.owner.clone(),
        "removed",
    ))
}

fn restart(place: &Place<'_>, t: &Found, p: RestartParams) -> Reply {
    let grace = duration(p.grace.as_ref(), Duration::from_secs(5))?;
    let s = &t.session;
    let (_, created) = place
        .loc()
        .restart(&s.to_string(), Some(s.incarnation), None, grace)
        .at(s)?;
    to_value(&RestartedJson {
        created: CreatedJson::from(&created),
        previous_incarnation: s.incarnation.to_string(),
    })
}

fn events(server: &Server, p: Result<EventsParams, Failure>) -> Reply {
    let p = p?;
    let place = server.place(None)?;
    let client = place.here()?;
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
    let place = server.place(owner)?;
    to_value(&place.loc().gc(&opts)?)
}

fn verify(server: &Server, p: Result<VerifyParams, Failure>) -> Reply {
    let p = p?;
    let client = &server.base;
    let (verdict, receipt, detail) = match (p.receipt, server.host()) {
        (ReceiptParam::Path(path), None) => client.verify_receipt(&path),
        (r, host) => {
            let r: Receipt = match r {
                ReceiptParam::Path(path) => Receipt::load(&path)?,
                ReceiptParam::Contents(c) => {
                    let value = Value::Object(c.into_iter().collect());
                    serde_json::from_value(value).map_err(|e| usage(format!("receipt: {e}")))?
                }
            };
            match host {
                None => client.verify_receipt_value(r),
                Some(h) => {
                    let v = server.place(None)?.loc().verify(host_receipt(r, h)?)?;
                    (v.verdict, v.receipt, v.detail)
                }
            }
        }
    };
    to_value(&registry_ops::verdict_json(
        verdict,
        receipt.as_ref(),
        detail,
    ))
}
