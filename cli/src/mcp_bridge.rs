//! `heddle mcp`: the stdio MCP server an agent's host starts, as a stateless bridge to the front.
//!
//! It connects to the control socket as the user who started it (so the server's per-uid rules apply
//! unchanged), sends one `mcp.attach` naming the session (or none: a fresh one) and the cwd, and then
//! copies bytes both ways: stdin → socket and socket → stdout, one newline-delimited JSON-RPC message
//! per line as MCP's stdio transport frames them. The MCP server itself lives in the front
//! (`front::transport::mcp`); nothing here parses the agent's messages. When stdin ends, the bridge
//! half-closes the socket, lets the front answer what it already read, and exits when the front has
//! closed its side.
//!
//! ```no_run
//! let args = cli::mcp_bridge::Attach { session: Some("agent".into()), cwd: "/srv".into(), close_on_exit: false, network: None };
//! let client = cli::client::Client::connect(&cli::paths::default_socket()).unwrap();
//! std::process::exit(cli::mcp_bridge::bridge(client, &args).unwrap());
//! ```

use crate::client::{CallError, Client};
use anyhow::{Context, Result};
use serde_json::json;
use std::io::{Read, Write};
use std::net::Shutdown;
use std::path::PathBuf;

/// What the bridge asks the front for.
#[derive(Clone, Debug)]
pub struct Attach {
    /// Attach to (or open) this session; `None` opens a fresh one.
    pub session: Option<String>,
    pub cwd: PathBuf,
    /// Close the session when this connection ends (default: it stays, so a restarted host finds its jobs).
    pub close_on_exit: bool,
    /// Network for a session this opens (`None`: the policy's default).
    pub network: Option<bool>,
}

/// Attach, then relay until both directions are done; the exit status.
pub fn bridge(mut client: Client, a: &Attach) -> Result<i32> {
    let mut params = json!({"cwd": a.cwd, "close_on_exit": a.close_on_exit});
    if let Some(s) = &a.session {
        params["session"] = json!(s);
    }
    if let Some(n) = a.network {
        params["network"] = json!(n);
    }
    let attached = match client.call("mcp.attach", params) {
        Ok(r) => r,
        Err(CallError::Rpc { message, .. }) => anyhow::bail!("the server refused the MCP session: {message}"),
        Err(e) => return Err(e).context("attaching the MCP session failed"),
    };
    eprintln!(
        "heddle mcp: serving session '{}' ({}){}",
        attached["session"].as_str().unwrap_or("?"),
        if attached["attached"] == true { "reattached" } else { "opened" },
        if a.close_on_exit { "; it closes when this bridge exits" } else { "" }
    );
    let (mut from_front, to_front) = client.into_parts();
    let mut up = to_front.try_clone().context("cloning the socket")?;
    let upstream = std::thread::Builder::new().name("stdin".into()).spawn(move || {
        let r = copy_flushing(&mut std::io::stdin().lock(), &mut up);
        // End of the client's input: the front answers what it read, then closes its side.
        let _ = up.shutdown(Shutdown::Write);
        r
    })?;
    let down = copy_flushing(&mut from_front, &mut std::io::stdout().lock());
    let _ = to_front.shutdown(Shutdown::Both);
    if let Err(e) = down {
        eprintln!("heddle mcp: writing to the MCP client failed: {e}");
        return Ok(1);
    }
    // The front closed the connection; the stdin thread may still sit in a read that no one will
    // answer: it is not joined, the process exits.
    if upstream.is_finished() {
        if let Ok(Err(e)) = upstream.join() {
            eprintln!("heddle mcp: reading from the MCP client failed: {e}");
        }
    }
    Ok(0)
}

/// Copy until end of input, flushing after every read so each message leaves at once.
fn copy_flushing(from: &mut impl Read, to: &mut impl Write) -> std::io::Result<u64> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut n = 0u64;
    loop {
        let got = match from.read(&mut buf) {
            Ok(0) => return Ok(n),
            Ok(got) => got,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        to.write_all(&buf[..got])?;
        to.flush()?;
        n += got as u64;
    }
}
