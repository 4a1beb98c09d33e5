//! `latch control`: a long-lived JSON-RPC 2.0 surface over stdio (SPEC §13). Every
//! method calls the same command code as the CLI and answers the same SPEC §10
//! shapes; requests are served on their own threads and answered out of order.

mod create;
mod methods;
mod outbox;
mod params;
mod peek;
mod pool;
pub(crate) mod rpc;
mod schema;
mod subscribe;
mod turns;

use std::collections::HashMap;
use std::io::{BufReader, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use latch_client::{Client, ClientError, UnreachableCause};
use latch_wire::{Owner, SessionRef};
use serde_json::{json, Value};

use rpc::{Incoming, LineRead, RpcError};

/// The control protocol versions this build speaks (SPEC §13.2).
pub const PROTOCOL_MIN: u32 = 1;
pub const PROTOCOL_MAX: u32 = 1;
/// The longest request line, in bytes (SPEC §13.6).
pub const LINE_MAX: usize = 1 << 20;
/// Requests served at once on one connection (SPEC §13.6).
pub const REQUESTS_MAX: usize = 64;
/// Subscriptions open at once on one connection (SPEC §13.6).
pub const SUBSCRIPTIONS_MAX: usize = 16;
/// Notification bytes queued per subscription before it drops (SPEC §13.6).
pub const SUBSCRIPTION_QUEUE_BYTES: usize = 1 << 20;
/// Bound connections kept between requests, one per creation (SPEC §13.6).
pub const CONNECTIONS_KEPT: usize = 64;

/// `latch control`.
#[derive(Debug, clap::Args)]
pub struct ControlArgs {
    /// Print the JSON Schema of every method, result and notification, and exit.
    #[arg(long)]
    pub schema: bool,
}

/// One control connection: this process's stdin and stdout.
#[derive(Debug)]
pub(crate) struct Server {
    root: PathBuf,
    exe: PathBuf,
    base: Client,
    /// `--host`: the registry every request acts on is that host's, through its
    /// bridge (SPEC §12, §13.8); `None`: this one.
    there: Option<latch_client::There>,
    out: Outbox,
    initialized: AtomicBool,
    state: Mutex<State>,
    next_sub: AtomicU64,
    /// Bound connections kept between requests, one per creation.
    pool: pool::Pool,
}

use outbox::Outbox;

#[derive(Debug, Default)]
struct State {
    in_flight: usize,
    /// Pending requests by id (its JSON text): set to cancel.
    pending: HashMap<String, Arc<AtomicBool>>,
    subs: HashMap<u64, subscribe::Handle>,
}

/// A method's failure: the protocol's own, or latch's (application codes 1-12).
#[derive(Debug)]
pub(crate) enum Failure {
    Rpc(RpcError),
    Latch(Box<ClientError>, Option<SessionRef>),
}

impl From<ClientError> for Failure {
    fn from(e: ClientError) -> Self {
        Self::Latch(Box::new(e), None)
    }
}

impl From<RpcError> for Failure {
    fn from(e: RpcError) -> Self {
        Self::Rpc(e)
    }
}

/// Names the creation a failure concerns (SPEC §13.3: identity on every error).
pub(crate) trait At<T> {
    fn at(self, s: &SessionRef) -> Result<T, Failure>;
}

impl<T> At<T> for Result<T, ClientError> {
    fn at(self, s: &SessionRef) -> Result<T, Failure> {
        self.map_err(|e| Failure::Latch(Box::new(e), Some(s.clone())))
    }
}

/// `data.kind`: the error's kind, `degraded` telling a degraded read from an
/// unreachable daemon (SPEC §13.3).
fn kind_of(e: &ClientError) -> &'static str {
    match e {
        ClientError::Unreachable {
            cause: UnreachableCause::Degraded,
            ..
        } => "degraded",
        other => other.kind(),
    }
}

impl Failure {
    pub(crate) fn rpc(&self) -> RpcError {
        let (e, at) = match self {
            Self::Rpc(r) => return r.clone(),
            Self::Latch(e, at) => (&**e, at),
        };
        let body = crate::shapes::ErrorJson::from(e).error;
        let mut data = json!({
            "kind": kind_of(e),
            "class": e.class().kind(),
            "exitCode": body.exit_code,
        });
        if let Some(c) = body.candidates {
            data["candidates"] = json!(c);
        }
        match e {
            ClientError::Replaced {
                id,
                expected,
                actual,
            } => {
                data["id"] = json!(id.as_str());
                data["incarnation"] = json!(expected.to_string());
                data["actualIncarnation"] = json!(actual.map(|a| a.to_string()));
            }
            _ => {
                if let Some(s) = at {
                    data["id"] = json!(s.id.as_str());
                    data["incarnation"] = json!(s.incarnation.to_string());
                }
            }
        }
        RpcError {
            code: i64::from(body.exit_code),
            message: body.message,
            data: Some(data),
        }
    }
}

/// Where one request acts: this registry (the base client, or one opened with the
/// request's owner), or the `--host` one with the request's owner.
#[derive(Debug)]
pub(crate) enum Place<'a> {
    Here(ClientRef<'a>),
    There(latch_client::There),
}

impl Place<'_> {
    /// The location the request's command is written against.
    pub(crate) fn loc(&self) -> latch_client::Location<'_> {
        match self {
            Self::Here(c) => latch_client::Location::Here(c),
            Self::There(t) => latch_client::Location::There(t),
        }
    }

    /// Whether a connection may be kept for later requests: the server's own,
    /// without an owner precondition of the request's.
    pub(crate) fn shared(&self) -> bool {
        match self {
            Self::Here(c) => matches!(c, ClientRef::Base(_)),
            Self::There(t) => t.owner.is_none(),
        }
    }

    /// This registry's client, for what only runs here.
    pub(crate) fn here(&self) -> Result<&latch_client::Client, ClientError> {
        match self {
            Self::Here(c) => Ok(c),
            Self::There(t) => Err(ClientError::Usage(format!(
                "this method does not go through --host {}: run latch control on that host",
                t.remote.host
            ))),
        }
    }
}

impl Server {
    /// Where one request acts, with its owner precondition.
    pub(crate) fn place(&self, owner: Option<Owner>) -> Result<Place<'_>, ClientError> {
        match &self.there {
            None => self.client(owner).map(Place::Here),
            Some(t) => {
                let mut t = t.clone();
                t.owner = owner;
                Ok(Place::There(t))
            }
        }
    }

    /// `--root` as it travels to the host.
    pub(crate) fn there_root(&self) -> Option<String> {
        self.there.as_ref().and_then(|t| t.root.clone())
    }

    /// The host every request goes to, if any.
    pub(crate) fn host(&self) -> Option<&latch_client::remote::Host> {
        self.there.as_ref().map(|t| &t.remote.host)
    }

    /// A client for one request: the base one, or one with an owner precondition.
    pub(crate) fn client(&self, owner: Option<Owner>) -> Result<ClientRef<'_>, ClientError> {
        match owner {
            None => Ok(ClientRef::Base(&self.base)),
            Some(o) => Ok(ClientRef::Owned(Box::new(
                Client::open(&self.root, self.exe.clone())?.with_owner(Some(o)),
            ))),
        }
    }

    /// A fresh client, for a thread that outlives the request.
    pub(crate) fn own_client(&self, owner: Option<Owner>) -> Result<Client, ClientError> {
        Ok(Client::open(&self.root, self.exe.clone())?.with_owner(owner))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn answer(&self, id: &Value, r: Result<Value, Failure>) {
        let line = match r {
            Ok(v) => rpc::result_line(id, &v),
            Err(f) => rpc::error_line(id, &f.rpc()),
        };
        self.out.answer(line);
    }

    /// Ends a pending request (answered `cancelled` now) or a subscription.
    fn cancel(&self, params: &Value) -> Result<Value, Failure> {
        let p: params::CancelParams = methods::parse(params.clone())?;
        if let Some(sub) = p.subscription {
            let handle = self.lock().subs.remove(&sub);
            return Ok(json!({"cancelled": handle.is_some_and(subscribe::Handle::cancel)}));
        }
        let Some(id) = p.id else {
            return Err(RpcError::params("name a request id or a subscription").into());
        };
        let flag = self.lock().pending.remove(&id.to_string());
        let done = flag.is_some_and(|f| !f.swap(true, Ordering::SeqCst));
        if done {
            let e = RpcError::new(rpc::CANCELLED, "cancelled");
            self.out.answer(rpc::error_line(&id, &e));
        }
        Ok(json!({ "cancelled": done }))
    }

    fn handle(self: &Arc<Self>, incoming: Incoming) {
        let (id, method, params) = match incoming {
            Incoming::Invalid { id, error } => {
                return self.out.answer(rpc::error_line(&id, &error));
            }
            // Notifications are ignored, except `cancel` (SPEC §13.1).
            Incoming::Notification { method, params } => {
                if method == "cancel" && self.initialized.load(Ordering::SeqCst) {
                    let _ = self.cancel(&params);
                }
                return;
            }
            Incoming::Request { id, method, params } => (id, method, params),
        };
        let initialized = self.initialized.load(Ordering::SeqCst);
        match (method.as_str(), initialized) {
            ("initialize", false) => {
                let r = methods::initialize(&params);
                if r.is_ok() {
                    self.initialized.store(true, Ordering::SeqCst);
                }
                return self.answer(&id, r);
            }
            ("initialize", true) => {
                let e = RpcError::new(rpc::NOT_INITIALIZED, "already initialized");
                return self.answer(&id, Err(e.into()));
            }
            (_, false) => {
                let e = RpcError::new(rpc::NOT_INITIALIZED, "send initialize first");
                return self.answer(&id, Err(e.into()));
            }
            ("cancel", true) => return self.answer(&id, self.cancel(&params)),
            _ => {}
        }
        self.spawn(id, method, params);
    }

    /// Serves a request on its own thread, within REQUESTS_MAX.
    fn spawn(self: &Arc<Self>, id: Value, method: String, params: Value) {
        let key = id.to_string();
        let flag = Arc::new(AtomicBool::new(false));
        {
            let mut s = self.lock();
            if s.in_flight >= REQUESTS_MAX || s.pending.contains_key(&key) {
                drop(s);
                let e = RpcError::new(
                    rpc::OVERLOADED,
                    format!("{REQUESTS_MAX} requests in flight, or this id is pending"),
                );
                return self.answer(&id, Err(e.into()));
            }
            s.in_flight += 1;
            s.pending.insert(key.clone(), flag.clone());
        }
        let me = self.clone();
        let key2 = key.clone();
        let spawned = std::thread::Builder::new()
            .name("control".into())
            .spawn(move || {
                let r = methods::call(&me, &method, params, &id);
                // A cancelled request was answered when it was cancelled.
                let answered = flag.swap(true, Ordering::SeqCst);
                if let (false, Some(r)) = (answered, r) {
                    me.answer(&id, r);
                }
                let mut s = me.lock();
                s.in_flight -= 1;
                s.pending.remove(&key2);
            });
        if spawned.is_err() {
            let mut s = self.lock();
            s.in_flight -= 1;
            s.pending.remove(&key);
            drop(s);
            let e = RpcError::new(rpc::INTERNAL_ERROR, "cannot start a thread");
            self.out.answer(rpc::error_line(&Value::Null, &e));
        }
    }
}

/// A client borrowed from the server, or opened for one owner.
#[derive(Debug)]
pub(crate) enum ClientRef<'a> {
    Base(&'a Client),
    Owned(Box<Client>),
}

impl std::ops::Deref for ClientRef<'_> {
    type Target = Client;
    fn deref(&self) -> &Client {
        match self {
            Self::Base(c) => c,
            Self::Owned(c) => c,
        }
    }
}

impl Server {
    /// A server on the registry at `root` (`--root`, else SPEC §9.1's defaults).
    pub(crate) fn open(
        root: Option<&PathBuf>,
        host: Option<&latch_client::remote::Host>,
    ) -> Result<Arc<Self>, ClientError> {
        let there = match host {
            None => None,
            Some(h) => Some(latch_client::There {
                remote: crate::remote::remote(h),
                root: root
                    .map(|p| {
                        p.to_str()
                            .map(str::to_owned)
                            .ok_or_else(|| ClientError::Usage("--root is not UTF-8".into()))
                    })
                    .transpose()?,
                owner: None,
            }),
        };
        // With --host, --root names the host's registry; this one is the default.
        let local = if there.is_some() { None } else { root };
        let root = latch_registry::root::resolve_root(local.map(PathBuf::as_path))?;
        let exe = std::env::current_exe().map_err(|e| ClientError::failed("current_exe", e))?;
        Ok(Arc::new(Self {
            there,
            base: Client::open(&root, exe.clone())?,
            root,
            exe,
            out: Outbox::default(),
            initialized: AtomicBool::new(true),
            state: Mutex::default(),
            next_sub: AtomicU64::new(1),
            pool: pool::Pool::default(),
        }))
    }
}

/// One method, served exactly as `latch control` serves it (for `latch mcp`):
/// the same code, params and result shapes.
pub(crate) fn call(server: &Arc<Server>, method: &str, params: Value) -> Result<Value, RpcError> {
    match methods::call(server, method, params, &Value::Null) {
        Some(r) => r.map_err(|f| f.rpc()),
        None => Err(RpcError::new(
            rpc::METHOD_NOT_FOUND,
            "not a one-shot method",
        )),
    }
}

/// Runs `latch control` until EOF on stdin (exit 0).
pub fn run(
    root: Option<&PathBuf>,
    host: Option<&latch_client::remote::Host>,
    args: &ControlArgs,
) -> Result<i32, ClientError> {
    if args.schema {
        let text = serde_json::to_string_pretty(&schema::document())
            .map_err(|e| ClientError::failed("", e))?;
        println!("{text}");
        return Ok(latch_client::exit::OK);
    }
    let server = Server::open(root, host)?;
    // This connection starts uninitialized (SPEC §13.2).
    server.initialized.store(false, Ordering::SeqCst);
    let writer = server.clone();
    // Its own descriptor for stdout: the writer never holds std's stdout lock, which
    // the exit path takes to flush.
    let stdout = {
        use std::os::fd::AsFd;
        std::io::stdout()
            .as_fd()
            .try_clone_to_owned()
            .map(std::fs::File::from)
            .map_err(|e| ClientError::failed("stdout", e))?
    };
    std::thread::Builder::new()
        .name("control-out".into())
        .spawn(move || {
            let mut out = std::io::BufWriter::with_capacity(64 * 1024, stdout);
            writer.out.write_all(&mut out);
            // Stdout is closed: nothing can be answered any more (SPEC §10).
            let _ = out.flush();
            std::process::exit(141);
        })
        .map_err(|e| ClientError::failed("thread", e))?;
    let mut stdin = BufReader::with_capacity(64 * 1024, std::io::stdin().lock());
    let mut buf = Vec::new();
    loop {
        match rpc::read_line_capped(&mut stdin, &mut buf, LINE_MAX) {
            Ok(LineRead::Line) => server.handle(rpc::parse_line(&buf)),
            Ok(LineRead::TooLong) => {
                let e = RpcError::new(
                    rpc::INVALID_REQUEST,
                    format!("line over {LINE_MAX} bytes, dropped"),
                );
                server.out.answer(rpc::error_line(&Value::Null, &e));
            }
            Ok(LineRead::Eof) | Err(_) => break,
        }
    }
    shut_down(&server);
    Ok(latch_client::exit::OK)
}

/// EOF: pending requests are answered `cancelled`, subscriptions end, and every
/// answer is written before the exit.
fn shut_down(server: &Arc<Server>) {
    let (pending, subs): (Vec<String>, Vec<u64>) = {
        let s = server.lock();
        (
            s.pending.keys().cloned().collect(),
            s.subs.keys().copied().collect(),
        )
    };
    for key in pending {
        if let Ok(id) = serde_json::from_str::<Value>(&key) {
            let _ = server.cancel(&json!({ "id": id }));
        }
    }
    for sub in subs {
        let _ = server.cancel(&json!({ "subscription": sub }));
    }
    server.out.drain_answers();
}
