//! The effects ledger's project part: what a job changed in the git work tree around its cwd.
//!
//! A [`Snapshot`] is `git status --porcelain=v2 -z --untracked-files=all` of the work tree plus a content
//! identity (lstat, then a hash of the bytes) of every path the status lists as dirty or untracked, so a
//! second edit of an already-dirty file shows (the status letters alone would not change). The job's
//! ledger is the difference between its "before" and "after" snapshots ([`compare`]).
//!
//! Who runs git: the worker, through the launcher, as the jobs' uid and under the job's Landlock
//! ruleset and seccomp filter (the front is unprivileged and must not read the project as itself). git
//! runs with `--no-optional-locks` (it never writes the index: no race with the job's own git) and
//! uses what the repository configured to go faster (`core.untrackedCache`, `core.fsmonitor`, split
//! index). Its output goes to a memfd (no pipe to drain, no deadlock), read once it exited.
//!
//! The "before": the previous job's "after" when nothing else of the session ran since it was taken
//! ([`Ledger::cached_before`]); else a snapshot taken at launch (the job waits for it).
//!
//! Bounds: hashing reads at most [`HASH_BYTES`] per file (larger files: stat only) and
//! [`MAX_HASHED`] files (more: confidence `partial`); content is kept for the diff up to
//! [`KEEP_BYTES`] per file and [`KEEP_TOTAL`] in all; the ledger lists [`MAX_LISTED`] paths and the
//! diff is at most [`DIFF_BYTES`].

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::hash::Hasher;
use std::io::{Read, Seek, Write};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use shm_proto::msg::{EffectsMode, PathChange, ProjectEffects};

/// Bytes of one file hashed for its identity (larger files are compared by stat only).
pub const HASH_BYTES: u64 = 8 << 20;
/// Dirty or untracked files hashed per snapshot; beyond, stat only and confidence `partial`.
pub const MAX_HASHED: usize = 20_000;
/// Content kept per file for a later diff, and in all per snapshot.
pub const KEEP_BYTES: usize = 256 << 10;
pub const KEEP_TOTAL: usize = 16 << 20;
/// Paths listed in one ledger (the rest counted).
pub const MAX_LISTED: usize = 200;
/// Bytes of unified diff in one result.
pub const DIFF_BYTES: usize = 16 << 10;

/// A path's content identity in the work tree.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Ident {
    /// `None`: the path is gone.
    stat: Option<(u64, i64, i64, u64, u32)>,
    /// Hash of the bytes (a symlink: of its target), `None` when not hashed (too large, over budget).
    hash: Option<u64>,
}

/// One entry of `git status --porcelain=v2`.
#[derive(Clone, Debug)]
struct Entry {
    /// `1`, `2`, `u` or `?`.
    kind: u8,
    xy: [u8; 2],
    /// The index's mode and object id (empty for untracked).
    index: Vec<u8>,
    /// A rename's or copy's source.
    orig: Option<Vec<u8>>,
    ident: Option<Ident>,
    /// What was kept of the bytes at snapshot time, for a diff.
    content: Option<Kept>,
}

impl Ident {
    /// The same bytes, file type and mode. Where both sides were hashed the hashes decide: a file
    /// rewritten with the bytes it had (`git stash -u && git stash pop`, a formatter that changed
    /// nothing) is no change though its mtime and inode moved. Otherwise the stat decides.
    fn same_bytes(&self, other: &Ident) -> bool {
        match (&self.stat, &other.stat, self.hash, other.hash) {
            (Some(a), Some(b), Some(x), Some(y)) => x == y && a.0 == b.0 && a.4 == b.4,
            (a, b, _, _) => a == b,
        }
    }
}

/// Staged, with the work tree as staged (`M.`, `A.`): its bytes are the index's.
fn staged_clean(e: &Entry) -> bool {
    e.kind == b'1' && e.xy[1] == b'.' && e.xy[0] != b'.'
}

impl Entry {
    fn same(&self, other: &Entry) -> bool {
        self.kind == other.kind
            && self.xy == other.xy
            && self.index == other.index
            && self.orig == other.orig
            // Both staged-clean with one index entry: the bytes are that blob's on both sides.
            && (staged_clean(self)
                || match (&self.ident, &other.ident) {
                    (Some(a), Some(b)) => a.same_bytes(b),
                    (a, b) => a == b,
                })
    }
}

/// The state of a work tree at one moment.
#[derive(Clone, Debug)]
pub(crate) struct Snapshot {
    pub root: PathBuf,
    /// `HEAD`'s object id (`None`: no commit yet).
    head: Option<String>,
    /// The branch checked out (`None`: detached, or no status read yet).
    branch: Option<String>,
    entries: BTreeMap<Vec<u8>, Entry>,
    /// Why this snapshot is incomplete.
    pub partial: Vec<String>,
    /// Symlinks in the work tree (tracked or untracked) whose target is outside it.
    links_out: Vec<String>,
}

/// The top of the git work tree containing `cwd`: the nearest ancestor holding `.git` (a directory, or a
/// file naming a separate git dir).
pub(crate) fn work_tree(cwd: &Path) -> Option<PathBuf> {
    cwd.ancestors().find(|d| std::fs::symlink_metadata(d.join(".git")).is_ok()).map(Path::to_path_buf)
}

/// Runs git as the job would be run: the job's environment, Landlock ruleset and seccomp filter.
pub(crate) struct Git<'a> {
    pub program: &'a Path,
    pub env: &'a [(String, String)],
    pub ruleset: Option<std::os::fd::BorrowedFd<'a>>,
    pub seccomp: Option<&'a [launcher::seccomp::sock_filter]>,
}

impl Git<'_> {
    /// `git ARGS` in `dir`, `input` on its stdin: its stdout, or a sentence with its stderr.
    fn run(&self, dir: &Path, args: &[&str], input: Option<&[u8]>) -> Result<Vec<u8>, String> {
        self.run_ok(dir, args, input, &[0])
    }

    /// [`Git::run`], with the exit codes that mean success (`check-ignore` exits 1 when nothing is ignored).
    fn run_ok(&self, dir: &Path, args: &[&str], input: Option<&[u8]>, ok: &[i32]) -> Result<Vec<u8>, String> {
        let mem = |name| {
            nix::sys::memfd::memfd_create(name, nix::sys::memfd::MFdFlags::MFD_CLOEXEC)
                .map_err(|e| format!("cannot make a memfd for git's output: {e}"))
        };
        let (out, err) = (mem(c"heddle-git-out")?, mem(c"heddle-git-err")?);
        let stdin: OwnedFd = match input {
            None => std::fs::File::open("/dev/null").map_err(|e| format!("cannot open /dev/null: {e}"))?.into(),
            Some(bytes) => {
                let fd = mem(c"heddle-git-in")?;
                let mut f = std::fs::File::from(fd);
                f.write_all(bytes).and_then(|()| f.rewind()).map_err(|e| format!("cannot feed git: {e}"))?;
                f.into()
            }
        };
        let dup = |fd: &OwnedFd| fd.try_clone().map_err(|e| format!("cannot dup a memfd: {e}"));
        let stdio = launcher::Stdio { stdin, stdout: dup(&out)?, stderr: dup(&err)? };
        let mut argv = vec!["git", "--no-optional-locks", "-c", "core.quotepath=off"];
        argv.extend_from_slice(args);
        let mut p = launcher::Prepared::new(self.program, &argv, self.env, Some(dir), stdio)
            .map_err(|e| format!("cannot prepare git: {e}"))?;
        if let Some(rs) = self.ruleset {
            p = p.with_landlock(rs).map_err(|e| format!("cannot prepare git's sandbox: {e}"))?;
        }
        if let Some(prog) = self.seccomp {
            p = p.with_seccomp(prog);
        }
        GIT_RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let child = launcher::spawn(&p).map_err(|e| format!("cannot start git: {e}"))?;
        drop(p);
        let exit = child.wait().map_err(|e| format!("cannot wait for git: {e}"))?;
        let read_all = |fd: OwnedFd| {
            let mut f = std::fs::File::from(fd);
            let mut v = Vec::new();
            let _ = f.rewind().and_then(|_| f.read_to_end(&mut v));
            v
        };
        let (out, err) = (read_all(out), read_all(err));
        if exit.code().is_some_and(|c| ok.contains(&c)) {
            return Ok(out);
        }
        let err = String::from_utf8_lossy(&err);
        let first = err.lines().find(|l| !l.trim().is_empty()).unwrap_or("no message").trim().to_owned();
        let how = match exit {
            launcher::Exit::Code(c) => format!("exit status {c}"),
            launcher::Exit::Signal(n) => format!("signal {n}"),
        };
        let hint = match first.contains("dubious ownership") {
            true => " (the repository belongs to another user than the one jobs run as; open the session with that user, or mark the directory safe in git's configuration for the jobs' user)",
            false => "",
        };
        Err(format!("`git {}` failed with {how}: {first}{hint}", args.join(" ")))
    }
}

/// The git program the job's `PATH` finds.
pub(crate) fn find_git(env: &[(String, String)]) -> Option<PathBuf> {
    let path = env.iter().find(|(k, _)| k == "PATH").map_or("/usr/local/bin:/usr/bin:/bin", |(_, v)| v.as_str());
    launcher::resolve_program(OsStr::new("git"), OsStr::new(path))
}

/// git processes started for ledgers since the worker began (a ledger's `git_runs` is its difference).
pub(crate) static GIT_RUNS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Take a snapshot of the work tree at `root`; `keep`: keep dirty files' bytes for a diff.
pub(crate) fn snapshot(git: &Git<'_>, root: &Path, keep: bool) -> Result<Snapshot, String> {
    let out = git.run(root, &["status", "--porcelain=v2", "-z", "--branch", "--untracked-files=all"], None)?;
    let mut snap = Snapshot {
        root: root.to_path_buf(),
        head: None,
        branch: None,
        entries: BTreeMap::new(),
        partial: Vec::new(),
        links_out: Vec::new(),
    };
    parse_status(&out, &mut snap);
    identify_dirty(&mut snap, None, keep);
    Ok(snap)
}

/// `base` brought up to date for `paths` (relative to the work tree; a directory stands for everything
/// under it): one `git status` of those paths only (literal pathspecs), its entries in place of the
/// base's under them. A rename's other side is asked about too, so git can still pair them.
pub(crate) fn refresh(
    git: &Git<'_>,
    base: &Snapshot,
    paths: &BTreeSet<Vec<u8>>,
    keep: bool,
) -> Result<Snapshot, String> {
    let mut specs = paths.clone();
    let covered = |specs: &BTreeSet<Vec<u8>>, k: &[u8]| {
        specs.iter().any(|p| k == p.as_slice() || (k.len() > p.len() && k.starts_with(p) && k[p.len()] == b'/'))
    };
    for (k, e) in &base.entries {
        if let Some(o) = &e.orig {
            if covered(paths, k) || covered(paths, o) {
                specs.insert(k.clone());
                specs.insert(o.clone());
            }
        }
    }
    // No index preload: its threads lstat for the whole index's sake and cost more than the few named
    // paths (10,000 files, 3 paths: 8.0 ms with it, 3.1–3.4 ms without; docs/performance.md).
    let mut args: Vec<&str> = vec![
        "-c",
        "core.preloadIndex=false",
        "--literal-pathspecs",
        "status",
        "--porcelain=v2",
        "-z",
        "--branch",
        "--untracked-files=all",
        "--",
    ];
    for p in &specs {
        args.push(std::str::from_utf8(p).map_err(|_| "a changed path is not UTF-8".to_owned())?);
    }
    let out = git.run(&base.root, &args, None)?;
    let mut fresh = Snapshot {
        root: base.root.clone(),
        head: None,
        branch: None,
        entries: BTreeMap::new(),
        partial: Vec::new(),
        links_out: Vec::new(),
    };
    parse_status(&out, &mut fresh);
    let mut snap = base.clone();
    snap.head = fresh.head;
    snap.branch = fresh.branch;
    snap.entries.retain(|k, _| !covered(&specs, k));
    snap.links_out.retain(|l| !covered(&specs, l.as_bytes()));
    let new: BTreeSet<Vec<u8>> = fresh.entries.keys().cloned().collect();
    snap.entries.extend(fresh.entries);
    identify_dirty(&mut snap, Some(&new), keep);
    Ok(snap)
}

/// Give the dirty or untracked entries (only those in `only`, when given) their content identity.
fn identify_dirty(snap: &mut Snapshot, only: Option<&BTreeSet<Vec<u8>>>, keep: bool) {
    let root = snap.root.clone();
    let dirty = |e: &Entry| e.kind == b'?' || e.xy[1] != b'.' || e.kind == b'u';
    // What entries not identified again already hold of the budgets.
    let (mut hashed, mut kept) = (0usize, 0usize);
    if only.is_some() {
        for (k, e) in &snap.entries {
            if only.is_some_and(|o| o.contains(k)) || !dirty(e) {
                continue;
            }
            hashed += 1;
            if let Some(Kept::Bytes(c)) = &e.content {
                kept += c.len();
            }
        }
    }
    let mut over = 0usize;
    // Tracked files first, then untracked ones: the bytes kept for a diff go first to the files the
    // project tracks (a few edited sources), not to build outputs that happen to sort before them.
    let order: Vec<Vec<u8>> = {
        let (tracked, untracked): (Vec<_>, Vec<_>) = snap
            .entries
            .iter()
            .filter(|(k, e)| dirty(e) && only.is_none_or(|o| o.contains(*k)))
            .partition(|(_, e)| e.kind != b'?');
        tracked.into_iter().chain(untracked).map(|(k, _)| k.clone()).collect()
    };
    for path in order {
        let Some(e) = snap.entries.get_mut(&path) else { continue };
        let full = root.join(OsStr::from_bytes(&path));
        let hash_it = hashed < MAX_HASHED;
        hashed += 1;
        if !hash_it {
            over += 1;
        }
        let (ident, content) = identify(&full, hash_it, keep.then_some(KEEP_TOTAL.saturating_sub(kept)));
        if let Some(Kept::Bytes(c)) = &content {
            kept += c.len();
        }
        if e.kind == b'?' && is_link_out(&root, &full) {
            snap.links_out.push(String::from_utf8_lossy(&path).into_owned());
        }
        e.ident = Some(ident);
        e.content = content;
    }
    // A staged path whose work tree is as staged gets its stat (no hash, no bytes kept): whether it
    // still holds those bytes when it leaves the status or is unstaged tells a commit from a reset.
    for (path, e) in snap.entries.iter_mut().filter(|(k, e)| staged_clean(e) && only.is_none_or(|o| o.contains(*k))) {
        e.ident = Some(identify(&root.join(OsStr::from_bytes(path)), false, None).0);
    }
    if over > 0 && !snap.partial.iter().any(|p| p.contains("over the budget of")) {
        snap.partial.push(format!(
            "the work tree has {hashed} dirty or untracked files, over the budget of {MAX_HASHED}: {over} were compared by stat only"
        ));
    }
}

/// Parse `git status --porcelain=v2 -z --branch` (untrusted bytes: unknown or short records are
/// skipped, never a panic).
fn parse_status(out: &[u8], snap: &mut Snapshot) {
    let mut fields = out.split(|b| *b == 0);
    while let Some(rec) = fields.next() {
        if rec.is_empty() {
            continue;
        }
        if let Some(oid) = rec.strip_prefix(b"# branch.oid ") {
            snap.head = (oid != b"(initial)").then(|| String::from_utf8_lossy(oid).into_owned());
            continue;
        }
        if let Some(name) = rec.strip_prefix(b"# branch.head ") {
            snap.branch = (name != b"(detached)").then(|| String::from_utf8_lossy(name).into_owned());
            continue;
        }
        let kind = rec[0];
        // Space-separated fields before the path: `1` has 8, `2` has 9, `u` has 10, `?` has 1.
        let n = match kind {
            b'1' => 8,
            b'2' => 9,
            b'u' => 10,
            b'?' => 1,
            _ => continue,
        };
        let mut parts = rec.splitn(n + 1, |b| *b == b' ');
        let head: Vec<&[u8]> = parts.by_ref().take(n).collect();
        let Some(path) = parts.next().filter(|_| head.len() == n) else { continue };
        let xy = match kind {
            b'?' => *b"??",
            _ => match head.get(1) {
                Some(v) if v.len() == 2 => [v[0], v[1]],
                _ => continue,
            },
        };
        let index = match kind {
            b'1' | b'2' => [head[4], b" ", head[7]].concat(),
            b'u' => [head[5], b" ", head[9]].concat(),
            _ => Vec::new(),
        };
        let orig = match kind {
            b'2' => fields.next().map(<[u8]>::to_vec),
            _ => None,
        };
        snap.entries.insert(path.to_vec(), Entry { kind, xy, index, orig, ident: None, content: None });
    }
}

/// lstat, then hash (a symlink: its target's text), keeping the bytes when asked (`room`: the bytes
/// the snapshot may still keep). A binary file keeps only its size (a diff names binaries with sizes).
fn identify(p: &Path, hash_it: bool, room: Option<usize>) -> (Ident, Option<Kept>) {
    let Ok(m) = std::fs::symlink_metadata(p) else { return (Ident { stat: None, hash: None }, None) };
    let stat = Some((m.size(), m.mtime(), m.mtime_nsec(), m.ino(), m.mode()));
    let too_big = |size: u64| room.map(|_| Kept::Skipped(not_kept_reason(size, KEEP_BYTES)));
    if m.is_dir() {
        return (Ident { stat, hash: None }, None);
    }
    if !hash_it || m.size() > HASH_BYTES {
        return (Ident { stat, hash: None }, too_big(m.size()));
    }
    let bytes = match m.file_type().is_symlink() {
        true => std::fs::read_link(p).map(|t| t.as_os_str().as_bytes().to_vec()),
        false => std::fs::read(p),
    };
    let Ok(bytes) = bytes else { return (Ident { stat, hash: None }, None) };
    let mut h = std::collections::hash_map::DefaultHasher::new();
    h.write(&bytes);
    let content = room.map(|room| match bytes.len() {
        _ if is_binary(&bytes) => Kept::Binary(bytes.len() as u64),
        n if n > KEEP_BYTES => Kept::Skipped(not_kept_reason(n as u64, KEEP_BYTES)),
        n if n > room => Kept::Skipped(format!(
            "its bytes before the job were not kept: the snapshot keeps {} MiB in all for diffs, spent on other changed files",
            KEEP_TOTAL >> 20
        )),
        _ => Kept::Bytes(Arc::new(bytes)),
    });
    (Ident { stat, hash: Some(h.finish()) }, content)
}

fn not_kept_reason(size: u64, limit: usize) -> String {
    format!("its bytes before the job were not kept: it has {size} bytes, over the {} KiB kept per file", limit >> 10)
}

/// What a snapshot kept of a file for a later diff.
#[derive(Clone, Debug)]
enum Kept {
    Bytes(Arc<Vec<u8>>),
    /// A binary file: its size only.
    Binary(u64),
    /// Not kept, and why (a sentence).
    Skipped(String),
}

/// A symlink whose target resolves outside the work tree (or nowhere inside it).
fn is_link_out(root: &Path, p: &Path) -> bool {
    let Ok(m) = std::fs::symlink_metadata(p) else { return false };
    if !m.file_type().is_symlink() {
        return false;
    }
    let Ok(target) = std::fs::read_link(p) else { return false };
    let joined = match target.is_absolute() {
        true => target,
        false => p.parent().unwrap_or(root).join(target),
    };
    let resolved = std::fs::canonicalize(&joined).unwrap_or(joined);
    let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    !resolved.starts_with(root)
}

/// Whether a write through the symlink `link` can land beneath one of `roots`: its target is in a root,
/// or holds one (a link to `/home/u` reaches the root `/home/u/.cache`). A target that cannot be
/// resolved counts: a write may create it.
fn leads_into(link: &Path, roots: &[PathBuf]) -> bool {
    let Ok(target) = std::fs::canonicalize(link) else { return true };
    roots.iter().any(|r| {
        let r = std::fs::canonicalize(r).unwrap_or_else(|_| r.clone());
        target.starts_with(&r) || r.starts_with(&target)
    })
}

/// The tracked symlinks leading out of the work tree (`git ls-files -s`, mode 120000), cached per index
/// identity: listing the index is paid again only when the index changed.
#[derive(Default)]
pub(crate) struct TrackedLinks {
    key: Option<(PathBuf, u64, i64, i64, u64)>,
    out: Vec<String>,
}

impl TrackedLinks {
    fn get(&mut self, git: &Git<'_>, root: &Path) -> Result<Vec<String>, String> {
        let index = git_dir(root).join("index");
        let key =
            std::fs::metadata(&index).ok().map(|m| (root.to_path_buf(), m.ino(), m.mtime(), m.mtime_nsec(), m.size()));
        if key.is_some() && key == self.key {
            return Ok(self.out.clone());
        }
        let listed = git.run(root, &["ls-files", "-s", "-z"], None)?;
        let mut out = Vec::new();
        for rec in listed.split(|b| *b == 0) {
            let Some(rest) = rec.strip_prefix(b"120000 ") else { continue };
            let Some(tab) = rest.iter().position(|b| *b == b'\t') else { continue };
            let path = &rest[tab + 1..];
            if is_link_out(root, &root.join(OsStr::from_bytes(path))) {
                out.push(String::from_utf8_lossy(path).into_owned());
            }
        }
        self.key = key;
        self.out = out.clone();
        Ok(out)
    }
}

/// The work tree's git dir (`.git`, or what a `.git` file names).
fn git_dir(root: &Path) -> PathBuf {
    let dot = root.join(".git");
    // One stat in the common case (a directory); only a `.git` file is opened and read.
    if std::fs::symlink_metadata(&dot).is_ok_and(|m| m.is_dir()) {
        return dot;
    }
    match std::fs::read_to_string(&dot) {
        Ok(s) => match s.trim().strip_prefix("gitdir: ") {
            Some(d) => root.join(d),
            None => dot,
        },
        Err(_) => dot,
    }
}

/// The project ledger of a job: `after` against `before`.
pub(crate) fn compare(
    git: &Git<'_>,
    links: &mut TrackedLinks,
    before: &Snapshot,
    after: &Snapshot,
    mode: EffectsMode,
    writable: Option<&[PathBuf]>,
) -> ProjectEffects {
    let mut changed: Vec<(Vec<u8>, PathChange)> = Vec::new();
    // Untracked before, still there, out of the status after: committed, or ignored now (git says which).
    let mut untracked_gone: Vec<usize> = Vec::new();
    let keys: BTreeSet<&Vec<u8>> = before.entries.keys().chain(after.entries.keys()).collect();
    let renamed_from: BTreeSet<&Vec<u8>> = after.entries.values().filter_map(|e| e.orig.as_ref()).collect();
    for k in keys {
        let (b, a) = (before.entries.get(k), after.entries.get(k));
        let change = match (b, a) {
            (Some(b), Some(a)) if b.same(a) => continue,
            (None, None) => continue,
            // The source of a rename staged during the job is named with the rename.
            (None, Some(_)) | (Some(_), None) if renamed_from.contains(k) && a.is_none() => continue,
            (Some(b), Some(a))
                if b"1?".contains(&b.kind)
                    && b"1?".contains(&a.kind)
                    && same_bytes_now(b, a, &after.root.join(OsStr::from_bytes(k))) =>
            {
                index_change(b, a)
            }
            (b, Some(a)) => label(b, a),
            (Some(b), None) => gone_from_status(b, &after.root.join(OsStr::from_bytes(k))),
        };
        if change == "committed" && b.is_some_and(|b| b.kind == b'?') {
            untracked_gone.push(changed.len());
        }
        let from = a.and_then(|a| a.orig.as_ref()).map(|o| String::from_utf8_lossy(o).into_owned());
        changed.push((
            k.clone(),
            PathChange { path: String::from_utf8_lossy(k).into_owned(), change: change.to_owned(), from, under: 0 },
        ));
    }
    let mut reasons: Vec<String> = before.partial.iter().chain(&after.partial).cloned().collect();
    if !untracked_gone.is_empty() {
        let input: Vec<u8> = untracked_gone.iter().flat_map(|&i| changed[i].0.iter().copied().chain([0])).collect();
        // Tracked paths are never reported by `check-ignore`: what it names is ignored, the rest committed.
        match git.run_ok(&after.root, &["check-ignore", "-z", "--stdin"], Some(&input), &[0, 1]) {
            Ok(out) => {
                let ignored: BTreeSet<&[u8]> = out.split(|b| *b == 0).filter(|p| !p.is_empty()).collect();
                for &i in &untracked_gone {
                    if ignored.contains(changed[i].0.as_slice()) {
                        changed[i].1.change = "ignored".into();
                    }
                }
            }
            Err(e) => {
                for &i in &untracked_gone {
                    changed[i].1.change = "committed-or-ignored".into();
                }
                reasons.push(format!("whether untracked paths that left the status were committed or are ignored now could not be read ({e})"));
            }
        }
    }
    let head_moved = (before.head != after.head || before.branch != after.branch).then(|| {
        Box::new(shm_proto::msg::HeadMove {
            from: before.head.clone(),
            to: after.head.clone(),
            from_branch: before.branch.clone(),
            to_branch: after.branch.clone(),
        })
    });
    if let Some(h) = head_moved.as_ref().filter(|h| h.from != h.to) {
        match head_paths(git, &after.root, h) {
            Ok(paths) => {
                // A path clean before and after but not the same in both commits changed in the work tree
                // with HEAD (a commit of a file the job wrote, a checkout, a reset --hard).
                let listed: BTreeSet<Vec<u8>> = changed.iter().map(|(k, _)| k.clone()).collect();
                // Dirty or conflicted before, clean after with other bytes, and changed by the commits:
                // the job committed them (a resolved conflict, `git commit -a` of an edit made meanwhile),
                // not put them back.
                for (k, c) in changed.iter_mut() {
                    if c.change == "reverted" && paths.iter().any(|(p, _)| p == k) {
                        c.change = "committed".to_owned();
                    }
                }
                for (k, change) in paths {
                    if !listed.contains(&k) && !before.entries.contains_key(&k) && !after.entries.contains_key(&k) {
                        let path = String::from_utf8_lossy(&k).into_owned();
                        changed.push((k, PathChange { path, change: change.to_owned(), from: None, under: 0 }));
                    }
                }
                changed.sort_by(|a, b| a.0.cmp(&b.0));
            }
            Err(e) => reasons.push(format!(
                "HEAD moved during the job and the paths that differ between its commits could not be listed ({e})"
            )),
        }
    }
    // Only a tree with something in its status, a detached HEAD or a moved one can be mid-operation (a
    // merge, cherry-pick or revert stops with index entries, a rebase or bisect detached): a clean tree
    // on its branch costs no look into the git dir.
    let in_progress = (head_moved.is_some() || after.branch.is_none() || !after.entries.is_empty())
        .then(|| in_progress(&after.root))
        .flatten();
    reasons.dedup();
    let mut out: Vec<String> = after.links_out.clone();
    match links.get(git, &after.root) {
        Ok(tracked) => out.extend(tracked),
        Err(e) => reasons.push(format!("tracked symlinks could not be listed ({e})")),
    }
    // A link to where the sandbox refuses writes (a venv's `bin/python` → /usr/bin) cannot carry a write
    // out of the tree: only links into the session's other writable roots lower the confidence.
    out.retain(|l| writable.is_none_or(|roots| leads_into(&after.root.join(l), roots)));
    if !out.is_empty() {
        out.sort();
        out.dedup();
        let shown: Vec<&str> = out.iter().take(5).map(String::as_str).collect();
        reasons.push(format!(
            "the work tree has {} symlink(s) leading out of it to where jobs may write ({}{}): writes through them change files outside the work tree, which this ledger does not see",
            out.len(),
            shown.join(", "),
            if out.len() > 5 { ", …" } else { "" }
        ));
    }
    let (diff, diff_note) = match mode {
        EffectsMode::Diff => {
            // A path committed or ignored now kept its bytes: it has no diff.
            let kept = ["committed", "ignored", "committed-or-ignored", "staged", "unstaged"];
            let content: Vec<(Vec<u8>, PathChange)> =
                changed.iter().filter(|(_, c)| !kept.contains(&c.change.as_str())).cloned().collect();
            let (d, n) = diff(git, before, after, &content);
            (Some(d), n)
        }
        _ => (None, None),
    };
    let changed = fold_trees(changed);
    let total = changed.len();
    let listed: Vec<PathChange> = changed.into_iter().take(MAX_LISTED).map(|(_, c)| c).collect();
    ProjectEffects {
        root: after.root.to_string_lossy().into_owned(),
        scope: format!(
            "git work tree {}: git status and content of changed files, before vs after the job",
            after.root.display()
        ),
        confidence: if reasons.is_empty() { "complete" } else { "partial" }.to_owned(),
        reasons,
        changed_more: (total - listed.len()) as u32,
        changed: listed,
        diff,
        diff_note,
        before: String::new(),
        cost_us: 0,
        watched: None,
        method: String::new(),
        method_note: None,
        git_runs: 0,
        head_moved,
        // Only a tree with something in its status, a detached HEAD or a moved one can be mid-operation
        // (a merge, cherry-pick or revert stops with index entries, a rebase or bisect detached): a clean
        // tree on its branch costs no look into the git dir.
        in_progress,
    }
}

/// The git operation a job left under way in the work tree (`rebase`, `merge`, `cherry-pick`, `revert`,
/// `bisect`), read from the files git keeps in its dir while one is.
fn in_progress(root: &Path) -> Option<String> {
    let dir = git_dir(root);
    [
        ("rebase-merge", "rebase"),
        ("rebase-apply", "rebase"),
        ("MERGE_HEAD", "merge"),
        ("CHERRY_PICK_HEAD", "cherry-pick"),
        ("REVERT_HEAD", "revert"),
        ("BISECT_LOG", "bisect"),
    ]
    .iter()
    .find(|(f, _)| std::fs::symlink_metadata(dir.join(f)).is_ok())
    .map(|(_, op)| (*op).to_owned())
}

/// The paths that differ between `HEAD`'s commit before and after, with the change the work tree saw
/// (`added`, `modified`, `deleted`, `type-changed`); every path of the new commit when there was none before.
fn head_paths(
    git: &Git<'_>,
    root: &Path,
    h: &shm_proto::msg::HeadMove,
) -> Result<Vec<(Vec<u8>, &'static str)>, String> {
    let Some(to) = h.to.as_deref() else {
        // The branch has no commit now (`git checkout --orphan`, `update-ref -d`): the index says the rest.
        return Ok(Vec::new());
    };
    let out = match h.from.as_deref() {
        Some(from) => git.run(root, &["diff", "--no-renames", "--name-status", "-z", from, to], None)?,
        None => git.run(root, &["ls-tree", "-r", "-z", "--name-only", to], None)?,
    };
    Ok(parse_head_paths(&out, h.from.is_none()))
}

/// `git diff --name-status -z` records (`X\0path\0`), or `ls-tree --name-only -z` names (`all_added`).
fn parse_head_paths(out: &[u8], all_added: bool) -> Vec<(Vec<u8>, &'static str)> {
    let mut fields = out.split(|b| *b == 0).filter(|f| !f.is_empty());
    let mut v = Vec::new();
    if all_added {
        return fields.map(|p| (p.to_vec(), "added")).collect();
    }
    while let (Some(status), Some(path)) = (fields.next(), fields.next()) {
        let change = match status.first() {
            Some(b'A') => "added",
            Some(b'D') => "deleted",
            Some(b'T') => "type-changed",
            _ => "modified",
        };
        v.push((path.to_vec(), change));
    }
    v
}

/// A ledger longer than this folds its paths by directory ([`fold_trees`]).
const FOLD_OVER: usize = 30;

/// A long ledger (over [`FOLD_OVER`] paths) lists each directory whose changed paths below it (at
/// least two) all changed the same way (`untracked-new`, `ignored`, `committed`, `deleted`, …; never a
/// rename) once, as `DIR` with that change and `under` counting them, at the shallowest such directory:
/// a `pip install --target vendor`, a scaffolded app or a `.venv` newly ignored is one line per tree,
/// not one per file. The entry says only what is true of every path below it, not that the directory
/// itself is new or gone. A short ledger is listed path by path.
fn fold_trees(changed: Vec<(Vec<u8>, PathChange)>) -> Vec<(Vec<u8>, PathChange)> {
    if changed.len() <= FOLD_OVER {
        return changed;
    }
    let dirs = |k: &[u8]| -> Vec<Vec<u8>> {
        k.iter().enumerate().filter(|(_, b)| **b == b'/').map(|(i, _)| k[..i].to_vec()).collect()
    };
    // Per directory: the paths below it, and their one change (`None` once two differ or one is a rename).
    let mut below: BTreeMap<Vec<u8>, (u32, Option<String>)> = BTreeMap::new();
    for (k, c) in &changed {
        for d in dirs(k) {
            let one = (c.from.is_none()).then(|| c.change.clone());
            below
                .entry(d)
                .and_modify(|(n, same)| {
                    *n += 1;
                    if *same != one {
                        *same = None;
                    }
                })
                .or_insert((1, one));
        }
    }
    let folds = |d: &[u8]| below.get(d).is_some_and(|(n, same)| *n >= 2 && same.is_some());
    let mut out: Vec<(Vec<u8>, PathChange)> = Vec::new();
    for (k, c) in changed {
        match dirs(&k).into_iter().find(|d| folds(d)) {
            Some(d) if out.last().is_some_and(|(last, _)| *last == d) => {}
            Some(d) => {
                let (under, change) = below[&d].clone();
                let path = String::from_utf8_lossy(&d).into_owned();
                let change = change.expect("a folded directory has one change");
                out.push((d, PathChange { path, change, from: None, under }));
            }
            None => out.push((k, c)),
        }
    }
    out
}

/// A path in the status before and not after: gone from disk (`deleted`); its content as it was
/// before and git content with it (`committed`: a dirty path whose bytes, or absence, are unchanged,
/// so git now holds them; an untracked one still there, which [`compare`] splits from `ignored`);
/// otherwise put back as git has it (`reverted`).
fn gone_from_status(b: &Entry, path: &Path) -> &'static str {
    let exists = std::fs::symlink_metadata(path).is_ok();
    if b.kind == b'?' {
        return if exists { "committed" } else { "deleted" };
    }
    let unchanged = b.ident.as_ref().is_some_and(|was| identify(path, was.hash.is_some(), None).0.same_bytes(was));
    match (unchanged, exists) {
        (true, _) => "committed",
        (false, true) => "reverted",
        (false, false) => "deleted",
    }
}

/// Whether a path listed before and after (with another status) holds the bytes it held before: then
/// only the index changed (`git add`, `git restore --staged`). The after side's identity is used when
/// it has one.
fn same_bytes_now(b: &Entry, a: &Entry, path: &Path) -> bool {
    let Some(was) = &b.ident else { return false };
    match &a.ident {
        Some(now) => was.same_bytes(now),
        None => was.same_bytes(&identify(path, was.hash.is_some(), None).0),
    }
}

/// The change of a path whose bytes stayed and whose index entry moved: `staged` when the work tree is
/// now (more) in the index, `unstaged` when the index went back (`git rm --cached`, `git restore
/// --staged`).
fn index_change(b: &Entry, a: &Entry) -> &'static str {
    match () {
        _ if a.kind == b'?' => "unstaged",
        _ if a.xy[0] == b'.' && b.xy[0] != b'.' => "unstaged",
        _ => "staged",
    }
}

/// The change of a path listed after the job (`b`: how it was listed before, if it was).
fn label(b: Option<&Entry>, a: &Entry) -> &'static str {
    let dirty_before = b.is_some_and(|b| b.kind == b'?' || b.xy[1] != b'.');
    match a.kind {
        b'?' if b.is_none() => "untracked-new",
        b'?' => "modified-again",
        b'2' => "renamed",
        b'u' => "conflicted",
        _ if a.xy.contains(&b'D') => "deleted",
        _ if a.xy.contains(&b'T') => "type-changed",
        _ if a.xy[0] == b'A' && b.is_none() => "added",
        _ if dirty_before => "modified-again",
        _ => "modified",
    }
}

/// Where a changed path's "before" bytes are.
enum Old {
    Kept(Kept),
    NotKept,
    /// A `git cat-file` name (`HEAD:path`, or the index's object id for a path staged before).
    Blob(Vec<u8>),
}

fn old_source(before: &Snapshot, src: &[u8]) -> Old {
    match before.entries.get(src) {
        Some(e) if e.kind == b'?' || e.xy[1] != b'.' => e.content.clone().map_or(Old::NotKept, Old::Kept),
        Some(e) => Old::Blob(e.index.rsplit(|b| *b == b' ').next().unwrap_or_default().to_vec()),
        None => match &before.head {
            Some(h) => Old::Blob([h.as_bytes(), b":", src].concat()),
            None => Old::Kept(Kept::Bytes(Arc::new(Vec::new()))),
        },
    }
}

/// A bounded unified diff of the changed paths: text files line by line, binaries named with their sizes.
fn diff(
    git: &Git<'_>,
    before: &Snapshot,
    after: &Snapshot,
    changed: &[(Vec<u8>, PathChange)],
) -> (String, Option<String>) {
    let olds: Vec<Old> = changed
        .iter()
        .map(|(k, c)| old_source(before, c.from.as_ref().map_or(k.as_slice(), |f| f.as_bytes())))
        .collect();
    // Blobs are read in one `git cat-file --batch`.
    let names: Vec<Vec<u8>> =
        olds.iter().filter_map(|o| if let Old::Blob(n) = o { Some(n.clone()) } else { None }).collect();
    let mut blobs: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    if !names.is_empty() {
        let input: Vec<u8> = names.iter().flat_map(|n| n.iter().copied().chain([b'\n'])).collect();
        if let Ok(out) = git.run(&after.root, &["cat-file", "--batch"], Some(&input)) {
            blobs = parse_batch(&out, &names);
        }
    }
    let mut text = String::new();
    let mut omitted: Vec<String> = Vec::new();
    for ((k, c), old) in changed.iter().zip(olds) {
        let old: Result<Body, String> = match old {
            Old::Kept(Kept::Bytes(b)) => Ok(Body::of(b.to_vec())),
            Old::Kept(Kept::Binary(n)) => Ok(Body::Binary(n)),
            Old::Kept(Kept::Skipped(why)) => Err(why),
            Old::NotKept => Err("its bytes before the job could not be read".to_owned()),
            Old::Blob(n) => Ok(Body::of(blobs.get(&n).cloned().unwrap_or_default())),
        };
        let new = body_now(&after.root.join(OsStr::from_bytes(k)), &c.path);
        let part = match (old, new) {
            (Ok(Body::Text(o)), Ok(Body::Text(n))) => {
                let (o, n) = (String::from_utf8_lossy(&o), String::from_utf8_lossy(&n));
                let from = c.from.as_deref().unwrap_or(&c.path);
                similar::TextDiff::from_lines(o.as_ref(), n.as_ref())
                    .unified_diff()
                    .context_radius(3)
                    .header(&format!("a/{from}"), &format!("b/{}", c.path))
                    .to_string()
            }
            (Ok(o), Ok(n)) => format!("Binary file {} changed ({} → {} bytes)\n", c.path, o.len(), n.len()),
            (Err(why), _) | (_, Err(why)) => format!("{}: {why}\n", c.path),
        };
        if text.len() + part.len() > DIFF_BYTES {
            omitted.push(c.path.clone());
            continue;
        }
        text.push_str(&part);
    }
    let note = (!omitted.is_empty()).then(|| {
        let shown: Vec<&str> = omitted.iter().take(20).map(String::as_str).collect();
        format!(
            "the diff is bounded to {} KiB; left out: {}{}; see them with run {{cmd: \"git diff -- {}\"}} (against the index, so for files already dirty before it shows more than this job changed)",
            DIFF_BYTES >> 10,
            shown.join(", "),
            if omitted.len() > 20 { format!(" and {} more", omitted.len() - 20) } else { String::new() },
            shown.join(" ")
        )
    });
    (text, note)
}

/// `git cat-file --batch` output: `<oid> blob <size>\n<bytes>\n` or `<name> missing\n` per input line.
fn parse_batch(out: &[u8], names: &[Vec<u8>]) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut blobs = BTreeMap::new();
    let mut at = 0usize;
    for name in names {
        let Some(nl) = out[at.min(out.len())..].iter().position(|b| *b == b'\n') else { break };
        let line = &out[at..at + nl];
        at += nl + 1;
        let size = line.rsplit(|b| *b == b' ').next().and_then(|s| std::str::from_utf8(s).ok()?.parse::<usize>().ok());
        match size {
            Some(n) if line.ends_with(b"missing") => {
                let _ = n;
            }
            Some(n) if at + n <= out.len() => {
                blobs.insert(name.clone(), out[at..at + n].to_vec());
                at += n + 1;
            }
            _ => {}
        }
    }
    blobs
}

/// A file's bytes for a diff: text, or a binary's size.
enum Body {
    Text(Vec<u8>),
    Binary(u64),
}

impl Body {
    fn of(bytes: Vec<u8>) -> Body {
        match is_binary(&bytes) {
            true => Body::Binary(bytes.len() as u64),
            false => Body::Text(bytes),
        }
    }

    fn len(&self) -> u64 {
        match self {
            Body::Text(b) => b.len() as u64,
            Body::Binary(n) => *n,
        }
    }
}

/// A path's bytes after the job (a symlink: its target; gone: empty).
fn body_now(full: &Path, path: &str) -> Result<Body, String> {
    match std::fs::symlink_metadata(full) {
        Ok(m) if m.file_type().is_symlink() => {
            std::fs::read_link(full).map(|t| Body::Text(t.as_os_str().as_bytes().to_vec())).map_err(|e| e.to_string())
        }
        Ok(m) if m.is_dir() => Err("it is a directory now".to_owned()),
        Ok(m) if m.size() as usize > KEEP_BYTES => {
            let mut head = Vec::new();
            let _ = std::fs::File::open(full).and_then(|f| f.take(8000).read_to_end(&mut head));
            match is_binary(&head) {
                true => Ok(Body::Binary(m.size())),
                false => Err(format!(
                    "it has {} bytes now, over the {} KiB a diff shows per file; see it with run {{cmd: \"git diff -- {}\"}}",
                    m.size(),
                    KEEP_BYTES >> 10,
                    path
                )),
            }
        }
        Ok(_) => std::fs::read(full).map(Body::of).map_err(|e| format!("it could not be read after the job: {e}")),
        Err(_) => Ok(Body::Text(Vec::new())),
    }
}

fn is_binary(b: &[u8]) -> bool {
    b[..b.len().min(8000)].contains(&0)
}

/// The worker's memory of the last snapshot: a valid "before" for the next job when nothing ran since.
#[derive(Default)]
pub(crate) struct Ledger {
    /// The last snapshot, the job generation it was taken in, and where it came from.
    last: Option<(Arc<Snapshot>, u64, String)>,
    /// Bumped at every job start and every main-process exit.
    pub generation: u64,
    pub links: TrackedLinks,
    /// The change monitor of the work tree last snapshotted, and its last snapshot
    /// ([`crate::effects_monitor`]) and where that snapshot came from (`the after of job 3`).
    pub monitor: Option<(crate::effects_monitor::Monitor, Arc<Snapshot>, String)>,
    /// What keeps the watched roots' last walk valid ([`crate::effects_watch::Quiet`]); started at the
    /// first walk, `Err(())` once the kernel refused one.
    pub quiet: Option<Result<crate::effects_watch::Quiet, ()>>,
    /// Watched roots found over the walk's limit, not walked again for a while.
    pub over_limit: crate::effects_watch::OverLimit,
    /// The last job environment's [`GitEnv`], and what it was made from: a job with the same
    /// environment reuses it (no policy filtering, no `PATH` search for git).
    pub git_env: Option<(EnvKey, Arc<GitEnv>)>,
}

/// What a job's environment is made from: its `env`, its carried `state_env`, whether it carries shell
/// state, whether it has a terminal.
pub(crate) type EnvKey = (Vec<(String, String)>, Vec<(String, String)>, bool, bool);

/// The environment git runs with for a job's ledger (the job's, without `GIT_*` and with
/// `GIT_OPTIONAL_LOCKS=0 LC_ALL=C`) and the git found on its `PATH` (`None`: none there).
///
/// Reused while jobs' environments stay the same, so a git installed on the `PATH` later is found
/// at once (a missing git is looked up again every time) but a git removed later is still named until
/// the environment changes: its runs then fail and the ledger says why.
#[derive(Debug)]
pub(crate) struct GitEnv {
    pub env: Vec<(String, String)>,
    pub program: Option<PathBuf>,
}

impl GitEnv {
    pub(crate) fn new(mut env: Vec<(String, String)>) -> GitEnv {
        env.retain(|(k, _)| !k.starts_with("GIT_") && k != "LC_ALL");
        env.push(("GIT_OPTIONAL_LOCKS".into(), "0".into()));
        env.push(("LC_ALL".into(), "C".into()));
        let program = find_git(&env);
        GitEnv { env, program }
    }
}

impl Ledger {
    /// The last snapshot, if it is a valid "before" for a job in `root` now.
    pub(crate) fn cached_before(&self, root: &Path, quiet: bool) -> Option<(Arc<Snapshot>, String)> {
        let (s, generation, how) = self.last.as_ref()?;
        (quiet && *generation == self.generation && s.root == root).then(|| (Arc::clone(s), how.clone()))
    }

    pub(crate) fn remember(&mut self, s: Arc<Snapshot>, quiet: bool, how: String) {
        self.last = quiet.then_some((s, self.generation, how));
    }
}

/// One job's "before".
pub(crate) struct JobEffects {
    pub mode: EffectsMode,
    pub root: Option<PathBuf>,
    pub before: Result<Arc<Snapshot>, String>,
    pub before_how: String,
    pub before_us: u64,
    /// The environment git runs with for this job, and the git it found.
    pub git: Arc<GitEnv>,
    /// Other jobs of the session that could write while this one ran (running, or keeping survivors).
    pub overlapped: BTreeSet<shm_proto::msg::JobId>,
    /// The watched paths' "before" ([`crate::effects_watch`]); `None` when nothing is watched.
    pub watched: Option<Arc<crate::effects_watch::Watch>>,
    /// The "before" of the watched part took no walk (the last one was still valid).
    pub watched_reused: bool,
    /// The watched part when the roots are not walked for this job ([`crate::effects_watch::OverLimit`]).
    pub watched_skipped: Option<shm_proto::msg::WatchedEffects>,
    /// git processes the "before" ran.
    pub before_git_runs: u32,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn empty() -> Snapshot {
        Snapshot {
            root: PathBuf::from("/r"),
            head: None,
            branch: None,
            entries: BTreeMap::new(),
            partial: Vec::new(),
            links_out: Vec::new(),
        }
    }

    #[test]
    fn a_long_ledger_folds_trees_changed_one_way_and_a_short_one_lists_them() {
        let entry = |p: &str, change: &str| {
            (p.as_bytes().to_vec(), PathChange { path: p.into(), change: change.into(), from: None, under: 0 })
        };
        let mut changed = vec![entry("README.md", "modified"), entry("src/lib.rs", "modified")];
        changed.extend((0..40).map(|i| entry(&format!(".venv/lib/m{i:02}.py"), "ignored")));
        changed.push(entry("src/new.rs", "untracked-new"));
        changed.extend((0..3).map(|i| entry(&format!("vendor/x/f{i}"), "untracked-new")));
        changed.push(entry("web/a.js", "untracked-new"));
        changed.push(entry("web/b.js", "committed"));
        changed.sort_by(|a, b| a.0.cmp(&b.0));
        let got: Vec<(String, String, u32)> =
            fold_trees(changed.clone()).into_iter().map(|(_, c)| (c.path, c.change, c.under)).collect();
        let want = [
            (".venv", "ignored", 40),
            ("README.md", "modified", 0),
            ("src/lib.rs", "modified", 0),
            ("src/new.rs", "untracked-new", 0),
            ("vendor", "untracked-new", 3),
            ("web/a.js", "untracked-new", 0),
            ("web/b.js", "committed", 0),
        ];
        let want = want.map(|(p, c, n)| (p.to_owned(), c.to_owned(), n));
        assert_eq!(got, want, "src/ and web/ hold paths changed two ways: not folded");
        let short: Vec<_> = changed.into_iter().filter(|(k, _)| !k.starts_with(b".venv")).collect();
        assert_eq!(fold_trees(short.clone()), short, "a ledger of 30 paths or fewer is listed whole");
    }

    #[test]
    fn status_records_are_read() {
        let mut s = empty();
        let out = b"# branch.oid abc\0# branch.head main\x001 .M N... 100644 100644 100644 h1 h2 a b.txt\x002 R. N... 100644 100644 100644 h1 h1 R100 new\0old\0? un tracked\0";
        parse_status(out, &mut s);
        assert_eq!(s.head.as_deref(), Some("abc"));
        assert_eq!(s.branch.as_deref(), Some("main"));
        assert_eq!(s.entries[b"a b.txt".as_slice()].xy, *b".M");
        assert_eq!(s.entries[b"new".as_slice()].orig.as_deref(), Some(&b"old"[..]));
        assert!(s.entries.contains_key(b"un tracked".as_slice()));
        assert_eq!(s.entries.len(), 3);
    }

    #[test]
    fn batch_output_is_split_per_name() {
        let out = b"o1 blob 3\nabc\nx:gone missing\no3 blob 0\n\n";
        let names = vec![b"a".to_vec(), b"gone".to_vec(), b"e".to_vec()];
        let m = parse_batch(out, &names);
        assert_eq!(m.get(b"a".as_slice()).map(Vec::as_slice), Some(&b"abc"[..]));
        assert!(!m.contains_key(b"gone".as_slice()));
        assert_eq!(m.get(b"e".as_slice()).map(Vec::len), Some(0));
    }

    proptest! {
        #[test]
        fn garbage_status_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let mut s = empty();
            parse_status(&bytes, &mut s);
        }

        #[test]
        fn garbage_head_paths_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512), all in any::<bool>()) {
            let _ = parse_head_paths(&bytes, all);
        }

        #[test]
        fn garbage_batch_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let names = vec![b"a".to_vec(), b"b".to_vec()];
            let _ = parse_batch(&bytes, &names);
        }
    }
}
