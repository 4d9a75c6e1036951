//! The job environment: an allowlist of the launching process's variables, a few forced values, then
//! the session's explicit entries on top.
//!
//! Nothing outside the allowlist reaches a job (no tokens, no `LD_PRELOAD`, no proxy settings unless the
//! session sets them). The result is sorted by name and holds each name once, so the same inputs always
//! give the same environment.
//!
//! ```
//! let worker = vec![("PATH".to_string(), "/usr/bin:/bin".to_string()), ("AWS_SECRET".into(), "x".into())];
//! let env = launcher::job_env(&worker, &[("FOO".into(), "bar".into())]);
//! assert!(env.contains(&("PATH".into(), "/usr/bin:/bin".into())));
//! assert!(env.contains(&("FOO".into(), "bar".into())));
//! assert!(!env.iter().any(|(k, _)| k == "AWS_SECRET"));
//! ```

use std::collections::BTreeMap;

/// Variables copied from the launching process when set.
pub const ALLOWED: &[&str] =
    &["PATH", "HOME", "LANG", "TMPDIR", "USER", "LOGNAME", "XDG_RUNTIME_DIR", "DBUS_SESSION_BUS_ADDRESS"];

/// Prefixes of variables copied from the launching process (the locale categories).
pub const ALLOWED_PREFIXES: &[&str] = &["LC_"];

/// Values every job gets (the session may still override them).
pub const FORCED: &[(&str, &str)] = &[("TERM", "dumb"), ("NO_COLOR", "1"), ("PAGER", "cat"), ("GIT_PAGER", "cat")];

/// `TMPDIR` when the launching process has none.
pub const DEFAULT_TMPDIR: &str = "/tmp";

fn allowed(name: &str) -> bool {
    ALLOWED.contains(&name) || ALLOWED_PREFIXES.iter().any(|p| name.len() > p.len() && name.starts_with(p))
}

/// Build a job's environment from the launching process's `worker_env` and the session's `session_env`.
///
/// Order of precedence, lowest first: allowlisted `worker_env` entries ([`ALLOWED`], `LC_*`), then
/// `TMPDIR=/tmp` when unset or empty, then [`FORCED`], then `session_env` (a later duplicate wins).
pub fn job_env(worker_env: &[(String, String)], session_env: &[(String, String)]) -> Vec<(String, String)> {
    let mut env: BTreeMap<&str, &str> = BTreeMap::new();
    for (k, v) in worker_env {
        if allowed(k) {
            env.insert(k, v);
        }
    }
    if env.get("TMPDIR").is_none_or(|v| v.is_empty()) {
        env.insert("TMPDIR", DEFAULT_TMPDIR);
    }
    for (k, v) in FORCED {
        env.insert(k, v);
    }
    for (k, v) in session_env {
        env.insert(k, v);
    }
    env.into_iter().map(|(k, v)| (k.to_owned(), v.to_owned())).collect()
}

/// The environment for a job of a session with a policy: the variables of `worker_env` the profile's
/// `env.allow` rules let through, the profile's forced `env.set` values, `TMPDIR` when still unset, then the
/// session's own entries on top. The profile, not the built-in allowlist of [`job_env`], decides.
pub fn policy_env(
    policy: &policies::EnvPolicy,
    worker_env: &[(String, String)],
    session_env: &[(String, String)],
) -> Vec<(String, String)> {
    let mut env: BTreeMap<String, String> = policy.filter(worker_env.iter().cloned()).into_iter().collect();
    if env.get("TMPDIR").is_none_or(|v| v.is_empty()) {
        env.insert("TMPDIR".to_owned(), DEFAULT_TMPDIR.to_owned());
    }
    for (k, v) in session_env {
        env.insert(k.clone(), v.clone());
    }
    env.into_iter().collect()
}

/// This process's environment, skipping entries that are not UTF-8 (they cannot be allowlisted by name,
/// and jobs never see them).
pub fn process_env() -> Vec<(String, String)> {
    std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_profile_decides_a_sessions_job_environment() {
        let policy = policies::Policy::builtin("workspace").unwrap();
        let worker = pairs(&[
            ("PATH", "/usr/bin"),
            ("XDG_CONFIG_HOME", "/h/.config"),
            ("AWS_SECRET_ACCESS_KEY", "s3cr3t"),
            ("TERM", "xterm-256color"),
        ]);
        let env = policy_env(&policy.env, &worker, &pairs(&[("FOO", "bar")]));
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("PATH"), Some("/usr/bin"));
        assert_eq!(get("XDG_CONFIG_HOME"), Some("/h/.config"), "the profile allows every XDG_* variable");
        assert_eq!(get("AWS_SECRET_ACCESS_KEY"), None);
        assert_eq!(get("TERM"), Some("dumb"), "forced by the profile");
        assert_eq!(get("TMPDIR"), Some(DEFAULT_TMPDIR));
        assert_eq!(get("FOO"), Some("bar"));
    }

    fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn get<'a>(env: &'a [(String, String)], k: &str) -> Option<&'a str> {
        env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str())
    }

    #[test]
    fn keeps_only_allowlisted_worker_variables() {
        let worker = pairs(&[
            ("PATH", "/bin"),
            ("HOME", "/home/a"),
            ("LANG", "C.UTF-8"),
            ("LC_ALL", "C"),
            ("LC_", "bare prefix is not a locale category"),
            ("USER", "a"),
            ("LOGNAME", "a"),
            ("XDG_RUNTIME_DIR", "/run/user/1"),
            ("DBUS_SESSION_BUS_ADDRESS", "unix:path=/x"),
            ("GITHUB_TOKEN", "ghp_secret"),
            ("LD_PRELOAD", "/evil.so"),
            ("SSH_AUTH_SOCK", "/tmp/agent"),
        ]);
        let env = job_env(&worker, &[]);
        let names: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            names,
            [
                "DBUS_SESSION_BUS_ADDRESS",
                "GIT_PAGER",
                "HOME",
                "LANG",
                "LC_ALL",
                "LOGNAME",
                "NO_COLOR",
                "PAGER",
                "PATH",
                "TERM",
                "TMPDIR",
                "USER",
                "XDG_RUNTIME_DIR"
            ]
        );
        assert_eq!(get(&env, "LC_ALL"), Some("C"));
    }

    #[test]
    fn forces_terminal_and_pager_values() {
        let env = job_env(&pairs(&[("TERM", "xterm-256color"), ("PAGER", "less"), ("NO_COLOR", "")]), &[]);
        assert_eq!(get(&env, "TERM"), Some("dumb"));
        assert_eq!(get(&env, "NO_COLOR"), Some("1"));
        assert_eq!(get(&env, "PAGER"), Some("cat"));
        assert_eq!(get(&env, "GIT_PAGER"), Some("cat"));
    }

    #[test]
    fn tmpdir_defaults_to_tmp_and_keeps_a_set_value() {
        assert_eq!(get(&job_env(&[], &[]), "TMPDIR"), Some("/tmp"));
        assert_eq!(get(&job_env(&pairs(&[("TMPDIR", "")]), &[]), "TMPDIR"), Some("/tmp"));
        assert_eq!(get(&job_env(&pairs(&[("TMPDIR", "/var/tmp")]), &[]), "TMPDIR"), Some("/var/tmp"));
    }

    #[test]
    fn session_entries_win_and_may_add_anything() {
        let worker = pairs(&[("PATH", "/bin"), ("SECRET", "s")]);
        let session =
            pairs(&[("PATH", "/opt/bin:/bin"), ("TERM", "xterm"), ("SECRET", "chosen"), ("A", "1"), ("A", "2")]);
        let env = job_env(&worker, &session);
        assert_eq!(get(&env, "PATH"), Some("/opt/bin:/bin"));
        assert_eq!(get(&env, "TERM"), Some("xterm"));
        assert_eq!(get(&env, "SECRET"), Some("chosen"));
        assert_eq!(get(&env, "A"), Some("2"));
        assert_eq!(env.iter().filter(|(k, _)| k == "A").count(), 1);
    }

    #[test]
    fn empty_inputs_give_only_forced_values_and_tmpdir() {
        let env = job_env(&[], &[]);
        assert_eq!(
            env,
            pairs(&[("GIT_PAGER", "cat"), ("NO_COLOR", "1"), ("PAGER", "cat"), ("TERM", "dumb"), ("TMPDIR", "/tmp")])
        );
    }
}
