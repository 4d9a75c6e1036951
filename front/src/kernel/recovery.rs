//! Taking over live sessions after the front itself was restarted (docs/architecture.md, "Front crash
//! recovery"): the supervisor hands every live session's fds to the new front (`SessionAdopt`), and the
//! front rebuilds each session from its directory — settings from `session.json`, jobs and their events
//! from the journal, output from the job logs — then attaches the region and lets the pump resume at
//! the ring's published head, so no byte is lost or doubled (`sessions/journal.rs` gives the argument).
//!
//! ```no_run
//! # fn demo(k: &front::kernel::Kernel, a: front::kernel::recovery::Adopted) {
//! front::kernel::recovery::adopt(k, a).unwrap();
//! # }
//! ```

use crate::jobs::job::{unix_ns, Job};
use crate::kernel::{Kernel, Slot};
use crate::rpc::results::WorkerInfo;
use crate::sessions::journal::{self, Entry, Meta};
use crate::sessions::session::{Session, SessionSpec};
pub use crate::sessions::supervisor::Adopted;
use shm_proto::msg::{Event, Stream};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::Path;
use std::time::Instant;

/// Write the new session's settings and open its journal.
pub fn start_journal(k: &Kernel, s: &Session) {
    write_settings(k, s);
    let mut st = s.lock();
    st.open_journal(&s.spec().dir);
}

/// Write `session.json`: the session's settings and this front's database key for it.
fn write_settings(k: &Kernel, s: &Session) {
    let spec = s.spec();
    let reopen = s.lock().reopen().cloned();
    let meta = Meta {
        owner_uid: spec.owner_uid,
        cwd: spec.cwd.clone(),
        env: spec.env.clone(),
        persistent: spec.persistent,
        reopen,
        db_key: Some((k.db.boot().to_owned(), spec.serial)),
    };
    if let Err(e) = journal::write_meta(&spec.dir, &meta) {
        tracing::warn!("session '{}': cannot write its settings ({e}); it cannot be recovered", s.name());
    }
}

/// Move the rows and receipts an earlier front kept for this session under `old` to this front's key.
fn take_over_rows(k: &Kernel, s: &Session, old: Option<(String, u64)>) {
    let Some((old_boot, old_serial)) = old else { return };
    let serial = s.spec().serial;
    if old_boot == k.db.boot() && old_serial == serial {
        return;
    }
    k.receipts.rekey((&old_boot, old_serial), (k.db.boot(), serial));
    k.db.write(crate::storage::db::Write::Rekey { old_boot, old_serial, serial });
}

/// The settings an earlier incarnation of a session left in `dir` when its front or supervisor died
/// (`session.close` removes them), if that session was `uid`'s.
pub(crate) fn earlier(dir: &Path, uid: u32) -> Option<Meta> {
    journal::read_meta(dir).ok().filter(|m| m.owner_uid == uid)
}

/// Whether `dir` holds an earlier incarnation of any uid (`session.json` is there: a restart ended it).
pub(crate) fn left(dir: &Path) -> bool {
    dir.join("session.json").exists()
}

/// Whether `dir` holds an earlier incarnation another uid left (not closed: its `session.json` is there).
/// Its name is not available to `uid`, as a live session of another uid's is not: opening it would clear
/// that uid's history. Unreadable settings count as none (the directory is cleared as a stale one).
pub(crate) fn left_by_other(dir: &Path, uid: u32) -> bool {
    journal::read_meta(dir).is_ok_and(|m| m.owner_uid != uid)
}

/// What `session.json` is removed by: a closed session's history is not carried into a new one.
pub(crate) fn forget(dir: &Path) {
    let _ = std::fs::remove_file(dir.join("session.json"));
}

/// Put the jobs of the earlier incarnation (see [`earlier`]) into the newly opened `s`: their output
/// stays readable, their numbering goes on, and those that had not ended are `lost` (the restart killed
/// them). The shell state carries on from the last journaled record (afresh from this open's settings
/// when there is none); jobs already shown to the client are not announced again. Their rows and
/// receipts move over.
pub(crate) fn restore_earlier(k: &Kernel, s: &Session, meta: Meta) {
    let dir = &s.spec().dir;
    let ring = s.lock().ring();
    let Rebuilt { jobs, replay, keyed, reported, state, .. } = rebuild(dir, &s.jobs_dir(), ring, u64::MAX);
    let note = "heddle restarted while the job ran (its session's processes were killed then)".to_owned();
    let mut st = s.lock();
    for job in jobs {
        st.restore_job(job);
    }
    apply_replay(&mut st, replay);
    mark_reported(&mut st, &reported);
    let last_job = st.last_job();
    let (now, at_unix_ns) = (Instant::now(), unix_ns());
    for j in st.jobs_mut() {
        j.mark_lost(&note, now, Some(at_unix_ns));
    }
    st.restore_record(state);
    st.append_journal(&Entry::RevivedAt { note, last_job, at_unix_ns });
    let n = st.job_count();
    drop(st);
    take_over_rows(k, s, meta.db_key);
    crate::kernel::receipts::recover(k, s, keyed);
    tracing::info!("session '{}' re-opened with its {n} earlier jobs", s.name());
}

/// Apply what the journal says, in order.
fn apply_replay(st: &mut crate::sessions::session::SessionData, replay: Vec<Replay>) {
    let (now, ns) = (Instant::now(), unix_ns());
    for ev in replay {
        match ev {
            // Journals written before probe answers were left out hold them: they answered calls of
            // the front that died, and would answer the new front's probes of the same numbers.
            Replay::Event(ev) if matches!(*ev, shm_proto::msg::Event::Status { .. }) => {}
            Replay::Event(ev) => {
                st.apply(*ev, now, ns);
            }
            Replay::Revived { note, last_job, at_unix_ns } => {
                for j in st.jobs_mut().take_while(|j| j.id() <= last_job) {
                    j.mark_lost(&note, now, at_unix_ns);
                }
            }
        }
    }
}

/// Jobs whose ends the client was shown before the restart (journaled `Reported`) are not announced
/// again.
fn mark_reported(st: &mut crate::sessions::session::SessionData, reported: &BTreeSet<u64>) {
    for id in reported {
        if let Some(j) = st.job_mut(*id) {
            j.restore_reported();
        }
    }
}

/// Rebuild a handed-over session and start reading its events again.
pub fn adopt(k: &Kernel, a: Adopted) -> Result<(), String> {
    let dir = k.cfg.state_dir.join("sessions").join(&a.session);
    let meta = journal::read_meta(&dir).map_err(|e| format!("its settings could not be read ({e})"))?;
    let spec = SessionSpec {
        name: a.session.clone(),
        serial: k.next_serial(),
        owner_uid: meta.owner_uid,
        cgroup: a.cgroup,
        cwd: meta.cwd,
        env: meta.env,
        dir: dir.clone(),
        persistent: meta.persistent,
    };
    let (s, end) = Session::attach(spec, a.fds).map_err(|e| format!("its region could not be attached ({e})"))?;
    let published = end.consumer.positions().0;
    let ring = s.lock().ring();
    let Rebuilt { jobs, replay, foreign, keyed, reported, state } = rebuild(&dir, &s.jobs_dir(), ring, published);
    {
        let mut st = s.lock();
        st.set_worker(WorkerInfo { pid: a.worker_pid, uid: a.worker_uid });
        st.set_reopen(meta.reopen);
        for job in jobs {
            st.restore_job(job);
        }
        apply_replay(&mut st, replay);
        mark_reported(&mut st, &reported);
        if state.is_some() {
            st.restore_record(state);
        }
        // Jobs of a worker that was replaced while no front was there to journal it (a front killed
        // between the supervisor starting the new worker and the journal's `Revived`): the old worker's
        // processes were killed with it.
        let note = "the session's worker was replaced while heddle restarted, and the job's processes were killed with the old one";
        let now = Instant::now();
        for id in foreign {
            if let Some(j) = st.job_mut(id) {
                j.mark_lost(note, now, None);
            }
        }
        st.open_journal(&dir);
    }
    take_over_rows(k, &s, meta.db_key);
    crate::kernel::receipts::recover(k, &s, keyed);
    write_settings(k, &s);
    let n = s.lock().job_count();
    tracing::info!("took over session '{}' ({n} jobs, ring head {published})", a.session);
    k.registry().slots.insert(a.session, Slot::Open(s.clone()));
    k.registry_changed.notify_all();
    k.pump.add(s.clone(), end);
    crate::kernel::unsent::settle(k, &s);
    k.record_session(&s);
    Ok(())
}

/// A journaled batch: the ring it was read from (`None`: written before rings were named), its `to`
/// position, each job log's length before it, and its events.
type Batch = (Option<u64>, u64, Vec<(u64, u64)>, Vec<Event>);

/// What a restarted front applies to a rebuilt session, in journal order.
#[derive(Debug)]
enum Replay {
    Event(Box<Event>),
    /// The worker was replaced: unfinished jobs up to `last_job` are lost (at `at_unix_ns`, when the
    /// journal says; else at the rebuild).
    Revived {
        note: String,
        last_job: u64,
        at_unix_ns: Option<u64>,
    },
}

/// What a rebuild gives: the jobs (with their stored output), what to apply to them in order, and the
/// jobs submitted to another ring than the one being taken over (their worker is gone: if they had not
/// ended they are lost).
struct Rebuilt {
    jobs: Vec<Job>,
    replay: Vec<Replay>,
    foreign: Vec<u64>,
    /// The receipts of keyed runs, as journaled (see `receipts::recover`).
    keyed: Vec<String>,
    /// Jobs whose ends were shown to the client ([`Entry::Reported`]).
    reported: BTreeSet<u64>,
    /// The shell-state record the journal's [`Entry::State`] diffs add up to.
    state: Option<(u64, shm_proto::capture::Items)>,
}

/// Rebuild a session from its journal and job logs, for the event ring `ring` whose published head is
/// `published`. A last batch of that ring that reaches past the head was not released: its events are
/// dropped and its job logs cut back to their lengths before it. Batches of any other ring (before a
/// [`Entry::Revived`], or of a worker started by a front that died before the journal heard of it)
/// were read from a ring that is gone: they are as complete as they will ever be, and kept.
fn rebuild(dir: &Path, jobs_dir: &Path, ring: u64, published: u64) -> Rebuilt {
    let mut cmds = BTreeMap::new();
    let mut foreign = Vec::new();
    let mut replay = Vec::new();
    let mut batches: Vec<Batch> = Vec::new();
    let mut tag: Option<u64> = None;
    let mut keyed = Vec::new();
    let mut reported = BTreeSet::new();
    let mut state = None;
    for entry in journal::read(dir) {
        match entry {
            Entry::Job { id, cmd } => {
                cmds.insert(id, cmd);
                if tag.is_some_and(|t| t != ring) {
                    foreign.push(id);
                }
            }
            Entry::Batch { to, before, events: evs, .. } => batches.push((tag, to, before, evs)),
            Entry::Revived { note, last_job } => {
                replay.extend(batches.drain(..).flat_map(|(_, _, _, evs)| evs).map(|e| Replay::Event(Box::new(e))));
                replay.push(Replay::Revived { note, last_job, at_unix_ns: None });
            }
            Entry::RevivedAt { note, last_job, at_unix_ns } => {
                replay.extend(batches.drain(..).flat_map(|(_, _, _, evs)| evs).map(|e| Replay::Event(Box::new(e))));
                replay.push(Replay::Revived { note, last_job, at_unix_ns: Some(at_unix_ns) });
            }
            Entry::Ring { id } => tag = Some(id),
            Entry::Keyed { receipt, .. } => keyed.push(receipt),
            Entry::Reported { jobs } => reported.extend(jobs),
            Entry::State { version, set, removed } => {
                let (v, items) = state.get_or_insert_with(|| (0, shm_proto::capture::Items::new()));
                *v = version;
                items.extend(set);
                for k in removed {
                    items.remove(&k);
                }
            }
        }
    }
    let mut cut: BTreeMap<u64, u64> = BTreeMap::new();
    for (tag, to, before, evs) in batches {
        let this_ring = tag.is_none_or(|t| t == ring);
        if this_ring && to > published {
            cut.extend(before);
        } else {
            replay.extend(evs.into_iter().map(|e| Replay::Event(Box::new(e))));
        }
    }
    let jobs = cmds
        .into_iter()
        .map(|(id, cmd)| restore_job(id, cmd, &jobs_dir.join(format!("{id}.log")), cut.get(&id).copied()))
        .collect();
    Rebuilt { jobs, replay, foreign, keyed, reported, state }
}

/// A job whose log is replayed (up to `limit` bytes of the file) into a fresh store at the same path.
///
/// The log is first moved aside to `N.log.old`, replayed from there, and the copy removed. A front killed
/// in between leaves `N.log.old` whole and `N.log` partly rewritten: the next restore replays the `.old`
/// again and never moves the partial copy over it (that lost a job's bytes when a front was killed
/// twice during takeovers: found by the torture run).
fn restore_job(id: u64, cmd: String, path: &Path, limit: Option<u64>) -> Job {
    let old = path.with_extension("log.old");
    let had = if old.exists() {
        let _ = std::fs::remove_file(path);
        true
    } else {
        std::fs::rename(path, &old).is_ok()
    };
    let mut job = Job::new(id, cmd, path.to_owned());
    if had {
        let now = Instant::now();
        // What retention removed is carried over exactly when its record matches the punched prefix
        // (a crash between the punch and the record's write leaves them apart: then counts restart).
        let carried = crate::output::retention::load_removed(path).filter(|r| r.file == punched_prefix(&old));
        if let Some(r) = &carried {
            job.carry_removed(r);
        }
        let skipped =
            for_each_record(&old, limit.unwrap_or(u64::MAX), |stream, ns, data| job.on_output(stream, data, now, ns));
        if skipped > 0 && carried.is_none() {
            job.note(format!(
                "retention had removed the first {skipped} bytes of this job's output log before the front restarted; byte counts and line numbers now count only what was kept"
            ));
        }
        job.flush();
        let _ = std::fs::remove_file(&old);
    }
    job
}

/// Call `f` for every whole record in the first `limit` bytes of a job log (a torn tail is ignored).
/// A prefix retention punched out (zeros; a record never starts with 0) is skipped; returns its length.
fn for_each_record(path: &Path, limit: u64, mut f: impl FnMut(Stream, u64, &[u8])) -> u64 {
    let Ok(mut file) = std::fs::File::open(path) else { return 0 };
    let skipped = skip_punched(&mut file);
    let mut r = std::io::BufReader::new(file.take(limit.saturating_sub(skipped)));
    let mut header = [0u8; crate::output::store::RECORD_HEADER];
    let mut data = Vec::new();
    while r.read_exact(&mut header).is_ok() {
        let stream = match header[0] {
            1 => Stream::Stdout,
            2 => Stream::Stderr,
            _ => return skipped,
        };
        let len = u32::from_le_bytes([header[4], header[5], header[6], header[7]]) as usize;
        let mut ns = [0u8; 8];
        ns.copy_from_slice(&header[8..16]);
        data.resize(len, 0);
        if r.read_exact(&mut data).is_err() {
            return skipped;
        }
        f(stream, u64::from_le_bytes(ns), &data);
    }
    skipped
}

/// Bytes of the leading hole of the log at `path` (0 when it has none or cannot be read).
fn punched_prefix(path: &Path) -> u64 {
    std::fs::File::open(path).map_or(0, |mut f| skip_punched(&mut f))
}

/// Move past a leading hole (and the zeroed bytes of its last block); returns the bytes skipped.
fn skip_punched(file: &mut std::fs::File) -> u64 {
    use std::io::{Seek, SeekFrom};
    let mut first = [0u8; 1];
    if file.read_exact(&mut first).is_err() || first[0] != 0 {
        let _ = file.seek(SeekFrom::Start(0));
        return 0;
    }
    let data = nix::unistd::lseek(&*file, 0, nix::unistd::Whence::SeekData).unwrap_or(0).max(0) as u64;
    let _ = file.seek(SeekFrom::Start(data));
    let mut at = data;
    let mut block = [0u8; 4096];
    while let Ok(n @ 1..) = file.read(&mut block) {
        if let Some(i) = block[..n].iter().position(|b| *b != 0) {
            at += i as u64;
            break;
        }
        at += n as u64;
    }
    let _ = file.seek(SeekFrom::Start(at));
    at
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::store::OutputStore;

    #[test]
    fn a_log_retention_punched_is_replayed_from_its_first_kept_record() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("1.log");
        let mut store = OutputStore::create(path.clone());
        for i in 0..40u8 {
            store.append(Stream::Stdout, &[i + 1; 10_000], 0);
        }
        store.remove_oldest(3 * 10_016, "cap");
        let mut got = Vec::new();
        let skipped = for_each_record(&path, u64::MAX, |_, _, d| got.push(d[0]));
        assert_eq!((skipped, got), (37 * 10_016, vec![38, 39, 40]));
    }

    #[test]
    fn a_restore_interrupted_by_a_kill_is_done_again_from_the_whole_copy() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("4.log");
        let mut store = OutputStore::create(path.clone());
        for i in 0..50u8 {
            store.append(Stream::Stdout, &[i + 1; 1000], 0);
        }
        store.flush();
        drop(store);
        // The first restore moved the log aside and rewrote part of it before its front was killed.
        std::fs::rename(&path, path.with_extension("log.old")).unwrap();
        let mut partial = OutputStore::create(path.clone());
        partial.append(Stream::Stdout, &[1; 1000], 0);
        partial.flush();
        drop(partial);
        let job = restore_job(4, "seq".into(), &path, None);
        assert_eq!(job.counts(), [50_000, 0], "every byte is back");
        assert!(!path.with_extension("log.old").exists(), "the copy is removed once replayed");
        let again = restore_job(4, "seq".into(), &path, None);
        assert_eq!(again.counts(), [50_000, 0], "and a later restore finds them all");
    }

    #[test]
    fn an_unreleased_last_batch_is_cut_back_and_a_released_one_kept() {
        let dir = tempfile::tempdir().unwrap();
        let jobs = dir.path().join("jobs");
        std::fs::create_dir_all(&jobs).unwrap();
        let mut store = OutputStore::create(jobs.join("1.log"));
        store.append(Stream::Stdout, b"first ", 0);
        store.flush();
        let mid = store.durable_len();
        store.append(Stream::Stdout, b"second", 0);
        store.flush();
        let mut j = journal::Journal::open(dir.path());
        j.append(&Entry::Job { id: 1, cmd: "x".into() });
        j.append(&Entry::Batch { from: 0, to: 64, before: vec![(1, 0)], events: vec![] });
        let exit = Event::Exited { job: 1, code: Some(0), signal: None, at_unix_ns: 0, killed: false };
        j.append(&Entry::Batch { from: 64, to: 192, before: vec![(1, mid)], events: vec![exit] });
        // The second batch was not released: head 64.
        let Rebuilt { jobs: mut got, replay: events, .. } = rebuild(dir.path(), &jobs, 0, 64);
        assert!(events.is_empty());
        assert_eq!(got[0].counts(), [6, 0]);
        drop(got.pop());
        // Released (head 192): everything stays. The log was rewritten with the first batch only, so
        // write the second again as the dead front had.
        let mut store = OutputStore::create(jobs.join("1.log"));
        store.append(Stream::Stdout, b"first second", 0);
        store.flush();
        let Rebuilt { jobs: got, replay: events, .. } = rebuild(dir.path(), &jobs, 0, 192);
        assert_eq!((got[0].counts(), events.len()), ([12, 0], 1));
    }

    #[test]
    fn batches_before_a_revival_are_kept_and_its_unfinished_jobs_lost() {
        let dir = tempfile::tempdir().unwrap();
        let jobs = dir.path().join("jobs");
        std::fs::create_dir_all(&jobs).unwrap();
        let mut j = journal::Journal::open(dir.path());
        j.append(&Entry::Job { id: 1, cmd: "x".into() });
        let started = Event::Started { job: 1, pid: 7, at_unix_ns: 0, prestarted: false, cgroup: "slot-1".into() };
        j.append(&Entry::Batch { from: 0, to: 500, before: vec![], events: vec![started] });
        j.append(&Entry::Revived { note: "the worker died".into(), last_job: 1 });
        j.append(&Entry::Job { id: 2, cmd: "y".into() });
        // The new ring's head is 64: the old ring's batch (to 500) is still applied, not cut.
        let Rebuilt { jobs: got, replay, .. } = rebuild(dir.path(), &jobs, 0, 64);
        assert_eq!(got.len(), 2);
        match replay.as_slice() {
            [Replay::Event(ev), Replay::Revived { last_job: 1, .. }] => {
                assert!(matches!(**ev, Event::Started { .. }), "{ev:?}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_worker_started_before_the_journal_heard_of_it_cuts_nothing_of_the_old_ring() {
        // A front re-opened the session (the supervisor started worker 2 with ring 22) and was killed
        // before it wrote anything to the journal: the next front takes over ring 22 at head 0.
        let dir = tempfile::tempdir().unwrap();
        let jobs = dir.path().join("jobs");
        std::fs::create_dir_all(&jobs).unwrap();
        let mut store = OutputStore::create(jobs.join("1.log"));
        store.append(Stream::Stdout, b"all of it", 0);
        store.flush();
        let mut j = journal::Journal::open(dir.path());
        j.append(&Entry::Ring { id: 11 });
        j.append(&Entry::Job { id: 1, cmd: "x".into() });
        let exit = Event::Exited { job: 1, code: Some(0), signal: None, at_unix_ns: 0, killed: false };
        j.append(&Entry::Batch { from: 0, to: 9000, before: vec![(1, 0)], events: vec![exit] });
        j.append(&Entry::Job { id: 2, cmd: "sleep 9".into() });
        let Rebuilt { jobs: got, replay, foreign, .. } = rebuild(dir.path(), &jobs, 22, 0);
        assert_eq!(got[0].counts(), [9, 0], "the old ring's batch is kept whole");
        assert_eq!(replay.len(), 1, "and its events applied: {replay:?}");
        assert_eq!(foreign, [1, 2], "both jobs belong to the old worker");
        // The same journal taken over on its own ring (11) at head 0 cuts that unreleased batch.
        let mut store = OutputStore::create(jobs.join("1.log"));
        store.append(Stream::Stdout, b"all of it", 0);
        store.flush();
        let Rebuilt { jobs: got, replay, foreign, .. } = rebuild(dir.path(), &jobs, 11, 0);
        assert_eq!((got[0].counts(), replay.len(), foreign.len()), ([0, 0], 0, 0));
    }

    #[test]
    fn keyed_receipts_are_read_back_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let jobs = dir.path().join("jobs");
        std::fs::create_dir_all(&jobs).unwrap();
        let mut j = journal::Journal::open(dir.path());
        j.append(&Entry::Job { id: 1, cmd: "x".into() });
        j.append(&Entry::Keyed { job: 1, receipt: "{\"a\":1}".into() });
        j.append(&Entry::Job { id: 2, cmd: "y".into() });
        j.append(&Entry::Keyed { job: 2, receipt: "{\"b\":2}".into() });
        let Rebuilt { jobs: got, keyed, .. } = rebuild(dir.path(), &jobs, 0, 0);
        assert_eq!((got.len(), keyed), (2, vec!["{\"a\":1}".to_owned(), "{\"b\":2}".to_owned()]));
    }
}
