//! The front's embedded database: `<state-dir>/heddle.db`, SQLite in WAL mode, holding sessions, shell
//! state records, job records, receipts, delivered announcements and the audit log (docs/architecture.md,
//! "Storage").
//!
//! Writes never run on a caller's thread: [`Db::write`] queues a [`Write`] on a channel and one writer
//! thread applies what is queued in a single transaction, so neither the pump nor a request waits on the
//! disk. [`Db::sync`] waits until everything queued before it is committed (shutdown, tests). Reads
//! happen once, at start ([`Db::load_receipts`], [`Db::running_jobs`]); the kernel answers from memory, but
//! for a receipt looked up by id that is no longer kept in memory ([`Db::receipt`]).
//!
//! The schema is versioned: `schema_version` holds one row, migrations in [`MIGRATIONS`] run in order
//! inside one transaction each, and a database written by a newer heddle is refused with
//! [`DbError::TooNew`] rather than misread. WAL with `synchronous=NORMAL` means a crash (SIGKILL, power
//! loss) loses at most the last transactions, never the database: SQLite rolls a torn write back on open.
//!
//! ```
//! let dir = tempfile::tempdir().unwrap();
//! let db = front::storage::db::Db::open(&dir.path().join("heddle.db")).unwrap();
//! db.write(front::storage::db::Write::Audit { uid: 0, op: "kill".into(), session: Some("s".into()), job: Some(1), detail: "".into() });
//! db.sync();
//! assert_eq!(db.count("audit").unwrap(), 1);
//! ```

use crossbeam_channel::{Receiver, Sender};
use rusqlite::{params, Connection, OptionalExtension};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::thread::JoinHandle;

/// The columns [`receipt_row`] reads, in its order.
const RECEIPT_COLUMNS: &str =
    "id, op, session, owner_uid, idempotency_key, fingerprint, admitted_at_ms, outcome, job, result, boot, serial";

fn receipt_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<ReceiptRow> {
    Ok(ReceiptRow {
        id: r.get(0)?,
        op: r.get(1)?,
        session: r.get(2)?,
        owner_uid: r.get(3)?,
        idempotency_key: r.get(4)?,
        fingerprint: r.get(5)?,
        admitted_at_ms: r.get(6)?,
        outcome: r.get(7)?,
        job: r.get(8)?,
        result: r.get(9)?,
        boot: r.get(10)?,
        serial: r.get(11)?,
    })
}

/// The schema this build writes.
pub const SCHEMA_VERSION: i64 = 2;

/// Migration `i` brings the schema from version `i` to `i + 1`.
pub const MIGRATIONS: [&str; 2] = [
    r#"
CREATE TABLE sessions (
    serial INTEGER NOT NULL, name TEXT NOT NULL, owner_uid INTEGER NOT NULL, cwd TEXT NOT NULL,
    cgroup TEXT NOT NULL, opened_at_ms INTEGER NOT NULL, closed_at_ms INTEGER, end_note TEXT,
    boot TEXT NOT NULL, PRIMARY KEY (boot, serial));
CREATE TABLE state_records (
    boot TEXT NOT NULL, serial INTEGER NOT NULL, version INTEGER NOT NULL, items TEXT NOT NULL,
    PRIMARY KEY (boot, serial, version));
CREATE TABLE jobs (
    boot TEXT NOT NULL, serial INTEGER NOT NULL, session TEXT NOT NULL, job INTEGER NOT NULL,
    cmd TEXT NOT NULL, state TEXT NOT NULL, exit_code INTEGER, signal INTEGER,
    stdout_bytes INTEGER NOT NULL, stderr_bytes INTEGER NOT NULL, started_at_ms INTEGER NOT NULL,
    duration_ms REAL NOT NULL, log_path TEXT NOT NULL, record TEXT NOT NULL,
    PRIMARY KEY (boot, serial, job));
CREATE TABLE receipts (
    id TEXT PRIMARY KEY, op TEXT NOT NULL, session TEXT, owner_uid INTEGER NOT NULL,
    idempotency_key TEXT, fingerprint TEXT NOT NULL, admitted_at_ms INTEGER NOT NULL,
    outcome TEXT NOT NULL, job INTEGER, result TEXT, boot TEXT NOT NULL, serial INTEGER);
CREATE UNIQUE INDEX receipts_key ON receipts (owner_uid, session, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE TABLE announcements (
    boot TEXT NOT NULL, session TEXT NOT NULL, job INTEGER NOT NULL, at_ms INTEGER NOT NULL);
CREATE TABLE audit (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, at_ms INTEGER NOT NULL, uid INTEGER NOT NULL, op TEXT NOT NULL,
    session TEXT, job INTEGER, detail TEXT NOT NULL);
"#,
    r#"
CREATE TABLE check_runs (
    owner_uid INTEGER NOT NULL, project TEXT NOT NULL, name TEXT NOT NULL, session TEXT NOT NULL,
    job INTEGER NOT NULL, at_ms INTEGER NOT NULL, state TEXT NOT NULL, exit_code INTEGER,
    duration_ms REAL NOT NULL, counts TEXT);
CREATE INDEX check_runs_by_check ON check_runs (owner_uid, project, name, at_ms);
"#,
];

/// Errors opening the database.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DbError {
    #[error("cannot open or migrate the database {path}")]
    Sqlite {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    #[error(
        "the database {path} has schema version {found}, newer than the {SCHEMA_VERSION} this heddle knows; \
         run the newer heddle or move the database aside"
    )]
    TooNew { path: PathBuf, found: i64 },
    #[error("cannot start the database writer thread")]
    Thread(#[source] std::io::Error),
}

/// One row to write.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Write {
    SessionOpened {
        serial: u64,
        name: String,
        owner_uid: u32,
        cwd: String,
        cgroup: String,
    },
    SessionEnded {
        serial: u64,
        note: String,
    },
    StateRecord {
        serial: u64,
        version: u64,
        items: String,
    },
    /// A job record (insert or replace): `record` is the job's summary as JSON.
    Job {
        serial: u64,
        session: String,
        job: u64,
        row: JobRow,
    },
    Receipt(ReceiptRow),
    Announced {
        session: String,
        job: u64,
    },
    Audit {
        uid: u32,
        op: String,
        session: Option<String>,
        job: Option<u64>,
        detail: String,
    },
    /// A check's run ended and was parsed (`kernel::check_run`).
    CheckRun(CheckRunRow),
    /// A session recorded by front `old_boot` as `old_serial` is carried on by this front as `serial`
    /// (taken over after a front restart, or re-opened after a supervisor restart): its session, state,
    /// job and receipt rows move to the new key, so later rows replace them instead of sitting beside them.
    Rekey {
        old_boot: String,
        old_serial: u64,
        serial: u64,
    },
}

/// The columns of a job record.
#[derive(Clone, Debug)]
pub struct JobRow {
    pub cmd: String,
    pub state: String,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
    pub started_at_ms: u64,
    pub duration_ms: f64,
    pub log_path: String,
    pub record: String,
}

/// The columns of a check's run (`counts` as JSON, `null` when the parser found none).
#[derive(Clone, Debug, PartialEq)]
pub struct CheckRunRow {
    pub owner_uid: u32,
    pub project: String,
    pub name: String,
    pub session: String,
    pub job: u64,
    pub at_ms: u64,
    pub state: String,
    pub exit_code: Option<i32>,
    pub duration_ms: f64,
    pub counts: Option<String>,
}

/// The columns of an audit line.
#[derive(Clone, Debug, PartialEq)]
pub struct AuditRow {
    pub at_ms: u64,
    pub op: String,
    pub session: Option<String>,
    pub job: Option<u64>,
    pub detail: String,
}

/// The columns of a receipt.
#[derive(Clone, Debug, PartialEq)]
pub struct ReceiptRow {
    pub id: String,
    pub op: String,
    pub session: Option<String>,
    pub owner_uid: u32,
    pub idempotency_key: Option<String>,
    pub fingerprint: String,
    pub admitted_at_ms: u64,
    /// The outcome as JSON (`"admitted"` or `{"rejected": …}`).
    pub outcome: String,
    pub job: Option<u64>,
    /// The result answered at admission, as JSON.
    pub result: Option<String>,
    /// The front (boot id) and session incarnation (serial) the mutation acted on.
    pub boot: String,
    pub serial: Option<u64>,
}

enum Msg {
    Write(Box<Write>),
    Sync(Sender<()>),
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db").finish_non_exhaustive()
    }
}

/// The database: a writer thread fed by a channel, plus a connection for the reads done at start.
pub struct Db {
    tx: Sender<Msg>,
    /// Writes held back until the next [`Db::write`], [`Db::flush`] or [`Db::sync`] (see
    /// [`Db::write_later`]).
    later: Mutex<Vec<Write>>,
    reader: Mutex<Connection>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// Distinguishes this front's sessions from an earlier front's (serials restart at 1).
    boot: String,
}

impl Db {
    /// Open (creating and migrating as needed) the database at `path`.
    pub fn open(path: &Path) -> Result<Db, DbError> {
        let sqlite = |source| DbError::Sqlite { path: path.to_owned(), source };
        let mut conn = Connection::open(path).map_err(sqlite)?;
        configure(&conn).map_err(sqlite)?;
        let found = migrate(&mut conn).map_err(sqlite)?;
        if found > SCHEMA_VERSION {
            return Err(DbError::TooNew { path: path.to_owned(), found });
        }
        let writer = Connection::open(path).map_err(sqlite)?;
        configure(&writer).map_err(sqlite)?;
        let (tx, rx) = crossbeam_channel::unbounded();
        let boot = format!("{:x}", shm_proto::sys::unix_ns());
        let b = boot.clone();
        let thread = std::thread::Builder::new()
            .name("db-writer".into())
            .spawn(move || {
                let _ = shm_proto::sys::background_thread();
                writer_loop(writer, rx, b)
            })
            .map_err(DbError::Thread)?;
        Ok(Db { tx, later: Mutex::default(), reader: Mutex::new(conn), thread: Mutex::new(Some(thread)), boot })
    }

    /// This front's boot id (the `boot` column).
    pub fn boot(&self) -> &str {
        &self.boot
    }

    /// Queue a write; never blocks. Writes held back by [`Db::write_later`] go first, in their order.
    pub fn write(&self, w: Write) {
        self.flush();
        let _ = self.tx.send(Msg::Write(Box::new(w)));
    }

    /// Queue a write without waking the writer thread now: it goes with the next [`Db::write`] (or
    /// [`Db::flush`], [`Db::sync`]). A `run` admits its receipt so, just before its worker is told of
    /// the job: waking the writer there put its commit on a CPU the job's start needed, and the call's
    /// own rows follow its answer ([`crate::kernel::Kernel::after_answer`], which flushes), so the two
    /// are committed together. Nothing is lost: the writer commits after the answer either way, and a
    /// keyed run's receipt is in its session's journal before the worker hears of the job.
    pub fn write_later(&self, w: Write) {
        self.later.lock().unwrap_or_else(|e| e.into_inner()).push(w);
    }

    /// Queue the writes held back by [`Db::write_later`].
    pub fn flush(&self) {
        let held = std::mem::take(&mut *self.later.lock().unwrap_or_else(|e| e.into_inner()));
        for w in held {
            let _ = self.tx.send(Msg::Write(Box::new(w)));
        }
    }

    /// Wait until every write queued before this call is committed.
    pub fn sync(&self) {
        self.flush();
        let (tx, rx) = crossbeam_channel::bounded(1);
        if self.tx.send(Msg::Sync(tx)).is_ok() {
            let _ = rx.recv();
        }
    }

    /// The receipts a starting front keeps in memory, oldest first: every keyed one (idempotency needs
    /// them at hand) and the `recent` latest without a key. Older ones are read back by id
    /// ([`Db::receipt`]).
    pub fn load_receipts(&self, recent: usize) -> rusqlite::Result<Vec<ReceiptRow>> {
        let conn = self.reader.lock().unwrap_or_else(|e| e.into_inner());
        let mut stmt = conn.prepare(&format!(
            "SELECT {RECEIPT_COLUMNS}, rowid AS seq FROM receipts WHERE idempotency_key IS NOT NULL \
             UNION ALL SELECT * FROM (SELECT {RECEIPT_COLUMNS}, rowid AS seq FROM receipts \
             WHERE idempotency_key IS NULL ORDER BY seq DESC LIMIT ?1) ORDER BY admitted_at_ms, seq",
        ))?;
        let rows = stmt.query_map(params![i64::try_from(recent).unwrap_or(i64::MAX)], receipt_row)?;
        rows.collect()
    }

    /// The stored receipt `id` (committed: [`Db::sync`] first for one admitted just now).
    pub fn receipt(&self, id: &str) -> rusqlite::Result<Option<ReceiptRow>> {
        let conn = self.reader.lock().unwrap_or_else(|e| e.into_inner());
        conn.query_row(&format!("SELECT {RECEIPT_COLUMNS} FROM receipts WHERE id = ?1"), params![id], receipt_row)
            .optional()
    }

    /// Mark every job an earlier front recorded as `running` as `lost` (its session did not survive that
    /// front); returns how many.
    pub fn lose_orphans(&self) -> rusqlite::Result<usize> {
        let conn = self.reader.lock().unwrap_or_else(|e| e.into_inner());
        conn.execute(
            "UPDATE jobs SET state = 'lost', record = json_set(record, '$.state', 'lost') \
             WHERE state = 'running' AND boot != ?1",
            params![self.boot],
        )
    }

    /// The stored record of job `job` of session incarnation `serial` of front `boot`.
    pub fn job_record(&self, boot: &str, serial: u64, job: u64) -> rusqlite::Result<Option<String>> {
        let conn = self.reader.lock().unwrap_or_else(|e| e.into_inner());
        conn.query_row(
            "SELECT record FROM jobs WHERE boot = ?1 AND serial = ?2 AND job = ?3",
            params![boot, serial, job],
            |r| r.get(0),
        )
        .optional()
    }

    /// The last `limit` runs of check `name` of `project` by `owner_uid`, newest first (flush first with
    /// [`Db::sync`] to see the latest).
    pub fn check_runs(
        &self,
        owner_uid: u32,
        project: &str,
        name: &str,
        limit: u32,
    ) -> rusqlite::Result<Vec<CheckRunRow>> {
        let conn = self.reader.lock().unwrap_or_else(|e| e.into_inner());
        let mut stmt = conn.prepare(
            "SELECT owner_uid, project, name, session, job, at_ms, state, exit_code, duration_ms, counts FROM check_runs \
             WHERE owner_uid = ?1 AND project = ?2 AND name = ?3 ORDER BY at_ms DESC, rowid DESC LIMIT ?4",
        )?;
        let rows = stmt.query_map(params![owner_uid, project, name, limit], |r| {
            Ok(CheckRunRow {
                owner_uid: r.get(0)?,
                project: r.get(1)?,
                name: r.get(2)?,
                session: r.get(3)?,
                job: r.get(4)?,
                at_ms: r.get(5)?,
                state: r.get(6)?,
                exit_code: r.get(7)?,
                duration_ms: r.get(8)?,
                counts: r.get(9)?,
            })
        })?;
        rows.collect()
    }

    /// The last `limit` audit lines of operation `op` by `uid`, newest first (flush first with
    /// [`Db::sync`] to see the latest).
    pub fn audit_lines(&self, uid: u32, op: &str, limit: u32) -> rusqlite::Result<Vec<AuditRow>> {
        let conn = self.reader.lock().unwrap_or_else(|e| e.into_inner());
        let mut stmt = conn.prepare(
            "SELECT at_ms, op, session, job, detail FROM audit WHERE uid = ?1 AND op = ?2 ORDER BY seq DESC LIMIT ?3",
        )?;
        let rows = stmt.query_map(params![uid, op, limit], |r| {
            Ok(AuditRow { at_ms: r.get(0)?, op: r.get(1)?, session: r.get(2)?, job: r.get(3)?, detail: r.get(4)? })
        })?;
        rows.collect()
    }

    /// Rows in `table` (tests and `describe`).
    pub fn count(&self, table: &str) -> rusqlite::Result<u64> {
        let conn = self.reader.lock().unwrap_or_else(|e| e.into_inner());
        let ok = ["sessions", "state_records", "jobs", "receipts", "announcements", "audit"].contains(&table);
        if !ok {
            return Err(rusqlite::Error::InvalidParameterName(table.to_owned()));
        }
        conn.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        self.sync();
        let (tx, _) = crossbeam_channel::unbounded();
        drop(std::mem::replace(&mut self.tx, tx));
        if let Some(t) = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = t.join();
        }
    }
}

fn configure(conn: &Connection) -> rusqlite::Result<()> {
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    Ok(())
}

/// Bring the schema up to [`SCHEMA_VERSION`]; returns the version found (which may be newer).
fn migrate(conn: &mut Connection) -> rusqlite::Result<i64> {
    conn.execute_batch("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")?;
    let found: Option<i64> = conn.query_row("SELECT max(version) FROM schema_version", [], |r| r.get(0))?;
    let found = found.unwrap_or(0);
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(usize::try_from(found).unwrap_or(usize::MAX)) {
        let tx = conn.transaction()?;
        tx.execute_batch(sql)?;
        tx.execute("DELETE FROM schema_version", [])?;
        tx.execute(
            "INSERT INTO schema_version (version) VALUES (?1)",
            params![i64::try_from(i + 1).unwrap_or(i64::MAX)],
        )?;
        tx.commit()?;
    }
    Ok(found)
}

fn writer_loop(mut conn: Connection, rx: Receiver<Msg>, boot: String) {
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        batch.extend(rx.try_iter().take(4096));
        let mut syncs = Vec::new();
        let result = (|| -> rusqlite::Result<()> {
            let tx = conn.transaction()?;
            for msg in batch {
                match msg {
                    Msg::Write(w) => apply(&tx, &boot, *w)?,
                    Msg::Sync(s) => syncs.push(s),
                }
            }
            tx.commit()
        })();
        if let Err(e) = result {
            tracing::warn!("writing the database failed: {e}; the batch is dropped");
        }
        for s in syncs {
            let _ = s.send(());
        }
    }
}

/// Run one statement, compiled once per connection: SQLite's parser costs more than the row's insert.
fn exec(tx: &rusqlite::Transaction<'_>, sql: &str, p: impl rusqlite::Params) -> rusqlite::Result<usize> {
    tx.prepare_cached(sql)?.execute(p)
}

fn apply(tx: &rusqlite::Transaction<'_>, boot: &str, w: Write) -> rusqlite::Result<()> {
    let now = shm_proto::sys::unix_ns() / 1_000_000;
    match w {
        Write::SessionOpened { serial, name, owner_uid, cwd, cgroup } => exec(
            tx,
            "INSERT OR REPLACE INTO sessions (boot, serial, name, owner_uid, cwd, cgroup, opened_at_ms) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![boot, serial, name, owner_uid, cwd, cgroup, now],
        ),
        Write::SessionEnded { serial, note } => exec(
            tx,
            "UPDATE sessions SET closed_at_ms = ?3, end_note = ?4 WHERE boot = ?1 AND serial = ?2",
            params![boot, serial, now, note],
        ),
        Write::StateRecord { serial, version, items } => exec(
            tx,
            "INSERT OR REPLACE INTO state_records (boot, serial, version, items) VALUES (?1, ?2, ?3, ?4)",
            params![boot, serial, version, items],
        ),
        Write::Job { serial, session, job, row } => exec(
            tx,
            "INSERT OR REPLACE INTO jobs (boot, serial, session, job, cmd, state, exit_code, signal, stdout_bytes, \
             stderr_bytes, started_at_ms, duration_ms, log_path, record) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
            params![
                boot,
                serial,
                session,
                job,
                row.cmd,
                row.state,
                row.exit_code,
                row.signal,
                row.stdout_bytes,
                row.stderr_bytes,
                row.started_at_ms,
                row.duration_ms,
                row.log_path,
                row.record
            ],
        ),
        Write::Receipt(r) => exec(
            tx,
            "INSERT OR REPLACE INTO receipts (id, op, session, owner_uid, idempotency_key, fingerprint, \
             admitted_at_ms, outcome, job, result, boot, serial) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
            params![
                r.id,
                r.op,
                r.session,
                r.owner_uid,
                r.idempotency_key,
                r.fingerprint,
                r.admitted_at_ms,
                r.outcome,
                r.job,
                r.result,
                r.boot,
                r.serial
            ],
        ),
        Write::Announced { session, job } => exec(
            tx,
            "INSERT INTO announcements (boot, session, job, at_ms) VALUES (?1, ?2, ?3, ?4)",
            params![boot, session, job, now],
        ),
        Write::CheckRun(r) => exec(
            tx,
            "INSERT INTO check_runs (owner_uid, project, name, session, job, at_ms, state, exit_code, duration_ms, counts) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            params![r.owner_uid, r.project, r.name, r.session, r.job, r.at_ms, r.state, r.exit_code, r.duration_ms, r.counts],
        ),
        Write::Audit { uid, op, session, job, detail } => exec(
            tx,
            "INSERT INTO audit (at_ms, uid, op, session, job, detail) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![now, uid, op, session, job, detail],
        ),
        Write::Rekey { old_boot, old_serial, serial } => {
            for table in ["sessions", "state_records", "jobs", "receipts"] {
                tx.execute(
                    &format!("UPDATE OR REPLACE {table} SET boot = ?1, serial = ?2 WHERE boot = ?3 AND serial = ?4"),
                    params![boot, serial, old_boot, old_serial],
                )?;
            }
            Ok(0)
        }
    }
    .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn receipt(id: &str, key: Option<&str>) -> ReceiptRow {
        ReceiptRow {
            id: id.into(),
            op: "run".into(),
            session: Some("s".into()),
            owner_uid: 1000,
            idempotency_key: key.map(Into::into),
            fingerprint: "f".into(),
            admitted_at_ms: 1,
            outcome: "\"admitted\"".into(),
            job: Some(1),
            result: None,
            boot: "b".into(),
            serial: Some(1),
        }
    }

    #[test]
    fn receipts_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("heddle.db");
        let db = Db::open(&path).unwrap();
        db.write(Write::Receipt(receipt("r1", Some("k"))));
        db.write(Write::Receipt(receipt("r2", None)));
        drop(db);
        let db = Db::open(&path).unwrap();
        let rows = db.load_receipts(10).unwrap();
        assert_eq!(rows, [receipt("r1", Some("k")), receipt("r2", None)]);
    }

    #[test]
    fn a_write_held_back_goes_before_the_next_write_and_is_never_lost() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("heddle.db");
        let db = Db::open(&path).unwrap();
        db.write_later(Write::Receipt(receipt("r1", None)));
        assert_eq!(db.later.lock().unwrap().len(), 1, "held, not sent to the writer");
        db.write(Write::Receipt(receipt("r2", None)));
        assert!(db.later.lock().unwrap().is_empty(), "the next write takes it along");
        db.sync();
        let ids = |v: Vec<ReceiptRow>| v.into_iter().map(|r| r.id).collect::<Vec<_>>();
        assert_eq!(ids(db.load_receipts(10).unwrap()), ["r1", "r2"], "in the order they were written");
        db.write_later(Write::Receipt(receipt("r3", None)));
        db.flush();
        assert!(db.later.lock().unwrap().is_empty());
        db.write_later(Write::Receipt(receipt("r4", None)));
        drop(db);
        let db = Db::open(&path).unwrap();
        assert_eq!(ids(db.load_receipts(10).unwrap()), ["r1", "r2", "r3", "r4"], "a close writes what was held");
    }

    #[test]
    fn a_start_loads_the_keyed_receipts_and_the_latest_others_and_reads_the_rest_by_id() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&dir.path().join("heddle.db")).unwrap();
        let rows: Vec<ReceiptRow> = (0..6).map(|i| receipt(&format!("r{i}"), (i == 1).then_some("k"))).collect();
        for r in &rows {
            db.write(Write::Receipt(r.clone()));
        }
        db.sync();
        let ids = |v: Vec<ReceiptRow>| v.into_iter().map(|r| r.id).collect::<Vec<_>>();
        assert_eq!(ids(db.load_receipts(2).unwrap()), ["r1", "r4", "r5"]);
        assert_eq!(db.receipt("r0").unwrap(), Some(rows[0].clone()), "an old one is read back");
        assert_eq!(db.receipt("nope").unwrap(), None);
    }

    #[test]
    fn audit_lines_are_the_uids_own_of_one_operation_newest_first() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&dir.path().join("heddle.db")).unwrap();
        let line = |uid, op: &str, detail: &str| Write::Audit {
            uid,
            op: op.into(),
            session: Some("s".into()),
            job: Some(1),
            detail: detail.into(),
        };
        db.write(line(1000, "override", "first"));
        db.write(line(1001, "override", "another uid's"));
        db.write(line(1000, "kill", "not an override"));
        db.write(line(1000, "override", "second"));
        db.sync();
        let got: Vec<String> = db.audit_lines(1000, "override", 10).unwrap().into_iter().map(|r| r.detail).collect();
        assert_eq!(got, ["second", "first"]);
        assert_eq!(db.audit_lines(1000, "override", 1).unwrap().len(), 1);
    }

    #[test]
    fn a_newer_schema_is_refused_with_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("heddle.db");
        drop(Db::open(&path).unwrap());
        let conn = Connection::open(&path).unwrap();
        conn.execute("UPDATE schema_version SET version = 99", []).unwrap();
        drop(conn);
        let e = Db::open(&path).err().unwrap();
        assert!(matches!(e, DbError::TooNew { found: 99, .. }));
        assert!(e.to_string().contains(&format!("newer than the {SCHEMA_VERSION} this heddle knows")), "{e}");
    }

    #[test]
    fn running_jobs_of_an_earlier_front_become_lost() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("heddle.db");
        let db = Db::open(&path).unwrap();
        let row = JobRow {
            cmd: "sleep 9".into(),
            state: "running".into(),
            exit_code: None,
            signal: None,
            stdout_bytes: 0,
            stderr_bytes: 0,
            started_at_ms: 1,
            duration_ms: 0.0,
            log_path: "/x".into(),
            record: r#"{"state":"running"}"#.into(),
        };
        db.write(Write::Job { serial: 1, session: "s".into(), job: 1, row });
        db.sync();
        assert_eq!(db.lose_orphans().unwrap(), 0, "this front's own jobs are not orphans");
        let boot = db.boot().to_owned();
        drop(db);
        let db = Db::open(&path).unwrap();
        assert_eq!(db.lose_orphans().unwrap(), 1);
        assert_eq!(db.job_record(&boot, 1, 1).unwrap().unwrap(), r#"{"state":"lost"}"#);
    }
}
