//! Where the control socket and the state directory live by default.
//!
//! Socket: `$HEDDLE_SOCKET`, else `$XDG_RUNTIME_DIR/heddle/heddle.sock`, else `/run/heddle/heddle.sock` for
//! root and `/tmp/heddle-<uid>/heddle.sock` for others. State: `$HEDDLE_STATE_DIR`, else
//! `/var/lib/heddle` for root, else `$XDG_STATE_HOME/heddle` or `~/.local/state/heddle`.

use std::path::PathBuf;

fn env_path(key: &str) -> Option<PathBuf> {
    std::env::var_os(key).filter(|v| !v.is_empty()).map(PathBuf::from)
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// The control socket a client talks to when none is named.
pub fn default_socket() -> PathBuf {
    if let Some(p) = env_path("HEDDLE_SOCKET") {
        return p;
    }
    if let Some(dir) = env_path("XDG_RUNTIME_DIR") {
        return dir.join("heddle/heddle.sock");
    }
    if is_root() {
        return PathBuf::from("/run/heddle/heddle.sock");
    }
    PathBuf::from(format!("/tmp/heddle-{}/heddle.sock", nix::unistd::geteuid()))
}

/// The state directory `heddle up` uses when none is named.
pub fn default_state_dir() -> PathBuf {
    if let Some(p) = env_path("HEDDLE_STATE_DIR") {
        return p;
    }
    if is_root() {
        return PathBuf::from("/var/lib/heddle");
    }
    if let Some(p) = env_path("XDG_STATE_HOME") {
        return p.join("heddle");
    }
    env_path("HOME").unwrap_or_else(|| PathBuf::from("/tmp")).join(".local/state/heddle")
}
