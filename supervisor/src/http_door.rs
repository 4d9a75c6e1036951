//! The HTTP door's privileged half: bind the TCP socket (`--http ADDR`) once, so the unprivileged front
//! needs no privilege for a low port and every front restarted takes the same socket over; and read the
//! bearer tokens (`--http-token-dir DIR`), which only root may read, into a memfd handed to each front
//! as it starts (so a restarted front sees tokens added since).
//!
//! A token file is taken when it is a regular file (not a symlink), mode 0600 or stricter, not empty;
//! its owner is the uid the token acts as. Others are skipped with a log line saying why. A bind that is
//! not loopback needs a token directory: without one nothing is started.
//!
//! ```
//! let dir = tempfile::tempdir().unwrap();
//! let f = dir.path().join("alice");
//! std::fs::write(&f, "a-long-enough-token-0123456789\n").unwrap();
//! std::fs::set_permissions(&f, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
//! let (text, skipped) = supervisor::http_door::read_tokens(dir.path()).unwrap();
//! assert!(text.ends_with(" a-long-enough-token-0123456789\n") && skipped.is_empty());
//! ```

use std::io::{self, Read, Seek, Write};
use std::net::{SocketAddr, TcpListener};
use std::os::fd::OwnedFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Tokens shorter than this are refused: they would be guessable.
pub const MIN_TOKEN_LEN: usize = 16;

/// The door as configured: its socket and where tokens come from.
#[derive(Debug)]
pub struct HttpDoor {
    pub listener: TcpListener,
    pub addr: SocketAddr,
    /// Tokens required: read from this directory at each front start.
    pub token_dir: Option<PathBuf>,
}

/// Bind `addr`. With a token directory every request needs a token (on loopback too); without one
/// requests act as the uid owning the client's socket, which only a loopback address can tell, so a
/// non-loopback address without a token directory is refused.
pub fn bind(addr: &str, token_dir: Option<&Path>) -> io::Result<HttpDoor> {
    let listener = TcpListener::bind(addr)?;
    let bound = listener.local_addr()?;
    if token_dir.is_none() && !bound.ip().is_loopback() {
        return Err(io::Error::other(format!(
            "{bound} is not a loopback address, so every request needs a bearer token: give --http-token-dir DIR (one file per user, mode 0600, owned by that user, holding the token)"
        )));
    }
    Ok(HttpDoor { listener, addr: bound, token_dir: token_dir.map(Path::to_owned) })
}

/// The tokens of `dir` as `UID TOKEN` lines, and a sentence per file skipped.
pub fn read_tokens(dir: &Path) -> io::Result<(String, Vec<String>)> {
    let mut text = String::new();
    let mut skipped = Vec::new();
    let mut names: Vec<_> = std::fs::read_dir(dir)?.filter_map(Result::ok).map(|e| e.path()).collect();
    names.sort();
    for path in names {
        match read_token(&path) {
            Ok((uid, token)) => text.push_str(&format!("{uid} {token}\n")),
            Err(why) => skipped.push(format!("skipping token file {}: {why}", path.display())),
        }
    }
    Ok((text, skipped))
}

fn read_token(path: &Path) -> Result<(u32, String), String> {
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| format!("cannot open it ({e}); it must be a regular file, not a symlink"))?;
    let meta = f.metadata().map_err(|e| e.to_string())?;
    if !meta.file_type().is_file() {
        return Err("it is not a regular file".into());
    }
    if meta.mode() & 0o077 != 0 {
        return Err(format!("its mode is {:o}; make it 0600 so only its owner reads it", meta.mode() & 0o777));
    }
    let mut s = String::new();
    (&mut f).take(4096).read_to_string(&mut s).map_err(|e| format!("cannot read it as text ({e})"))?;
    let token = s.trim();
    if token.len() < MIN_TOKEN_LEN || token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("its token must be one word of at least {MIN_TOKEN_LEN} characters"));
    }
    Ok((meta.uid(), token.to_owned()))
}

/// A memfd holding `text`, rewound, for the front's fd 6.
pub fn tokens_memfd(text: &str) -> io::Result<OwnedFd> {
    let fd = nix::sys::memfd::memfd_create(c"heddle-http-tokens", nix::sys::memfd::MFdFlags::MFD_CLOEXEC)?;
    let mut f = std::fs::File::from(fd);
    f.write_all(text.as_bytes())?;
    f.rewind()?;
    Ok(f.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn loose_files_and_short_tokens_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, body: &str, mode: u32| {
            let p = dir.path().join(name);
            std::fs::write(&p, body).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        };
        write("good", "0123456789abcdef-good\n", 0o600);
        write("loose", "0123456789abcdef-loose", 0o644);
        write("short", "short", 0o600);
        std::os::unix::fs::symlink(dir.path().join("good"), dir.path().join("link")).unwrap();
        let (text, skipped) = read_tokens(dir.path()).unwrap();
        let me = nix::unistd::geteuid().as_raw();
        assert_eq!(text, format!("{me} 0123456789abcdef-good\n"));
        assert_eq!(skipped.len(), 3, "{skipped:?}");
    }

    #[test]
    fn a_public_bind_needs_tokens() {
        assert!(bind("127.0.0.1:0", None).unwrap().token_dir.is_none());
        let e = bind("0.0.0.0:0", None).unwrap_err();
        assert!(e.to_string().contains("--http-token-dir"), "{e}");
        assert!(bind("0.0.0.0:0", Some(Path::new("/tokens"))).unwrap().token_dir.is_some());
    }
}
