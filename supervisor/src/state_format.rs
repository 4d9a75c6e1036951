//! The state directory's format marker: `<state-dir>/state-format` says `heddle state format N`. At start
//! the supervisor reads it before the front opens anything: an older format is migrated step by step
//! ([`MIGRATIONS`]) and the marker rewritten; a newer one (a downgrade) or a marker heddle did not write
//! refuses the start with a sentence, changing nothing. The database's schema has its own migrations,
//! run by the front (`front/src/storage/db.rs`); whatever changes the database schema, `session.json`, the
//! journals, the job logs or the kept-output logs in a way an older heddle cannot read bumps
//! [`CURRENT`], so that older heddle refuses here instead of starting a front that fails.
//!
//! Formats:
//! - 0: no marker (every build before it): `heddle.db` (schema 1), `sessions/<name>/{session.json,
//!   journal, jobs/<N>.log, jobs/<N>.lines}`, `kept/<name>.log`.
//! - 1: format 0's files unchanged, plus the marker.
//! - 2: the journals may hold `Entry::Reported` and `Entry::State` (which jobs' ends were shown; the
//!   shell-state record), entries a format-1 front cannot decode: it would stop reading a journal at the
//!   first one and lose the jobs after it. Nothing to rewrite.
//! - 3: the journals may hold `Entry::RevivedAt` (a worker replacement with the time its jobs were lost),
//!   which a format-2 front cannot decode. Nothing to rewrite.
//!
//! ```
//! let dir = tempfile::tempdir().unwrap();
//! assert_eq!(supervisor::state_format::prepare(dir.path()).unwrap(), None);
//! assert_eq!(supervisor::state_format::read(dir.path()).unwrap(), Some(supervisor::state_format::CURRENT));
//! ```

use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// The format this heddle writes.
pub const CURRENT: u32 = 3;
/// The marker's file name in the state directory.
pub const MARKER: &str = "state-format";
const PREFIX: &str = "heddle state format ";
/// `MIGRATIONS[i]` brings a state directory from format `i` to `i + 1`.
type Migration = fn(&Path) -> io::Result<()>;
const MIGRATIONS: [Migration; CURRENT as usize] = [
    // 0 → 1: the files are the same; the marker, written after the last step, is what is new.
    |_| Ok(()),
    // 1 → 2: format-1 journals are read as they are; new entries are only appended.
    |_| Ok(()),
    // 2 → 3: likewise.
    |_| Ok(()),
];
/// What makes a directory without a marker one of format 0 rather than a new, empty one.
const FORMAT_0_FILES: [&str; 3] = ["heddle.db", "sessions", "kept"];

/// Why a state directory cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FormatError {
    #[error("the state directory {dir} was written by a newer heddle (state format {found}; this heddle reads formats up to {CURRENT}); start that newer heddle again, or give this one another --state-dir; nothing in {dir} was changed")]
    Newer { dir: String, found: u32 },
    #[error("{dir}/{MARKER} should say `{PREFIX}N` but says {text:?}; heddle did not write it: restore it, or move the directory aside and start with another --state-dir")]
    Garbled { dir: String, text: String },
    #[error("cannot migrate the state directory {dir} from format {from} to {to}")]
    Migrate {
        dir: String,
        from: u32,
        to: u32,
        #[source]
        source: io::Error,
    },
    #[error("cannot read or write {dir}/{MARKER}")]
    Io {
        dir: String,
        #[source]
        source: io::Error,
    },
}

/// The marker's format, `None` when there is no marker.
pub fn read(dir: &Path) -> Result<Option<u32>, FormatError> {
    let io_err = |source| FormatError::Io { dir: dir.display().to_string(), source };
    let f = match std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(dir.join(MARKER)) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err(e)),
    };
    let mut bytes = Vec::new();
    f.take(256).read_to_end(&mut bytes).map_err(io_err)?;
    parse(&String::from_utf8_lossy(&bytes)).map(Some).ok_or_else(|| FormatError::Garbled {
        dir: dir.display().to_string(),
        text: String::from_utf8_lossy(&bytes).into(),
    })
}

/// `heddle state format N` (one line) → N.
fn parse(text: &str) -> Option<u32> {
    let n = text.strip_suffix('\n').unwrap_or(text).strip_prefix(PREFIX)?;
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    n.parse().ok()
}

/// Bring `dir` to [`CURRENT`]: a new directory gets the marker, an older format is migrated, a newer
/// or garbled one is refused. Returns the format it was migrated from, if any.
pub fn prepare(dir: &Path) -> Result<Option<u32>, FormatError> {
    let found = match read(dir)? {
        Some(n) => n,
        None if FORMAT_0_FILES.iter().any(|f| dir.join(f).exists()) => 0,
        None => return write(dir).map(|()| None),
    };
    if found > CURRENT {
        return Err(FormatError::Newer { dir: dir.display().to_string(), found });
    }
    if found == CURRENT {
        return Ok(None);
    }
    for (from, step) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        step(dir).map_err(|source| FormatError::Migrate {
            dir: dir.display().to_string(),
            from: from as u32,
            to: from as u32 + 1,
            source,
        })?;
    }
    write(dir)?;
    Ok(Some(found))
}

/// Write the marker (root's, 0644) by rename, so it is never seen half written.
fn write(dir: &Path) -> Result<(), FormatError> {
    let tmp = dir.join(format!(".{MARKER}.tmp"));
    let _ = std::fs::remove_file(&tmp);
    (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)?;
        f.write_all(format!("{PREFIX}{CURRENT}\n").as_bytes())?;
        std::fs::rename(&tmp, dir.join(MARKER))
    })()
    .map_err(|source| FormatError::Io { dir: dir.display().to_string(), source })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_new_directory_gets_the_marker_and_an_unmarked_one_with_data_is_format_0() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("heddle-up.log"), "x").unwrap();
        assert_eq!(prepare(dir.path()).unwrap(), None, "a log alone is not state");
        let old = tempfile::tempdir().unwrap();
        std::fs::create_dir(old.path().join("sessions")).unwrap();
        assert_eq!(prepare(old.path()).unwrap(), Some(0));
        assert_eq!(read(old.path()).unwrap(), Some(CURRENT));
        assert_eq!(prepare(old.path()).unwrap(), None, "the second start finds it current");
    }

    #[test]
    fn a_newer_or_garbled_marker_is_refused_with_a_sentence_and_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(MARKER), "heddle state format 7\n").unwrap();
        let e = prepare(dir.path()).unwrap_err().to_string();
        assert!(e.contains("newer heddle") && e.contains("format 7") && e.contains("nothing in"), "{e}");
        std::fs::write(dir.path().join(MARKER), "v2").unwrap();
        let e = prepare(dir.path()).unwrap_err().to_string();
        assert!(e.contains("heddle did not write it"), "{e}");
        assert_eq!(std::fs::read(dir.path().join(MARKER)).unwrap(), b"v2");
    }

    proptest! {
        #[test]
        fn garbage_markers_parse_to_their_number_or_nothing(text in ".{0,64}|heddle state format [0-9]{0,12}\n?\n?") {
            if let Some(n) = parse(&text) {
                let body = text.strip_suffix('\n').unwrap_or(&text);
                prop_assert_eq!(body.strip_prefix(PREFIX).and_then(|d| d.parse::<u32>().ok()), Some(n));
            }
        }
    }
}
