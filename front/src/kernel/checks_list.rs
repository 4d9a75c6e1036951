//! `checks {session}`: the project's checks (`.heddle/checks.toml`, then detection) with where each came
//! from, the checks file's problems, and each check's last runs from the database (newest first: state,
//! exit, duration and counts), so a check that passed and failed on the same tree shows it.
//!
//! ```text
//! → {"jsonrpc":"2.0","id":5,"method":"checks","params":{"session":"demo"}}
//! ← {…,"result":{"session":"demo","file":null,"checks":[{"name":"cargo","command":"cargo nextest run --workspace --no-fail-fast",
//!    "cwd":"/srv/p","parser":"nextest","origin":"detected: Cargo.toml; cargo-nextest is on PATH","timeout_ms":null,
//!    "last_runs":[{"job":3,"at_ms":…,"state":"exited","exit_code":100,"duration_ms":1520.4,"counts":{…}}]}],
//!    "errors":[],"note":null,"announcements":[]}}
//! ```

use crate::checks::config::FILE;
use crate::kernel::{Client, Kernel};
use crate::rpc::{self, RpcError};
use protocol::checks::{CheckEntry, CheckRun, ChecksList};
use serde::Deserialize;
use serde_json::Value;
use std::time::Instant;

/// How many past runs each check lists.
const LAST_RUNS: u32 = 5;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Params {
    session: String,
}

pub(crate) fn call(k: &Kernel, client: &Client, params: Value) -> Result<ChecksList, RpcError> {
    let p: Params = rpc::params("checks", params)?;
    let s = k.session(client, &p.session)?;
    // Ended checks nobody read yet are parsed (and recorded) now.
    let unparsed: Vec<u64> = {
        let st = s.lock();
        let pending = |j: &&crate::jobs::job::Job| {
            j.state().ended() && j.check.as_ref().is_some_and(|c| c.parsed.is_none() && c.note.is_none())
        };
        st.jobs().filter(pending).map(|j| j.id()).collect()
    };
    for job in unparsed {
        crate::kernel::check_run::parse_job(k, &s, job);
    }
    k.db.sync();
    let (dir, found) = crate::kernel::check_run::project(&s);
    let project = dir.to_string_lossy().into_owned();
    let checks = found
        .checks
        .into_iter()
        .map(|c| {
            let runs = k.db.check_runs(s.spec().owner_uid, &project, &c.name, LAST_RUNS).unwrap_or_default();
            CheckEntry {
                last_runs: runs
                    .into_iter()
                    .map(|r| CheckRun {
                        session: r.session,
                        job: r.job,
                        at_ms: r.at_ms,
                        state: r.state,
                        exit_code: r.exit_code,
                        duration_ms: r.duration_ms,
                        counts: r.counts.and_then(|c| serde_json::from_str(&c).ok()),
                    })
                    .collect(),
                name: c.name,
                command: c.command,
                cwd: Some(c.cwd.display().to_string()),
                parser: c.parser.name().to_owned(),
                origin: c.origin,
                timeout_ms: c.timeout_ms,
            }
        })
        .collect();
    let announcements = s.lock().take_announcements(Instant::now());
    Ok(ChecksList {
        session: p.session,
        file: found.file.then(|| FILE.to_owned()),
        checks,
        errors: found.errors,
        note: found.note,
        announcements,
    })
}
