//! `latch mcp`: a Model Context Protocol server over stdio, on rmcp (SPEC §14).
//! Every tool is one control method (SPEC §13.4), served by the same code; this
//! module only shapes the arguments and renders the results for an agent.

mod tools;

use std::path::PathBuf;

use latch_client::ClientError;
use rmcp::ServiceExt;

/// `latch mcp`.
#[derive(Debug, clap::Args)]
pub struct McpArgs {
    /// Stamp every creation with OWNER, and act only on sessions proven to be
    /// OWNER's (every other tool call is refused, SPEC §2.4).
    #[arg(long, value_name = "OWNER")]
    pub owner: Option<String>,
    /// Offer only the observing tools (list, status, peek, wait).
    #[arg(long)]
    pub read_only: bool,
}

/// Runs the server until the client closes stdin (exit 0).
pub fn run(
    root: Option<&PathBuf>,
    host: Option<&latch_client::remote::Host>,
    args: &McpArgs,
) -> Result<i32, ClientError> {
    if let Some(o) = &args.owner {
        crate::commands::parse_owner(Some(o))?;
    }
    let server = crate::control::Server::open(root, host)?;
    let latch = tools::Latch::new(server, args.owner.clone(), args.read_only);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ClientError::failed("runtime", e))?;
    rt.block_on(async move {
        let service = latch
            .serve(rmcp::transport::stdio())
            .await
            .map_err(|e| ClientError::failed("mcp", e))?;
        service
            .waiting()
            .await
            .map_err(|e| ClientError::failed("mcp", e))?;
        Ok::<_, ClientError>(())
    })?;
    Ok(latch_client::exit::OK)
}
