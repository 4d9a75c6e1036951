//! Why a path was refused, from the rules the kernel enforces rather than from the error's wording.
//!
//! A job's error line only names the path (and says "Permission denied", `EACCES`, …). Two layers can
//! refuse it, and the kernel checks them in this order: the file permissions (owner, group, mode, for
//! the job's uid — jobs never run as root), then the session's Landlock ruleset, which handles writes
//! only (reads and execution are left to the permissions) and allows them beneath the resolved
//! writable roots. [`why`] replays both on the path as it is now: the first directory on the way the
//! job's uid may not enter, then the read and write bits of the path (or of its nearest existing
//! directory, for a path that does not exist yet), then the roots. Each sentence names the path, the
//! access refused (enter, read, write, create), the rule that refused it and a remedy that exists.
//!
//! The front reads the metadata with its own uid: a directory it cannot enter either gives no answer
//! for what lies beneath (then only the roots are checked).

use shm_proto::msg::SandboxInfo;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The uid and groups a session's jobs run as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobUser {
    pub uid: u32,
    pub gids: Vec<u32>,
}

impl JobUser {
    /// The uid and groups of the session's worker (its jobs inherit them), from `/proc/PID/status`.
    pub fn of_worker(pid: u32, uid: u32) -> JobUser {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let field = |name: &str| -> Vec<u32> {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|rest| rest.split_whitespace().filter_map(|n| n.parse().ok()).collect())
                .unwrap_or_default()
        };
        let mut gids = field("Groups:");
        gids.extend(field("Gid:").first());
        JobUser { uid, gids }
    }

    /// `uid 65534 (nobody)`.
    pub fn name(&self) -> String {
        match nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(self.uid)) {
            Ok(Some(u)) => format!("uid {} ({})", self.uid, u.name),
            _ => format!("uid {}", self.uid),
        }
    }

    /// May this user do `want` (4 read, 2 write, 1 enter/execute) to a file of this metadata?
    fn may(&self, m: &std::fs::Metadata, want: u32) -> bool {
        if self.uid == 0 {
            return true;
        }
        let mode = m.mode();
        let bits = if m.uid() == self.uid {
            mode >> 6
        } else if self.gids.contains(&m.gid()) {
            mode >> 3
        } else {
            mode
        };
        bits & want == want
    }
}

/// Why jobs run as this uid, for a sentence.
pub fn uid_reason(user: &JobUser) -> String {
    format!(
        "jobs of this session run as {}, not as the user who opened it: heddle never runs a job as root (a \
         root-opened session's jobs run as nobody, or as a uid of their own with `heddle up --session-uids`)",
        user.name()
    )
}

fn owner_mode(p: &Path, m: &std::fs::Metadata) -> String {
    format!("{} is owned by uid {} with mode {:04o}", p.display(), m.uid(), m.mode() & 0o7777)
}

/// The sentence for `path` (absolute, normalised), or `None` when neither layer refuses it as it is now.
pub fn why(path: &Path, info: &SandboxInfo, user: Option<&JobUser>) -> Option<String> {
    let shown = path.display();
    if let Some(user) = user {
        // 1. A directory on the way it may not enter.
        if let Some((dir, m)) = path.parent().and_then(|p| first_closed(p, user)) {
            return Some(format!(
                "{shown}: refused by file permissions, not by the sandbox: {} cannot enter {} ({}), so it can \
                 neither read, write nor run anything beneath it; {}. Put what the job needs where that uid \
                 can reach it (the project, TMPDIR {}, or a world-readable place such as /usr/local), or \
                 let others in with `chmod o+x {}` if that is safe",
                user.name(),
                dir.display(),
                owner_mode(&dir, &m),
                uid_reason(user),
                info.tmp,
                dir.display()
            ));
        }
        // 2. The path's own bits, or its nearest existing directory's for a path to be created.
        if let Ok(m) = std::fs::metadata(path) {
            let inside = !crate::sessions::sandbox::lexical_outside(&path.to_string_lossy(), &roots(info));
            // Outside the roots a write is the sandbox's refusal whatever the bits (step 3).
            let (r, w) = (user.may(&m, 4), user.may(&m, 2) || !inside);
            if !r || !w {
                let access = match (r, w) {
                    (false, false) => "read or write",
                    (false, true) => "read",
                    _ => "write",
                };
                return Some(format!(
                    "{shown}: refused by file permissions, not by the sandbox: {} may not {access} it ({}); {}. \
                     Work on a copy in the project or TMPDIR {}, or have its owner grant access (chmod/chown)",
                    user.name(),
                    owner_mode(path, &m),
                    uid_reason(user),
                    info.tmp
                ));
            }
        } else if let Some((dir, m)) = nearest_existing(path) {
            let inside = !crate::sessions::sandbox::lexical_outside(&dir.to_string_lossy(), &roots(info));
            if inside && !(user.may(&m, 2) && user.may(&m, 1)) {
                return Some(format!(
                    "{shown}: could not be created: file permissions, not the sandbox, refuse it: {} may not \
                     write in {} ({}); {}. Create it beneath a directory that uid owns (the project, TMPDIR {})",
                    user.name(),
                    dir.display(),
                    owner_mode(&dir, &m),
                    uid_reason(user),
                    info.tmp
                ));
            }
        }
    }
    // 3. The sandbox: Landlock refuses writes outside the roots (it leaves reads alone).
    if crate::sessions::sandbox::lexical_outside(&path.to_string_lossy(), &roots(info)) {
        let mut s = crate::sessions::sandbox::explain(&shown.to_string(), info);
        if let (Some(user), Ok(m)) = (user, std::fs::metadata(path)) {
            if !user.may(&m, 2) {
                s.push_str(&format!(
                    " (its file permissions refuse {} as well: {})",
                    user.name(),
                    owner_mode(path, &m)
                ));
            }
        }
        return Some(s);
    }
    None
}

/// The first directory on the way to `path` (itself included) that `user` may not enter, with its metadata.
fn first_closed(path: &Path, user: &JobUser) -> Option<(PathBuf, std::fs::Metadata)> {
    let mut dir = PathBuf::from("/");
    for comp in path.components().skip(1) {
        dir.push(comp);
        let m = std::fs::metadata(&dir).ok()?;
        if m.is_dir() && !user.may(&m, 1) {
            return Some((dir, m));
        }
    }
    None
}

/// Sentences for `X: command not found` lines when the cause may be the uid: directories of the PATH
/// heddle was started with (the front inherits it from `heddle up`) that the job's uid cannot enter, such
/// as a root user's `~/.cargo/bin`. Nothing when every such directory is open to it.
pub fn not_found(output: &str, user: &JobUser, server_path: &str) -> Vec<String> {
    let mut commands: Vec<&str> = Vec::new();
    for line in output.lines() {
        let Some(head) = line.trim_end().strip_suffix(": command not found") else { continue };
        let cmd = head.rsplit(": ").next().unwrap_or(head).trim();
        if !cmd.is_empty() && !cmd.contains(char::is_whitespace) && !commands.contains(&cmd) && commands.len() < 3 {
            commands.push(cmd);
        }
    }
    if commands.is_empty() || user.uid == 0 {
        return Vec::new();
    }
    let mut closed: Vec<String> = Vec::new();
    let mut why: Vec<String> = Vec::new();
    for dir in server_path.split(':').filter(|d| d.starts_with('/')) {
        if let Some((c, m)) = first_closed(Path::new(dir), user) {
            if !closed.iter().any(|d| d == dir) {
                closed.push(dir.to_owned());
            }
            let w = owner_mode(&c, &m);
            if !why.contains(&w) {
                why.push(w);
            }
        }
    }
    if closed.is_empty() {
        return Vec::new();
    }
    commands
        .iter()
        .map(|cmd| {
            format!(
                "{cmd}: command not found; if it is installed in {} ({}), jobs cannot see it: they run as {}, \
                 never as root. Install it where every uid can run it (/usr/local/bin, the project) or `chmod \
                 o+rx` those directories, then call it by its full path or add it to PATH",
                closed.join(", "),
                why.join("; "),
                user.name()
            )
        })
        .collect()
}

fn roots(info: &SandboxInfo) -> Vec<String> {
    info.writable.iter().map(|r| r.path.clone()).collect()
}

fn nearest_existing(path: &Path) -> Option<(PathBuf, std::fs::Metadata)> {
    path.ancestors().skip(1).find_map(|a| std::fs::metadata(a).ok().filter(|m| m.is_dir()).map(|m| (a.to_owned(), m)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_not_found_names_the_closed_path_directories() {
        let dir = tempfile::tempdir().unwrap();
        use std::os::unix::fs::PermissionsExt;
        let closed = dir.path().join("home");
        std::fs::create_dir_all(closed.join("bin")).unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o700)).unwrap();
        let user = JobUser { uid: 4245, gids: vec![4246] };
        let path = format!("/usr/bin:{}", closed.join("bin").display());
        let got = not_found("bash: line 1: cargo: command not found\n", &user, &path);
        assert_eq!(got.len(), 1, "{got:?}");
        assert!(got[0].starts_with("cargo: command not found; if it is installed in "), "{got:?}");
        assert!(got[0].contains("jobs cannot see it: they run as uid 4245"), "{got:?}");
        assert!(got[0].contains(&format!("{} is owned by uid 0 with mode 0700", closed.display())), "{got:?}");
        assert!(not_found("bash: line 1: cargo: command not found\n", &user, "/usr/bin").is_empty());
        assert!(not_found("no such line\n", &user, &path).is_empty());
    }

    proptest::proptest! {
        #[test]
        fn garbage_output_never_panics(s in "\\PC*") {
            let user = JobUser { uid: 4245, gids: vec![] };
            let _ = not_found(&s, &user, "/usr/bin:/root/.cargo/bin");
            let _ = not_found(&format!("{s}: command not found"), &user, "/root/x");
        }
    }

    #[test]
    fn the_bits_follow_owner_then_group_then_others() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("f");
        std::fs::write(&f, "x").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o640)).unwrap();
        // Tests run as root, whose own checks always pass: the file gets an owner and group of its own.
        std::os::unix::fs::chown(&f, Some(4242), Some(4243)).unwrap();
        let m = std::fs::metadata(&f).unwrap();
        let owner = JobUser { uid: 4242, gids: vec![] };
        let group = JobUser { uid: 4244, gids: vec![4243] };
        let other = JobUser { uid: 4245, gids: vec![4246] };
        assert!(owner.may(&m, 6) && !owner.may(&m, 1));
        assert!(group.may(&m, 4) && !group.may(&m, 2));
        assert!(!other.may(&m, 4));
    }
}
