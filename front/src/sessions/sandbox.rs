//! The front's side of the sandbox: the policy a session asks for at `session.open`, the `files`
//! channel's parameters and results, and explaining refused writes.
//!
//! The worker enforces the sandbox and reports it once ([`shm_proto::msg::SandboxInfo`]: the resolved
//! writable roots, the Landlock ABI and what is enforced, the seccomp denials); the front keeps that
//! report per session and uses the roots for two things:
//!
//! - **Explaining refusals** ([`explain_refusals`]): when a job ends non-zero and its output has a
//!   `Permission denied` / `Operation not permitted` / `Read-only file system` line, the paths named on
//!   that line are checked against the resolved roots; each one outside every root gets a sentence
//!   naming the path, the rule (Landlock: writes only beneath these roots) and how to widen it.
//! - **Refused pseudo-terminals** ([`explain_ptys`]): where the policy refuses jobs their own PTYs, a
//!   job that ended non-zero with a refused-access line and speaks of a PTY (in its output or command)
//!   gets a sentence naming `[seccomp.ptys]` and pointing to `run {tty}`.
//! - **Preflight** ([`preflight`]): before launch, absolute paths that the command plainly writes or
//!   deletes (redirection targets, operands of `rm`, `rmdir`, `touch`, `mkdir`, `tee`, `truncate`) and
//!   that lie outside every root are named in a warning. It is a simple lexical scan, not a parser.
//!
//! ```
//! use front::sessions::sandbox::lexical_outside;
//! let roots = vec!["/tmp/p".to_string()];
//! assert!(lexical_outside("/etc/x", &roots));
//! assert!(!lexical_outside("/tmp/p/../p/src", &roots));
//! ```

use crate::rpc::RpcError;
use serde::{Deserialize, Serialize};
use shm_proto::msg::{FileSpec, SandboxInfo};
use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

/// What a session asks for at `session.open`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxRequest {
    /// The profile's name (validated against the builtins).
    pub policy: String,
    pub network: Option<bool>,
    /// The session's cwd: the `{project}` root.
    pub project: String,
    /// Extra writable roots (absolute), checked by the supervisor against its `--allow-writable`.
    pub writable: Vec<String>,
    /// May the session's jobs drive heddle (their own session only)? `None`: the profile's `[nested]`.
    #[serde(default)]
    pub nested: Option<bool>,
    /// May the session's jobs open pseudo-terminals of their own? `None`: the profile's `[seccomp.ptys]`.
    #[serde(default)]
    pub ptys: Option<bool>,
}

impl SandboxRequest {
    /// Validate `policy` (default [`policies::DEFAULT_PROFILE`]) against the builtin profiles.
    pub fn new(
        policy: Option<&str>,
        network: Option<bool>,
        project: &str,
        writable: &[String],
        nested: Option<bool>,
    ) -> Result<SandboxRequest, RpcError> {
        let name = policy.unwrap_or(policies::DEFAULT_PROFILE);
        if let Err(e) = policies::Policy::builtin(name) {
            return Err(RpcError::invalid_params("session.open", format!("policy: {e}")));
        }
        if writable.len() > policies::extra::MAX_EXTRA {
            let why = format!("writable: {} roots given; at most {}", writable.len(), policies::extra::MAX_EXTRA);
            return Err(RpcError::invalid_params("session.open", why));
        }
        if let Some(bad) = writable.iter().find(|w| !w.starts_with('/') || w.contains('\0')) {
            let why = format!("writable: {bad:?} must be an absolute path");
            return Err(RpcError::invalid_params("session.open", why));
        }
        Ok(SandboxRequest {
            policy: name.to_owned(),
            network,
            project: project.to_owned(),
            writable: writable.to_vec(),
            nested,
            ptys: None,
        })
    }

    /// Whether the session's jobs may drive heddle: the session's choice, else its profile's.
    pub fn nested(&self) -> bool {
        self.nested.unwrap_or_else(|| policies::Policy::builtin(&self.policy).is_ok_and(|p| p.nested))
    }
}

/// One entry of `run {files: [...]}`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileParam {
    pub path: String,
    #[serde(default)]
    pub content: Option<String>,
    #[serde(default)]
    pub content_base64: Option<String>,
    #[serde(default)]
    pub mode: Option<u32>,
}

pub use protocol::results::FileResult;

/// The most files one `run` may carry.
pub const MAX_FILES: usize = 256;

/// Turn `files` into specs with absolute paths (relative ones are taken from `cwd`), normalised
/// lexically (`a/../b` is `b`, whether or not `a` exists).
pub fn file_specs(files: &[FileParam], cwd: &Path) -> Result<Vec<FileSpec>, RpcError> {
    use base64::Engine;
    if files.len() > MAX_FILES {
        return Err(RpcError::invalid_params("run", format!("{} files given; at most {MAX_FILES}", files.len())));
    }
    files
        .iter()
        .map(|f| {
            let bad = |why: String| RpcError::invalid_params("run", format!("files: {:?}: {why}", f.path));
            let content = match (&f.content, &f.content_base64) {
                (Some(c), None) => c.as_bytes().to_vec(),
                (None, Some(b)) => base64::engine::general_purpose::STANDARD
                    .decode(b)
                    .map_err(|e| bad(format!("content_base64 is not base64 ({e})")))?,
                _ => return Err(bad("give exactly one of content and content_base64".into())),
            };
            if f.path.is_empty() || f.path.contains('\0') {
                return Err(bad("the path is empty or contains NUL".into()));
            }
            if let Some(mode) = f.mode.filter(|m| *m > 0o777) {
                return Err(bad(format!(
                    "mode {mode:#o} sets the setuid, setgid or sticky bit (or is no mode at all); \
                     the files channel writes permission bits only: give a mode of at most 0o777"
                )));
            }
            let path = normalise(&cwd.join(&f.path));
            Ok(FileSpec { path: path.into_os_string().into_encoded_bytes(), content, mode: f.mode })
        })
        .collect()
}

/// Is `path` (absolute, normalised lexically) outside every root?
pub fn lexical_outside(path: &str, roots: &[String]) -> bool {
    let p = normalise(Path::new(path));
    !roots.iter().any(|r| p.starts_with(normalise(Path::new(r))))
}

fn normalise(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

fn roots(info: &SandboxInfo) -> Vec<String> {
    info.writable.iter().map(|r| r.path.clone()).collect()
}

fn roots_list(info: &SandboxInfo) -> String {
    info.writable.iter().map(|r| format!("{} ({})", r.path, r.template)).collect::<Vec<_>>().join(", ")
}

/// What follows the path in [`explain`]'s sentence.
const SANDBOX_REFUSED: &str = ": writing it was refused by the sandbox: it is outside every writable root";

/// The sentence for a write to `path` refused by the sandbox (Landlock: writes only beneath the roots).
pub fn explain(path: &str, info: &SandboxInfo) -> String {
    let dir = Path::new(path).parent().map_or_else(|| path.to_owned(), |d| d.display().to_string());
    format!(
        "{path}{SANDBOX_REFUSED} of policy '{}' — {} — \
         and Landlock refuses writes anywhere else (reads are not restricted). Write beneath one of those roots \
         (TMPDIR is {}), or open a session with that directory as an extra root: session.open {{\"writable\": \
         [\"{dir}\"]}}, which the server allows when started with `heddle up --allow-writable {dir}`",
        info.policy,
        roots_list(info),
        info.tmp
    )
}

/// The sentence for a job whose sockets the network-off filter refused (`Event::NetworkRefused`).
pub fn explain_network(count: u32, families: &[String], info: Option<&SandboxInfo>) -> String {
    let policy = info.map_or_else(|| "the session's".to_owned(), |i| format!("'{}'", i.policy));
    format!(
        "the network is off for this session (policy {policy}): the sandbox's seccomp filter refused {count} \
         socket call(s) of this job ({}) with EPERM, so name lookups, connections and listening sockets fail, \
         on loopback (127.0.0.1) too (\"Could not resolve host\", pip's retries, a dev server's \
         PermissionError). Nothing inside this session turns it on: a session opened with the network on can \
         reach it, which the user or operator starts (`heddle --session NEW --network run …`, `heddle mcp \
         --network`, HTTP `/mcp?network=true`, or session.open {{\"network\": true}})",
        families.join(", ")
    )
}

/// [`explain_network`] for a job that exited 0 (nothing failed that it could see, or a `;` or a pipe hid
/// it): the same facts and the switch, without the list of symptoms.
pub fn explain_network_briefly(count: u32, families: &[String]) -> String {
    format!(
        "the network is off for this session: the sandbox refused {count} socket call(s) ({}) with EPERM; \
         a session opened with the network on can reach it (`heddle --session NEW --network run …`, \
         session.open {{\"network\": true}})",
        families.join(", ")
    )
}

/// Words that tie a failure to a pseudo-terminal, in the output or the command (`os.openpty()`,
/// `pty.spawn`, `openpty failed`, a traceback through `pty.py`, pexpect).
const PTY_WORDS: [&str; 9] =
    ["pty", "ptys", "openpty", "forkpty", "ptmx", "unlockpt", "posix_openpt", "pexpect", "ptyprocess"];
/// Phrases of the same in error lines (`script: failed to create pseudo-terminal`).
const PTY_PHRASES: [&str; 3] = ["pseudo-terminal", "pseudo terminal", "pseudoterminal"];
/// Programs that open a pseudo-terminal of their own, named as a word of the command.
const PTY_PROGRAMS: [&str; 3] = ["script", "expect", "unbuffer"];

fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).filter(|w| !w.is_empty())
}

/// The sentence for a job that failed on a refused pseudo-terminal: the session's policy refuses jobs
/// their own ([`shm_proto::msg::PTYS_DENIED`] in the worker's report), the job ended non-zero with a
/// refused-access line, and that output or the command speaks of a pseudo-terminal (the kernel answers
/// `EPERM` without telling the worker, so the output is the witness). `None` otherwise.
pub fn explain_ptys(cmd: &str, output: &str, info: &SandboxInfo) -> Option<String> {
    if !info.seccomp_denied.iter().any(|d| d == shm_proto::msg::PTYS_DENIED) {
        return None;
    }
    let lower = output.to_ascii_lowercase();
    if !DENIALS.iter().any(|d| lower.contains(d)) {
        return None;
    }
    let cmd = cmd.to_ascii_lowercase();
    let in_cmd = words(&cmd).any(|w| PTY_WORDS.contains(&w) || PTY_PROGRAMS.contains(&w));
    let in_output = words(&lower).any(|w| PTY_WORDS.contains(&w)) || PTY_PHRASES.iter().any(|p| lower.contains(p));
    if !(in_cmd || in_output) {
        return None;
    }
    Some(format!(
        "pseudo-terminals are refused to this session's jobs by policy '{}' ([seccomp.ptys] deny = true): a \
         job cannot unlock one it opens (ioctl TIOCSPTLCK answers EPERM), so `script`, `expect`, `unbuffer` \
         and os.openpty() fail with \"Operation not permitted\". Run the program as a terminal job instead — \
         run {{\"tty\": {{\"rows\": 24, \"cols\": 80}}}}, whose terminal the worker opens — or open a \
         session that allows them: session.open {{\"ptys\": true}}",
        info.policy
    ))
}

/// Words of a refused access in tools' errors (matched case-insensitively): libc's strings and the
/// errno names Node (npm), Python and Rust print.
const DENIALS: [&str; 6] =
    ["permission denied", "operation not permitted", "read-only file system", "eacces", "eperm", "erofs"];

/// Sentences for the paths named on permission-error lines of `output`: each is checked against the
/// rules the kernel enforces ([`crate::sessions::refusal::why`]); a path neither layer refuses is left out.
pub fn explain_refusals(
    output: &str,
    cwd: &str,
    info: &SandboxInfo,
    user: Option<&crate::sessions::refusal::JobUser>,
) -> Vec<String> {
    let mut seen = Vec::new();
    let mut out = Vec::new();
    for line in output.lines().filter(|l| {
        let l = l.to_ascii_lowercase();
        DENIALS.iter().any(|d| l.contains(d))
    }) {
        for cand in candidates(line) {
            let abs = normalise(&Path::new(cwd).join(&cand));
            if seen.contains(&abs) || out.len() >= 8 {
                continue;
            }
            seen.push(abs.clone());
            out.extend(crate::sessions::refusal::why(&abs, info, user));
        }
    }
    // The sandbox's sentence is said in full once; a second path refused for the same reason is named
    // with what would allow it.
    let mut said = false;
    for x in &mut out {
        let Some((path, _)) = x.split_once(SANDBOX_REFUSED) else { continue };
        // A sentence that also names the file's own permissions stays whole: a root would not do.
        if std::mem::replace(&mut said, true) && !x.contains(" (its file permissions refuse ") {
            let dir = Path::new(path).parent().map_or_else(|| path.to_owned(), |d| d.display().to_string());
            *x = format!(
                "{path}: refused by the sandbox as well (outside every writable root, as above); \
                 session.open {{\"writable\": [\"{dir}\"]}} would allow it where the server allows that \
                 directory (`heddle up --allow-writable {dir}`)"
            );
        }
    }
    out
}

/// Path-like pieces of an error line: quoted strings, and `: `-separated fields starting with `/`, `./`
/// or `../`, each cut at a `, ` that follows it (`…/serde, error` is `…/serde`) and stripped of
/// trailing punctuation.
fn candidates(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut push = |c: &str| {
        let c = c.split(", ").next().unwrap_or(c).trim_end_matches([',', ';', ':', '.', ')']);
        if c.contains('/') && !c.contains("://") && !out.iter().any(|o| o == c) {
            out.push(c.to_owned());
        }
    };
    for field in line.split(": ") {
        let f = field.trim();
        for q in ['\'', '"', '`', '‘', '’'] {
            let parts: Vec<&str> = f.split(q).collect();
            for inner in parts.iter().skip(1).step_by(2) {
                push(inner.trim_end_matches(['\'', '’']));
            }
        }
        if f.starts_with('/') || f.starts_with("./") || f.starts_with("../") {
            push(f);
        }
    }
    out
}

/// Programs whose operands are written or deleted.
const WRITERS: [&str; 7] = ["rm", "rmdir", "touch", "mkdir", "tee", "truncate", "shred"];

/// Warnings for absolute paths outside the roots that `cmd` plainly writes or deletes.
pub fn preflight(cmd: &str, info: &SandboxInfo) -> Vec<String> {
    let roots = roots(info);
    let mut hits: Vec<String> = Vec::new();
    for simple in cmd.split([';', '&', '|', '\n']) {
        let words: Vec<&str> = simple.split_whitespace().collect();
        let mut i = 0;
        while i < words.len() {
            let w = words[i].trim_matches(['\'', '"']);
            let target = if let Some(t) = w.strip_prefix(">>").or_else(|| w.strip_prefix('>')) {
                if t.is_empty() {
                    i += 1;
                    words.get(i).map(|s| s.trim_matches(['\'', '"']))
                } else {
                    Some(t)
                }
            } else if words.first().is_some_and(|p| WRITERS.contains(&p.rsplit('/').next().unwrap_or(p))) && i > 0 {
                Some(w)
            } else {
                None
            };
            if let Some(t) = target.filter(|t| t.starts_with('/') && lexical_outside(t, &roots)) {
                if !hits.iter().any(|h| h == t) && !t.starts_with("/dev/") {
                    hits.push(t.to_owned());
                }
            }
            i += 1;
        }
    }
    hits.iter()
        .map(|t| {
            format!(
                "preflight: this command writes or deletes {t}, which is outside every writable root of policy '{}' \
                 ({}); the sandbox will refuse it",
                info.policy,
                roots_list(info)
            )
        })
        .collect()
}

/// The session's environment with the call's entries on top (a call's entry replaces the session's).
pub(crate) fn merge_env(session: &[(String, String)], call: Vec<(String, String)>) -> Vec<(String, String)> {
    let mut all: BTreeMap<String, String> = session.iter().cloned().collect();
    all.extend(call);
    all.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use shm_proto::msg::RootInfo;

    fn info() -> SandboxInfo {
        SandboxInfo {
            policy: "workspace".into(),
            network: false,
            landlock_abi: 6,
            landlock_status: "fully_enforced".into(),
            landlock_rights: vec![],
            landlock_scopes: vec![],
            landlock_require: "best_effort".into(),
            writable: vec![RootInfo { path: "/p".into(), template: "{project}".into(), reason: "r".into() }],
            skipped: vec![],
            seccomp_denied: vec![],
            seccomp_installed: true,
            worker_confined: true,
            tmp: "/t".into(),
            home: "/h".into(),
            home_made: false,
            refusal: None,
        }
    }

    #[test]
    fn a_refused_pty_is_explained_only_where_the_policy_refuses_them() {
        let eperm = "Traceback (most recent call last):\n  File \"<string>\", line 1, in <module>\n\
                     PermissionError: [Errno 1] Operation not permitted\n";
        let script = "script: failed to create pseudo-terminal: Operation not permitted\n";
        let py = "python3 -c 'import os; os.openpty()'";
        assert_eq!(explain_ptys(py, eperm, &info()), None, "the policy allows them");
        let mut refused = info();
        refused.seccomp_denied.push(shm_proto::msg::PTYS_DENIED.into());
        let why = explain_ptys(py, eperm, &refused).expect("the command opens a pty");
        assert!(why.contains("policy 'workspace' ([seccomp.ptys] deny = true)") && why.contains("\"tty\""), "{why}");
        assert!(explain_ptys("script -qc make /dev/null", script, &refused).is_some());
        assert!(explain_ptys("unbuffer make", "make: Operation not permitted\n", &refused).is_some());
        assert_eq!(explain_ptys("touch /etc/x", "touch: /etc/x: Permission denied\n", &refused), None, "no pty");
        assert_eq!(explain_ptys(py, "done\n", &refused), None, "no refusal");
        assert_eq!(explain_ptys("typescript-check", "x: Operation not permitted\n", &refused), None);
        assert_eq!(explain_ptys("[ -n \"$empty\" ]", "x: Operation not permitted\n", &refused), None);
    }

    #[test]
    fn refusals_name_outside_paths_only() {
        let out = "bash: line 1: /etc/heddle-test: Permission denied\ntouch: cannot touch '/p/ok': Permission denied\n\
                   touch: cannot touch '../../x/y': Permission denied\nmkdir: cannot create directory ‘/srv/a’: Read-only file system\n";
        let got = explain_refusals(out, "/p/sub", &info(), None);
        assert_eq!(got.len(), 3, "{got:?}");
        assert!(got[0].starts_with("/etc/heddle-test: writing it was refused by the sandbox"), "{}", got[0]);
        assert!(got[0].contains("--allow-writable /etc") && !got[0].contains("profile that"), "{}", got[0]);
        assert!(got[0].contains("/p ({project})"));
        assert!(got[1].starts_with("/x/y: "), "{}", got[1]);
        assert!(got[2].starts_with("/srv/a"), "{}", got[2]);
    }

    #[test]
    fn a_path_is_cut_at_its_comma_and_npm_eacces_is_a_denial() {
        let line = "error: failed to create directory `/srv/reg/serde`, error: Permission denied (os error 13)";
        assert_eq!(candidates(line), ["/srv/reg/serde"]);
        let got = explain_refusals("Error: EACCES: permission denied, mkdir '/nonexistent'\n", "/p", &info(), None);
        assert_eq!(got.len(), 1, "{got:?}");
        assert!(got[0].starts_with("/nonexistent: writing it was refused"), "{got:?}");
    }

    #[test]
    fn preflight_sees_redirections_and_rm_outside_the_roots() {
        let w = preflight("echo x > /etc/a; rm -rf /p/build /var/b && cat y >>/p/ok 2>/dev/null | tee /tmp/z", &info());
        let named: Vec<&str> = w.iter().map(|s| s.split_whitespace().nth(6).unwrap()).collect();
        assert_eq!(named, ["/etc/a,", "/var/b,", "/tmp/z,"], "{w:?}");
        assert!(preflight("ls /etc; cat /etc/passwd", &info()).is_empty());
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_commands_and_output_never_panic(s in "\\PC*", t in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256)) {
            let _ = preflight(&s, &info());
            let text = String::from_utf8_lossy(&t);
            let _ = explain_refusals(&format!("{text}: Permission denied\n{s}"), "/p", &info(), None);
            let _ = lexical_outside(&s, &["/p".into()]);
        }
    }

    #[test]
    fn garbage_never_panics() {
        for s in ["", ">", "rm", "'", "a: '", "x: ‘", "\0\0>>"] {
            let _ = preflight(s, &info());
            let _ = explain_refusals(&format!("{s}: Permission denied"), "/", &info(), None);
        }
    }
}
