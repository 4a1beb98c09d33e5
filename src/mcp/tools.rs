//! The MCP tools (SPEC §14): create, list, status, peek, send, run, wait, kill, remove.

use std::collections::BTreeMap;
use std::sync::Arc;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, ServerCapabilities, ServerConfig};
use rmcp::{schemars, tool, tool_handler, tool_router, ErrorData, ServerHandler};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::control::rpc::RpcError;
use crate::control::Server;

/// Most lines of a screen in one peek result.
const PEEK_LINES: usize = 200;
/// Most output bytes in one `since` result.
const SINCE_BYTES: u32 = 16 * 1024;

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct CreateArgs {
    /// The program and its arguments, e.g. ["bash"] or ["python3", "-i"] (default: $SHELL).
    #[serde(default)]
    pub command: Vec<String>,
    /// A session id to use (default: a fresh one). Fails if it exists.
    pub id: Option<String>,
    /// A display name.
    pub name: Option<String>,
    /// Working directory.
    pub cwd: Option<String>,
    /// Tags, e.g. {"task": "build"}.
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct ListArgs {
    /// Only sessions in this status: running, exited, vanished, unknown, degraded.
    pub status: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct SessionArgs {
    /// The session as "ID@INCARNATION", exactly as a result named it: a session
    /// replaced since is refused, nothing done. A bare ID means whatever creation
    /// holds it now.
    pub session: String,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct PeekArgs {
    /// The session as "ID@INCARNATION".
    pub session: String,
    /// The whole scrollback, not just the visible screen.
    #[serde(default)]
    pub full: bool,
    /// Start at this line of the screen (a truncated result says where to go on).
    #[serde(default)]
    pub offset: usize,
    /// Instead of the screen: the output written after this output cursor (from
    /// status, wait or an earlier peek), as plain text.
    pub since: Option<u64>,
    /// Also return the screen as a PNG image (colours, attributes, the cursor).
    #[serde(default)]
    pub image: bool,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct SendArgs {
    /// The session as "ID@INCARNATION".
    pub session: String,
    /// Text to type, as is (no newline is added).
    pub text: Option<String>,
    /// Keys to press after the text, e.g. ["Enter"], ["C-c"], ["Up", "Enter"].
    #[serde(default)]
    pub keys: Vec<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct WaitArgs {
    /// The session as "ID@INCARNATION".
    pub session: String,
    /// Wait until output written after `after` (default: now) contains this text.
    pub text: Option<String>,
    /// Wait until the program has written nothing for this many seconds.
    pub idle: Option<f64>,
    /// Wait until the shell is at its prompt (bash, zsh, fish).
    #[serde(default)]
    pub prompt: bool,
    /// Wait until the program has ended.
    #[serde(default)]
    pub exit: bool,
    /// With text: look from this output cursor (e.g. the one status gave before
    /// you sent a command), so an echo already on the screen does not count.
    pub after: Option<u64>,
    /// Give up after this many seconds (default 10).
    pub timeout: Option<f64>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct RunArgs {
    /// The session as "ID@INCARNATION": a shell (bash, zsh or fish with latch's
    /// integration; or any POSIX shell with `marker`).
    pub session: String,
    /// The command line to run, as you would type it.
    pub command: String,
    /// Give up waiting after this many seconds (default 600); the command is
    /// left running.
    pub timeout: Option<f64>,
    /// For a shell without integration (dash, sh): type a marker line instead.
    #[serde(default)]
    pub marker: bool,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct KillArgs {
    /// The session as "ID@INCARNATION".
    pub session: String,
    /// A signal name or number (default HUP: hang up the whole session).
    pub signal: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct RemoveArgs {
    /// The session as "ID@INCARNATION".
    pub session: String,
    /// Kill it first if it still runs.
    #[serde(default)]
    pub force: bool,
}

/// The tools' state: the control server every call goes through.
#[derive(Debug, Clone)]
pub struct Latch {
    server: Arc<Server>,
    owner: Option<String>,
    tool_router: ToolRouter<Self>,
}

impl Latch {
    pub fn new(server: Arc<Server>, owner: Option<String>, read_only: bool) -> Self {
        let mut tool_router = Self::tool_router();
        if read_only {
            for acting in ["create", "send", "run", "kill", "remove"] {
                tool_router.remove_route(acting);
            }
        }
        Self {
            server,
            owner,
            tool_router,
        }
    }

    /// Runs control method `method` off the runtime, with `--owner` as its
    /// precondition (its stamp, for create).
    async fn call(&self, method: &'static str, mut params: Value) -> Result<Value, RpcError> {
        if let (Some(o), Value::Object(m)) = (&self.owner, &mut params) {
            m.insert("owner".into(), json!(o));
        }
        let server = self.server.clone();
        tokio::task::spawn_blocking(move || crate::control::call(&server, method, params))
            .await
            .unwrap_or_else(|e| {
                Err(RpcError::new(
                    crate::control::rpc::INTERNAL_ERROR,
                    e.to_string(),
                ))
            })
    }

    async fn answer(&self, method: &'static str, params: Value) -> CallToolResult {
        match self.call(method, params).await {
            Ok(v) => ok(format!("{}\n{}", identity(&v), pretty(&v))),
            Err(e) => refused(&e),
        }
    }
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

/// "session ID@INCARNATION" of a result (every tool result names it).
fn identity(v: &Value) -> String {
    match (v["id"].as_str(), v["incarnation"].as_str()) {
        (Some(id), Some(inc)) => format!("session {id}@{inc}"),
        _ => String::new(),
    }
}

fn ok(text: String) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(text)])
}

/// An `isError` result saying what latch refused, and that nothing was done.
fn refused(e: &RpcError) -> CallToolResult {
    let data = e.data.clone().unwrap_or(Value::Null);
    let kind = data["class"].as_str().unwrap_or("error");
    let who = match (data["id"].as_str(), data["incarnation"].as_str()) {
        (Some(id), Some(inc)) => format!(" (session {id}@{inc})"),
        _ => String::new(),
    };
    let advice = match kind {
        "replaced" => {
            " Nothing was done: that creation is gone, and another holds its id now \
             (or none). Call list or status with the bare id to see what runs there."
        }
        "not-owner" => " Nothing was done: the session is not this server's owner's.",
        "not-found" => " Nothing was done: call list to see the sessions.",
        "timed-out" => " The condition did not hold in time; wait again or peek.",
        _ => "",
    };
    let text = format!("{kind}{who}: {}.{advice}", e.message);
    CallToolResult::error(vec![ContentBlock::text(text)])
}

/// A screen, at most PEEK_LINES from `offset`, with a marker saying where to go on.
fn screen_page(screen: &str, offset: usize) -> String {
    let lines: Vec<&str> = screen.split('\n').collect();
    let total = lines.len();
    let start = offset.min(total);
    let end = (start + PEEK_LINES).min(total);
    let mut out = lines[start..end].join("\n");
    if start > 0 || end < total {
        out.push_str(&format!(
            "\n[truncated: lines {start}-{end} of {total}; call peek with offset={end} for more]"
        ));
    }
    out
}

#[tool_router]
impl Latch {
    #[tool(
        description = "Start a program in a new terminal session that outlives this conversation. Returns its reference ID@INCARNATION: pass it as `session` to every other tool, so they act on exactly this creation and refuse a replaced one."
    )]
    async fn create(
        &self,
        Parameters(a): Parameters<CreateArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let params = json!({"command": a.command, "id": a.id, "name": a.name,
            "cwd": a.cwd, "tags": a.tags});
        Ok(self.answer("create", strip_nulls(params)).await)
    }

    #[tool(
        description = "List terminal sessions with their ID, INCARNATION, status (running, exited…), command and tags."
    )]
    async fn list(&self, Parameters(a): Parameters<ListArgs>) -> Result<CallToolResult, ErrorData> {
        Ok(
            match self
                .call("list", strip_nulls(json!({"status": a.status})))
                .await
            {
                Ok(v) => {
                    let refs: Vec<String> = v
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|s| {
                            format!(
                                "{}@{} {}",
                                s["id"].as_str().unwrap_or("?"),
                                s["incarnation"].as_str().unwrap_or("?"),
                                s["status"].as_str().unwrap_or("?")
                            )
                        })
                        .collect();
                    ok(format!(
                        "{} session(s): {}\n{}",
                        refs.len(),
                        refs.join(", "),
                        pretty(&v)
                    ))
                }
                Err(e) => refused(&e),
            },
        )
    }

    #[tool(
        description = "One session's status: running or exited (with its exit code), its size, its shell's state (prompt or running a command), and outputCursor, the byte offset of its output: pass it to wait's `after` or peek's `since`."
    )]
    async fn status(
        &self,
        Parameters(a): Parameters<SessionArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        Ok(self.answer("status", json!({"session": a.session})).await)
    }

    #[tool(
        description = "Read a session's screen as plain text (the final screen once its program ended), or with `since` the output written after an output cursor. Long results are cut with a marker naming the offset or cursor to continue from."
    )]
    async fn peek(&self, Parameters(a): Parameters<PeekArgs>) -> Result<CallToolResult, ErrorData> {
        let mut params = json!({"session": a.session, "full": a.full});
        if let Some(since) = a.since {
            params = json!({"session": a.session, "since": since, "maxBytes": SINCE_BYTES});
        }
        if a.image && a.since.is_none() {
            let params = json!({"session": a.session, "full": a.full, "format": "png"});
            return Ok(match self.call("peek", params).await {
                Ok(v) => CallToolResult::success(vec![
                    ContentBlock::text(identity(&v)),
                    ContentBlock::image(v["screen"].as_str().unwrap_or(""), "image/png"),
                ]),
                Err(e) => refused(&e),
            });
        }
        Ok(match self.call("peek", params).await {
            Ok(v) if a.since.is_some() => {
                let end = v["outputRange"]["end"].as_u64().unwrap_or(0);
                let mut text = format!("{}\n{}", identity(&v), v["output"].as_str().unwrap_or(""));
                let start = v["outputRange"]["start"].as_u64().unwrap_or(0);
                if end - start >= u64::from(SINCE_BYTES) {
                    text.push_str(&format!(
                        "\n[truncated at outputCursor {end}; call peek with since={end} to continue]"
                    ));
                } else {
                    text.push_str(&format!("\n[outputCursor {end}]"));
                }
                ok(text)
            }
            Ok(v) => {
                let page = screen_page(v["screen"].as_str().unwrap_or(""), a.offset);
                let ended = match (&v["exitCode"], &v["exitSignal"]) {
                    (Value::Null, Value::Null) if v.get("exitCode").is_none() => String::new(),
                    (c, s) => format!(" (ended: exit code {c}, signal {s})"),
                };
                ok(format!("{}{ended}\n{page}", identity(&v)))
            }
            Err(e) => refused(&e),
        })
    }

    #[tool(
        description = "Type text and press keys in a session (e.g. text \"ls -l\" then keys [\"Enter\"]). Returns once the terminal has the input; then use wait (text, prompt or idle) and peek to read the answer."
    )]
    async fn send(&self, Parameters(a): Parameters<SendArgs>) -> Result<CallToolResult, ErrorData> {
        let params = strip_nulls(json!({"session": a.session, "text": a.text, "keys": a.keys}));
        Ok(self.answer("send", params).await)
    }

    #[tool(
        description = "Wait until a session's output holds a condition (exactly one): `text` written after `after`, `idle` seconds of quiet, the shell's `prompt`, or the program's `exit`. Returns the output cursor where it held; a timeout is an error result."
    )]
    async fn wait(&self, Parameters(a): Parameters<WaitArgs>) -> Result<CallToolResult, ErrorData> {
        let params = strip_nulls(json!({"session": a.session, "text": a.text, "idle": a.idle,
            "prompt": a.prompt, "exit": a.exit, "after": a.after, "timeout": a.timeout}));
        Ok(self.answer("wait", params).await)
    }

    #[tool(
        description = "Run one command in a session's shell and get exactly its output (no prompt, no echo) and its exit code: it waits for the prompt, types the command, and waits for it to end. Prefer it to send + wait + peek for shell commands."
    )]
    async fn run(&self, Parameters(a): Parameters<RunArgs>) -> Result<CallToolResult, ErrorData> {
        let params = strip_nulls(json!({"session": a.session, "command": a.command,
            "timeout": a.timeout, "marker": a.marker}));
        Ok(self.answer("run", params).await)
    }

    #[tool(
        description = "End a session's program (default: hang up its terminal). Pass the exact ID@INCARNATION: a replaced session is refused and nothing is signalled."
    )]
    async fn kill(&self, Parameters(a): Parameters<KillArgs>) -> Result<CallToolResult, ErrorData> {
        let signal = a
            .signal
            .map(|s| s.parse::<i32>().map_or(json!(s), |n| json!(n)));
        let params = strip_nulls(json!({"session": a.session, "signal": signal}));
        Ok(self.answer("kill", params).await)
    }

    #[tool(
        description = "Remove an ended session's files (force: kill it first). Pass the exact ID@INCARNATION."
    )]
    async fn remove(
        &self,
        Parameters(a): Parameters<RemoveArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        Ok(self
            .answer("remove", json!({"session": a.session, "force": a.force}))
            .await)
    }
}

/// Drops null members and `prompt`/`exit` false, so the control method sees only
/// what the agent gave.
fn strip_nulls(mut v: Value) -> Value {
    if let Value::Object(m) = &mut v {
        m.retain(|k, x| {
            !x.is_null() && !((k == "prompt" || k == "exit" || k == "marker") && *x == json!(false))
        });
    }
    v
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Latch {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build()).with_instructions(
            "Terminal sessions that outlive the conversation. create gives a session \
             reference ID@INCARNATION; pass it to every other tool: a session replaced \
             since is refused with nothing done, so an old reference never reaches a new \
             program. Typical turn: status (note outputCursor), send text + [\"Enter\"], \
             wait {text or prompt, after: that cursor}, peek.",
        )
    }
}
