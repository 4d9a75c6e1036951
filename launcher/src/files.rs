//! The files channel: write a job's files before its command starts, under the job's own Landlock
//! ruleset, each atomically (a temp file in the same directory, then `rename`).
//!
//! The writes happen in a short-lived forked child of the caller (the worker) that restricts itself with
//! the job's ruleset first, so the kernel decides what may be written exactly as it will for the job: a
//! file outside the writable roots fails with `EACCES` and the others are still written. Contents are
//! raw bytes (NUL bytes, invalid UTF-8, `$`, backticks and `EOF` lines round-trip exactly); the mode is
//! applied with `fchmod` (default `0644`), so the umask does not change it. Paths must be absolute.
//! Missing parent directories are created (mode `0777` less the worker's umask), under the same
//! ruleset, so a file in a new directory needs no `mkdir -p` first.
//!
//! ```no_run
//! use launcher::files::{write_files, FileSpec};
//! let files = [FileSpec { path: "/tmp/p/a.txt".into(), content: b"hi $HOME\n".to_vec(), mode: None }];
//! let out = write_files(None, &files);
//! assert!(out[0].is_ok());
//! ```

use crate::sys::FileWrite;
use std::ffi::CString;
use std::io;
use std::os::fd::BorrowedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// The mode of a file written without one.
pub const DEFAULT_MODE: u32 = 0o644;

/// One file to write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileSpec {
    pub path: PathBuf,
    pub content: Vec<u8>,
    pub mode: Option<u32>,
}

/// Why one file was not written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FileError {
    #[error("the path must be absolute")]
    Relative,
    #[error("the path contains a NUL byte")]
    Nul,
    #[error("mode {0:#o} is refused: files are written with permission bits only (at most 0o777), never setuid, setgid or sticky")]
    Mode(u32),
    #[error("writing it failed")]
    Io(#[source] io::Error),
}

/// Write `files` in order under `ruleset` (`None`: unrestricted); one result per file.
pub fn write_files(ruleset: Option<BorrowedFd<'_>>, files: &[FileSpec]) -> Vec<Result<(), FileError>> {
    let mut results: Vec<Option<Result<(), FileError>>> = Vec::with_capacity(files.len());
    let mut writes = Vec::new();
    let mut index = Vec::new();
    for (i, f) in files.iter().enumerate() {
        match prepare(f, i) {
            Ok(w) => {
                writes.push(w);
                index.push(i);
                results.push(None);
            }
            Err(e) => results.push(Some(Err(e))),
        }
    }
    if !writes.is_empty() {
        match crate::sys::write_files_confined(ruleset, &writes) {
            Ok(errnos) => {
                for (i, e) in index.iter().zip(errnos) {
                    results[*i] =
                        Some(if e == 0 { Ok(()) } else { Err(FileError::Io(io::Error::from_raw_os_error(e))) });
                }
            }
            Err(e) => {
                for i in &index {
                    results[*i] = Some(Err(FileError::Io(io::Error::new(e.kind(), e.to_string()))));
                }
            }
        }
    }
    results.into_iter().map(|r| r.unwrap_or_else(|| Err(FileError::Io(io::Error::other("not reported"))))).collect()
}

fn prepare(f: &FileSpec, i: usize) -> Result<FileWrite, FileError> {
    if !f.path.is_absolute() {
        return Err(FileError::Relative);
    }
    let mode = f.mode.unwrap_or(DEFAULT_MODE);
    if mode > 0o777 {
        return Err(FileError::Mode(mode));
    }
    let name = f.path.file_name().map(|n| n.as_bytes().to_vec()).unwrap_or_default();
    let mut temp = f.path.with_file_name("").into_os_string().into_vec();
    temp.extend_from_slice(b".");
    temp.extend_from_slice(&name);
    temp.extend_from_slice(format!(".heddle-{}-{i}.tmp", std::process::id()).as_bytes());
    let target = CString::new(f.path.as_os_str().as_bytes()).map_err(|_| FileError::Nul)?;
    let temp = CString::new(temp).map_err(|_| FileError::Nul)?;
    let mut parents: Vec<CString> = Vec::new();
    for dir in f.path.ancestors().skip(1).filter(|d| *d != std::path::Path::new("/")) {
        parents.push(CString::new(dir.as_os_str().as_bytes()).map_err(|_| FileError::Nul)?);
    }
    parents.reverse();
    Ok(FileWrite { target, temp, content: f.content.clone(), mode: mode as libc::mode_t, parents })
}

use std::os::unix::ffi::OsStringExt;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contents_round_trip_and_modes_apply() {
        let dir = tempfile::tempdir().unwrap();
        let nasty = b"a $HOME `id`\nEOF\n\0\xff\xfe end".to_vec();
        let files = [
            FileSpec { path: dir.path().join("a"), content: nasty.clone(), mode: Some(0o755) },
            FileSpec { path: "rel".into(), content: vec![], mode: None },
            FileSpec { path: dir.path().join("new/deeper/b"), content: vec![1], mode: None },
            FileSpec { path: dir.path().join("c"), content: vec![], mode: None },
        ];
        let out = write_files(None, &files);
        assert!(out[0].is_ok());
        assert!(matches!(out[1], Err(FileError::Relative)));
        assert!(out[2].is_ok(), "missing parents are created: {:?}", out[2]);
        assert_eq!(std::fs::read(dir.path().join("new/deeper/b")).unwrap(), vec![1]);
        assert!(out[3].is_ok());
        assert_eq!(std::fs::read(dir.path().join("a")).unwrap(), nasty);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(dir.path().join("a")).unwrap().permissions().mode() & 0o7777, 0o755);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 3, "no temp files left behind");
    }
}
