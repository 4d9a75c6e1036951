//! Operation receipts and idempotency keys (docs/protocol.md, "Receipts").
//!
//! Every mutation (`session.open`, `session.close`, `run`, `kill`, `keep`, `kept.kill`) goes through
//! [`mutate`]: it answers with the method's result plus a `receipt` `{id, op, admitted_at, outcome, job}`.
//! A `run`'s receipt exists from the moment its job is registered (before the worker is told), so a
//! concurrent retry finds it at once. A mutation that fails is not admitted: it answers the error, leaves
//! a `refused` line in the audit log, and leaves its idempotency key free (nothing happened, so a retry
//! may try again).
//!
//! Idempotency: a key is scoped to (caller uid, session name); for `session.open` the session is the
//! `name` asked for. A second mutation with a key already admitted never runs: it answers the original
//! receipt and result — for `run`, a fresh `wait` on the original job (or, when that job's session is
//! gone, its stored record). A retry that arrives while the first is being admitted waits for it. The
//! same key with other parameters (`yield_ms` aside) is refused with `idempotency_conflict`. Receipts are
//! written to the database and loaded again at start, so all of this holds across a front restart.
//!
//! The database writer commits after the answer, so a front killed just then would forget a keyed `run`
//! whose job was already running. A keyed `run`'s receipt is therefore also appended to its session's
//! journal ([`crate::sessions::journal::Entry::Keyed`]) before the worker hears of the job: a restarted
//! front that takes the session over rebuilds the receipt from there ([`recover`]), and a retry of the
//! key answers that job instead of running it again.
//!
//! ```text
//! → {"jsonrpc":"2.0","id":1,"method":"run","params":{"session":"s","cmd":"date >> log","idempotency_key":"k1"}}
//! ← {"jsonrpc":"2.0","id":1,"result":{…,"job":1,"receipt":{"id":"r18c…-4","op":"run","admitted_at":1718000000000,
//!    "outcome":"admitted","job":1,"session":"s","idempotency_key":"k1","replayed":false}}}
//! ```

use crate::kernel::{Client, Kernel};
use crate::rpc::{ErrorKind, RpcError};
use crate::sessions::session::Session;
use crate::storage::db::{Db, ReceiptRow, Write};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

/// Methods that change something and so carry receipts.
pub const MUTATIONS: [&str; 8] =
    ["session.open", "session.close", "run", "kill", "keep", "kept.kill", "write", "resize"];
/// Longest idempotency key accepted.
pub const MAX_KEY: usize = 256;

/// What became of a mutation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Admitted,
    Rejected(String),
}

/// An operation receipt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Receipt {
    pub id: String,
    pub op: String,
    /// Milliseconds since the epoch.
    pub admitted_at: u64,
    pub outcome: Outcome,
    pub job: Option<u64>,
    pub session: Option<String>,
    pub idempotency_key: Option<String>,
    /// True when this answer replays an earlier admission instead of acting.
    #[serde(default)]
    pub replayed: bool,
}

/// An admitted mutation as remembered.
#[derive(Clone, Debug)]
pub(crate) struct Entry {
    pub(crate) receipt: Receipt,
    owner_uid: u32,
    fingerprint: String,
    /// The original result (for `run`, the job's record is the result reference instead).
    result: Option<Value>,
    boot: String,
    serial: Option<u64>,
}

type Scope = (u32, String, String);

/// A keyed `run`'s admission as its session's journal keeps it.
#[derive(Serialize, Deserialize)]
struct Journaled {
    receipt: Receipt,
    owner_uid: u32,
    fingerprint: String,
}

enum Slot {
    /// The first call with this key is being admitted.
    Pending {
        fingerprint: String,
    },
    Done(Arc<Entry>),
}

#[derive(Default)]
struct Inner {
    /// The keyed receipts and the [`RECENT`] latest others.
    by_id: HashMap<String, Arc<Entry>>,
    by_key: HashMap<Scope, Slot>,
    /// The ids of the receipts without a key in `by_id`, oldest first.
    recent: VecDeque<String>,
}

/// Receipts without an idempotency key kept in memory, the latest; older ones are read back from the
/// database when asked for by id. Every mutation makes one, so keeping them all grew the front by
/// ~0.3 KiB per call for its whole life (and a start loaded every receipt ever written).
pub const RECENT: usize = 1024;

impl Inner {
    fn insert(&mut self, entry: Arc<Entry>) {
        let id = entry.receipt.id.clone();
        if entry.receipt.idempotency_key.is_none() {
            self.recent.push_back(id.clone());
            while self.recent.len() > RECENT {
                if let Some(old) = self.recent.pop_front() {
                    self.by_id.remove(&old);
                }
            }
        }
        self.by_id.insert(id, entry);
    }
}

impl std::fmt::Debug for Receipts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Receipts").finish_non_exhaustive()
    }
}

/// The receipts this front knows (its own and those loaded from the database).
pub struct Receipts {
    inner: Mutex<Inner>,
    changed: Condvar,
    next: AtomicU64,
    prefix: String,
}

impl Receipts {
    /// The receipts stored in `db`.
    pub fn load(db: &Db) -> rusqlite::Result<Receipts> {
        let mut inner = Inner::default();
        for row in db.load_receipts(RECENT)? {
            let entry = Arc::new(entry_from_row(row));
            if let (Some(key), Some(s)) = (&entry.receipt.idempotency_key, &entry.receipt.session) {
                inner.by_key.insert((entry.owner_uid, s.clone(), key.clone()), Slot::Done(entry.clone()));
            }
            inner.insert(entry);
        }
        Ok(Receipts {
            inner: Mutex::new(inner),
            changed: Condvar::new(),
            next: AtomicU64::new(1),
            prefix: db.boot().into(),
        })
    }

    /// Receipts that acted on session incarnation `old` (boot, serial) now refer to `new` (see
    /// [`crate::storage::db::Write::Rekey`], which moves their rows alike).
    pub(crate) fn rekey(&self, old: (&str, u64), new: (&str, u64)) {
        let mut inner = self.lock();
        let moved = |e: &Arc<Entry>| {
            (e.boot == old.0 && e.serial == Some(old.1))
                .then(|| Arc::new(Entry { boot: new.0.to_owned(), serial: Some(new.1), ..(**e).clone() }))
        };
        for e in inner.by_id.values_mut() {
            if let Some(m) = moved(e) {
                *e = m;
            }
        }
        for slot in inner.by_key.values_mut() {
            if let Slot::Done(e) = slot {
                if let Some(m) = moved(e) {
                    *e = m;
                }
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn new_id(&self) -> String {
        format!("r{}-{}", self.prefix, self.next.fetch_add(1, Ordering::Relaxed))
    }

    /// The receipt `id` if it is kept in memory (keyed, or among the [`RECENT`]) and `uid` may see it.
    pub(crate) fn by_id(&self, uid: u32, id: &str) -> Option<Arc<Entry>> {
        self.lock().by_id.get(id).filter(|e| uid == 0 || e.owner_uid == uid).cloned()
    }

    /// [`Receipts::by_id`], else read back from `db` (an older receipt).
    pub(crate) fn find(&self, db: &Db, uid: u32, id: &str) -> Option<Arc<Entry>> {
        if let Some(e) = self.by_id(uid, id) {
            return Some(e);
        }
        // Only this front's own receipts can still be queued for the writer; waiting for it on any
        // other id (an earlier front's, a made-up one) would let a client stall the writer at will.
        if id.starts_with(&format!("r{}-", self.prefix)) {
            db.sync();
        }
        let row = db.receipt(id).ok().flatten().filter(|r| uid == 0 || r.owner_uid == uid)?;
        Some(Arc::new(entry_from_row(row)))
    }

    /// The receipt admitted under `key` in `session` for `uid`.
    pub(crate) fn by_key(&self, uid: u32, session: &str, key: &str) -> Option<Arc<Entry>> {
        match self.lock().by_key.get(&(uid, session.to_owned(), key.to_owned())) {
            Some(Slot::Done(e)) => Some(e.clone()),
            _ => None,
        }
    }

    /// Claim `scope` for a first call, or find what an earlier call with the key left.
    fn claim(&self, scope: &Scope, fingerprint: &str) -> Result<Option<Arc<Entry>>, RpcError> {
        let mut inner = self.lock();
        loop {
            let found = inner.by_key.get(scope).map(|slot| match slot {
                Slot::Pending { fingerprint } => (fingerprint.clone(), None),
                Slot::Done(e) => (e.fingerprint.clone(), Some(e.clone())),
            });
            match found {
                None => {
                    inner.by_key.insert(scope.clone(), Slot::Pending { fingerprint: fingerprint.to_owned() });
                    return Ok(None);
                }
                Some((f, _)) if f != fingerprint => return Err(conflict(&scope.2)),
                Some((_, Some(e))) => return Ok(Some(e)),
                Some((_, None)) => {
                    inner = self.changed.wait(inner).unwrap_or_else(|e| e.into_inner());
                }
            }
        }
    }

    /// The first call with the key was not admitted: free the key.
    fn release(&self, scope: &Scope) {
        let mut inner = self.lock();
        if matches!(inner.by_key.get(scope), Some(Slot::Pending { .. })) {
            inner.by_key.remove(scope);
        }
        drop(inner);
        self.changed.notify_all();
    }

    /// Record an admitted mutation (and wake retries waiting on its key): in memory at once, its row
    /// queued for the database (with `later`, by [`Db::write_later`]: a `run`'s, written with the call's
    /// rows after its answer).
    fn admit(&self, db: &Db, entry: Entry, later: bool) -> Arc<Entry> {
        let entry = Arc::new(entry);
        let write = if later { Db::write_later } else { Db::write };
        write(
            db,
            Write::Receipt(ReceiptRow {
                id: entry.receipt.id.clone(),
                op: entry.receipt.op.clone(),
                session: entry.receipt.session.clone(),
                owner_uid: entry.owner_uid,
                idempotency_key: entry.receipt.idempotency_key.clone(),
                fingerprint: entry.fingerprint.clone(),
                admitted_at_ms: entry.receipt.admitted_at,
                outcome: serde_json::to_string(&entry.receipt.outcome).unwrap_or_default(),
                job: entry.receipt.job,
                result: entry.result.as_ref().map(Value::to_string),
                boot: entry.boot.clone(),
                serial: entry.serial,
            }),
        );
        let mut inner = self.lock();
        inner.insert(entry.clone());
        if let (Some(key), Some(s)) = (&entry.receipt.idempotency_key, &entry.receipt.session) {
            inner.by_key.insert((entry.owner_uid, s.clone(), key.clone()), Slot::Done(entry.clone()));
        }
        drop(inner);
        self.changed.notify_all();
        entry
    }

    /// Free the key of the `run` that admitted `job` of session incarnation (boot, serial): the job
    /// never reached its worker (see `unsent`), so nothing happened and a retry may run it. The key is
    /// freed only while it still names that admission.
    pub(crate) fn free_job(&self, boot: &str, serial: u64, job: u64) {
        let mut inner = self.lock();
        let found = inner.by_id.values().find(|e| {
            e.receipt.op == "run" && e.receipt.job == Some(job) && e.boot == boot && e.serial == Some(serial)
        });
        let Some(e) = found.cloned() else { return };
        inner.by_id.remove(&e.receipt.id);
        if let (Some(key), Some(s)) = (&e.receipt.idempotency_key, &e.receipt.session) {
            let scope = (e.owner_uid, s.clone(), key.clone());
            if matches!(inner.by_key.get(&scope), Some(Slot::Done(d)) if d.receipt.id == e.receipt.id) {
                inner.by_key.remove(&scope);
            }
        }
        drop(inner);
        self.changed.notify_all();
    }

    /// Forget an admission whose call failed after all (e.g. a `run` whose command never reached the ring).
    fn forget(&self, id: &str) {
        let mut inner = self.lock();
        if let Some(e) = inner.by_id.remove(id) {
            if let (Some(key), Some(s)) = (&e.receipt.idempotency_key, &e.receipt.session) {
                inner.by_key.remove(&(e.owner_uid, s.clone(), key.clone()));
            }
        }
        drop(inner);
        self.changed.notify_all();
    }
}

fn entry_from_row(row: ReceiptRow) -> Entry {
    let receipt = Receipt {
        id: row.id,
        op: row.op,
        admitted_at: row.admitted_at_ms,
        outcome: serde_json::from_str(&row.outcome).unwrap_or(Outcome::Admitted),
        job: row.job,
        session: row.session,
        idempotency_key: row.idempotency_key,
        replayed: false,
    };
    Entry {
        owner_uid: row.owner_uid,
        fingerprint: row.fingerprint,
        result: row.result.and_then(|r| serde_json::from_str(&r).ok()),
        boot: row.boot,
        serial: row.serial,
        receipt,
    }
}

fn conflict(key: &str) -> RpcError {
    RpcError::new(
        ErrorKind::IdempotencyConflict,
        format!(
            "idempotency_key '{key}' was already used in this session for a different request; \
             a retry must repeat the original parameters, and a new request needs a new key"
        ),
    )
}

/// Take `idempotency_key` out of the params (the methods themselves do not know it).
fn take_key(method: &str, params: &mut Value) -> Result<Option<String>, RpcError> {
    let Some(obj) = params.as_object_mut() else { return Ok(None) };
    match obj.remove("idempotency_key") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(k)) if !k.is_empty() && k.len() <= MAX_KEY => Ok(Some(k)),
        Some(_) => Err(RpcError::invalid_params(
            method,
            format!("idempotency_key must be a non-empty string of at most {MAX_KEY} bytes"),
        )),
    }
}

/// The session a mutation names (`name` for `session.open`; empty when none).
fn session_of(method: &str, params: &Value) -> String {
    let field = if method == "session.open" { "name" } else { "session" };
    params.get(field).and_then(Value::as_str).unwrap_or_default().to_owned()
}

/// The parameters that must match on a retry: all but `yield_ms`, canonically ordered.
fn fingerprint(method: &str, params: &Value) -> String {
    let mut p = params.clone();
    if let Some(obj) = p.as_object_mut() {
        obj.remove("yield_ms");
    }
    format!("{method} {p}")
}

/// Run a mutation with receipts and idempotency; `params` may carry `idempotency_key`. `on_job` hears
/// the id of the job a `run` admitted, once it is registered (a door's progress reporter follows it).
pub(crate) fn mutate(
    k: &Kernel,
    client: &Client,
    method: &str,
    mut params: Value,
    on_job: &dyn Fn(u64),
    typed: Option<&mut Option<Box<protocol::results::JobResult>>>,
) -> Result<Box<RawValue>, RpcError> {
    let key = take_key(method, &mut params)?;
    let session = session_of(method, &params);
    let fp = fingerprint(method, &params);
    let scope = key.as_ref().map(|key| (client.uid, session.clone(), key.clone()));
    if let Some(scope) = &scope {
        if let Some(done) = k.receipts.claim(scope, &fp)? {
            return raw(&replay(k, client, &done, &params));
        }
    }
    if let Err(e) = k.admit() {
        if let Some(scope) = &scope {
            k.receipts.release(scope);
        }
        refused(k, client, method, &session, &e);
        return Err(e);
    }
    let id = k.receipts.new_id();
    let admitted_at = crate::jobs::job::unix_ns() / 1_000_000;
    let base = |job: Option<u64>, serial: Option<u64>, result: Option<Value>| Entry {
        receipt: Receipt {
            id: id.clone(),
            op: method.to_owned(),
            admitted_at,
            outcome: Outcome::Admitted,
            job,
            session: Some(session.clone()),
            idempotency_key: key.clone(),
            replayed: false,
        },
        owner_uid: client.uid,
        fingerprint: fp.clone(),
        result,
        boot: k.db.boot().to_owned(),
        serial,
    };
    // A run's receipt, as admitted: memory may have let it go by the end of the call (over
    // [`RECENT`] other mutations while it waited), and must not be admitted a second time then.
    let admitted: std::sync::OnceLock<Arc<Entry>> = std::sync::OnceLock::new();
    let outcome = if method == "run" {
        let on_admit = |s: &Session, job: u64| {
            let entry = k.receipts.admit(&k.db, base(Some(job), Some(s.spec().serial), None), true);
            if entry.receipt.idempotency_key.is_some() {
                journal(s, job, &entry);
            }
            let _ = admitted.set(entry);
            on_job(job);
        };
        crate::kernel::job_run::call_admitting(k, client, params.clone(), &on_admit).map(|r| Done::Run(Box::new(r)))
    } else {
        k.call_method(client, method, params.clone()).and_then(|r| to_value(&*r)).map(Done::Other)
    };
    match outcome {
        Ok(done) => {
            let entry = match admitted.get().cloned().or_else(|| k.receipts.by_id(client.uid, &id)) {
                Some(e) => e,
                None => {
                    let serial = k.session(client, &session).ok().map(|s| s.spec().serial);
                    let value = match &done {
                        Done::Run(r) => to_value(r)?,
                        Done::Other(v) => v.clone(),
                    };
                    let session = value.get("session").and_then(Value::as_str).map(str::to_owned);
                    let mut e = base(None, serial, Some(value));
                    if method == "session.open" {
                        e.receipt.session = session.or(e.receipt.session);
                    }
                    k.receipts.admit(&k.db, e, false)
                }
            };
            audit(k, client, method, &session, entry.receipt.job, &params);
            match done {
                // Straight to the answer's bytes, the receipt beside the result's fields (no `Value` in
                // between: it cost a run's answer ~20 µs).
                Done::Run(result) => {
                    let answer = raw(&WithReceipt { result: &result, receipt: &entry.receipt });
                    if let Some(t) = typed {
                        *t = Some(result);
                    }
                    answer
                }
                Done::Other(mut value) => {
                    attach(&mut value, &entry.receipt);
                    raw(&value)
                }
            }
        }
        Err(mut e) => {
            k.receipts.forget(&id);
            if let Some(scope) = &scope {
                k.receipts.release(scope);
            }
            // serde lists the method's own fields; the key every mutation takes was taken out before.
            if e.kind == crate::rpc::ErrorKind::InvalidParams && e.message.contains(", expected one of `") {
                e.message = e.message.replacen(", expected one of `", ", expected `idempotency_key` or one of `", 1);
            }
            refused(k, client, method, &session, &e);
            Err(e)
        }
    }
}

/// Append a keyed `run`'s receipt to its session's journal (see the module's text).
fn journal(s: &Session, job: u64, e: &Entry) {
    let j = Journaled { receipt: e.receipt.clone(), owner_uid: e.owner_uid, fingerprint: e.fingerprint.clone() };
    match serde_json::to_string(&j) {
        Ok(receipt) => s.lock().append_journal(&crate::sessions::journal::Entry::Keyed { job, receipt }),
        Err(e) => tracing::warn!("a receipt could not be encoded for the journal: {e}"),
    }
}

/// Rebuild the receipts of keyed runs that session `s`'s journal kept (`keyed`, each an
/// [`crate::sessions::journal::Entry::Keyed`]'s receipt) and this front does not know: the database
/// never committed them before the earlier front died. They act on `s` as it is now (its rows were
/// moved to this front's key). Returns how many were rebuilt.
pub(crate) fn recover(k: &Kernel, s: &Session, keyed: Vec<String>) -> usize {
    let mut n = 0;
    for text in keyed {
        let Ok(j) = serde_json::from_str::<Journaled>(&text) else {
            tracing::warn!("session '{}': a journaled receipt could not be read; it is skipped", s.name());
            continue;
        };
        if k.receipts.lock().by_id.contains_key(&j.receipt.id) {
            continue;
        }
        let entry = Entry {
            receipt: j.receipt,
            owner_uid: j.owner_uid,
            fingerprint: j.fingerprint,
            result: None,
            boot: k.db.boot().to_owned(),
            serial: Some(s.spec().serial),
        };
        k.receipts.admit(&k.db, entry, false);
        n += 1;
    }
    if n > 0 {
        tracing::info!("session '{}': {n} receipts rebuilt from its journal", s.name());
    }
    n
}

/// What a mutation answered, before its receipt is attached.
enum Done {
    Run(Box<protocol::results::JobResult>),
    Other(Value),
}

/// A `run`'s answer: the job's result with its receipt.
#[derive(Serialize)]
struct WithReceipt<'a> {
    #[serde(flatten)]
    result: &'a protocol::results::JobResult,
    receipt: &'a Receipt,
}

fn raw<T: Serialize + ?Sized>(v: &T) -> Result<Box<RawValue>, RpcError> {
    serde_json::value::to_raw_value(v).map_err(|e| RpcError::internal(format!("the result could not be encoded: {e}")))
}

fn to_value<T: Serialize>(v: T) -> Result<Value, RpcError> {
    serde_json::to_value(v).map_err(|e| RpcError::internal(format!("the result could not be encoded: {e}")))
}

fn attach(value: &mut Value, receipt: &Receipt) {
    if let Some(obj) = value.as_object_mut() {
        obj.insert("receipt".into(), serde_json::to_value(receipt).unwrap_or(Value::Null));
    }
}

/// The answer to a retry: the original receipt and the result reference.
fn replay(k: &Kernel, client: &Client, e: &Entry, params: &Value) -> Value {
    let mut receipt = e.receipt.clone();
    receipt.replayed = true;
    let mut value = match (receipt.op.as_str(), receipt.job, &receipt.session) {
        ("run", Some(job), Some(session)) => run_reference(k, client, e, session, job, params),
        _ => e.result.clone().unwrap_or_else(|| serde_json::json!({})),
    };
    attach(&mut value, &receipt);
    value
}

/// A replayed `run`: a `wait` on the original job while its session lives, else its stored record.
fn run_reference(k: &Kernel, client: &Client, e: &Entry, session: &str, job: u64, params: &Value) -> Value {
    let live = k.session(client, session).ok().filter(|s| Some(s.spec().serial) == e.serial && e.boot == k.db.boot());
    if live.is_some() {
        let mut wait = serde_json::json!({"session": session, "job": job});
        if let Some(y) = params.get("yield_ms") {
            wait["yield_ms"] = y.clone();
        }
        if let Ok(v) = k.call_method(client, "wait", wait).and_then(to_value) {
            return v;
        }
    }
    k.db.sync();
    let record = e.serial.and_then(|serial| k.db.job_record(&e.boot, serial, job).ok().flatten());
    let mut v = record
        .and_then(|r| serde_json::from_str::<Value>(&r).ok())
        .unwrap_or_else(|| serde_json::json!({"job": job, "state": "lost"}));
    v["session"] = Value::String(session.to_owned());
    v["note"] = Value::String(format!(
        "job {job} was admitted under this idempotency_key in an earlier incarnation of session '{session}' \
         and was not run again; this is its last stored record"
    ));
    v
}

fn audit(k: &Kernel, client: &Client, method: &str, session: &str, job: Option<u64>, params: &Value) {
    if matches!(method, "run") {
        return; // a run's record is its job row; the audit log keeps the rarer, weightier mutations
    }
    let job = job.or_else(|| params.get("job").and_then(Value::as_u64));
    let detail = params.to_string();
    k.db.write(Write::Audit { uid: client.uid, op: method.into(), session: Some(session.into()), job, detail });
}

fn refused(k: &Kernel, client: &Client, method: &str, session: &str, e: &RpcError) {
    k.db.write(Write::Audit {
        uid: client.uid,
        op: format!("refused {method}"),
        session: Some(session.into()),
        job: None,
        detail: e.message.clone(),
    });
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LookupParams {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    idempotency_key: Option<String>,
    #[serde(default)]
    session: Option<String>,
}

/// `receipt {id}` or `receipt {idempotency_key, session}`.
pub(crate) fn call(k: &Kernel, client: &Client, params: Value) -> Result<Value, RpcError> {
    let p: LookupParams = crate::rpc::params("receipt", params)?;
    let found = match (&p.id, &p.idempotency_key) {
        (Some(id), None) => k.receipts.find(&k.db, client.uid, id),
        (None, Some(key)) => k.receipts.by_key(client.uid, p.session.as_deref().unwrap_or_default(), key),
        _ => return Err(RpcError::invalid_params("receipt", "give either `id` or `idempotency_key` (with `session`)")),
    };
    let Some(e) = found else {
        let what = p.id.map(|id| format!("id '{id}'")).unwrap_or_else(|| "that idempotency_key".into());
        return Err(RpcError::new(
            ErrorKind::UnknownReceipt,
            format!("no receipt with {what} is visible to you; receipts are kept per caller uid"),
        ));
    };
    let mut receipt = e.receipt.clone();
    receipt.replayed = false;
    Ok(serde_json::json!({ "receipt": receipt }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Harness;
    use serde_json::json;

    #[test]
    fn memory_keeps_the_latest_receipts_and_an_older_one_is_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&dir.path().join("heddle.db")).unwrap();
        let receipts = Receipts::load(&db).unwrap();
        let id = |n: usize| format!("r{}-{n}", db.boot());
        let entry = |n: usize, key: Option<&str>| Entry {
            receipt: Receipt {
                id: id(n),
                op: "run".into(),
                admitted_at: n as u64,
                outcome: Outcome::Admitted,
                job: Some(n as u64),
                session: Some("s".into()),
                idempotency_key: key.map(Into::into),
                replayed: false,
            },
            owner_uid: 1000,
            fingerprint: "f".into(),
            result: None,
            boot: "b".into(),
            serial: Some(1),
        };
        receipts.admit(&db, entry(0, None), false);
        receipts.admit(&db, entry(1, Some("k")), false);
        for n in 2..RECENT + 3 {
            receipts.admit(&db, entry(n, None), false);
        }
        assert_eq!(receipts.lock().by_id.len(), RECENT + 1, "the latest unkeyed ones and the keyed one");
        assert!(receipts.by_id(1000, &id(0)).is_none(), "the oldest left memory");
        assert!(receipts.by_id(1000, &id(1)).is_some(), "a keyed one stays");
        assert_eq!(receipts.find(&db, 1000, &id(0)).map(|e| e.receipt.clone()), Some(entry(0, None).receipt));
        assert!(receipts.find(&db, 1001, &id(0)).is_none(), "another uid's receipt stays invisible");
        let again = Receipts::load(&db).unwrap();
        assert_eq!(again.lock().by_id.len(), RECENT + 1, "a start loads as much");
        assert!(again.by_key(1000, "s", "k").is_some());
    }

    #[test]
    fn a_runs_receipt_let_go_from_memory_while_it_waits_is_still_its_own() {
        let h = std::sync::Arc::new(Harness::new());
        h.open("demo");
        let waiting = {
            let h = h.clone();
            std::thread::spawn(move || h.ok("run", json!({"session": "demo", "cmd": "hang", "yield_ms": 60_000})))
        };
        std::thread::sleep(std::time::Duration::from_millis(200));
        for _ in 0..RECENT + 10 {
            h.ok("session.open", json!({"name": "demo"}));
        }
        h.ok("kill", json!({"session": "demo", "job": 1}));
        let r = waiting.join().unwrap();
        assert_eq!(r["state"], "killed", "{r}");
        assert_eq!(r["receipt"]["job"], r["job"], "the receipt names the run's job: {r}");
        h.kernel.db.sync();
        let row = h.kernel.db.receipt(r["receipt"]["id"].as_str().unwrap()).unwrap().unwrap();
        assert_eq!((row.job, row.result), (r["job"].as_u64(), None), "stored once, as admitted");
    }

    #[test]
    fn a_retried_run_answers_the_first_receipt_and_never_runs_twice() {
        let h = Harness::new();
        h.open("demo");
        let params = json!({"session": "demo", "cmd": "echo once", "idempotency_key": "k1", "yield_ms": 5000});
        let first = h.ok("run", params.clone());
        let again = h.ok("run", params);
        assert_eq!(first["receipt"]["id"], again["receipt"]["id"]);
        assert_eq!(
            (first["receipt"]["replayed"].as_bool(), again["receipt"]["replayed"].as_bool()),
            (Some(false), Some(true))
        );
        assert_eq!((again["job"].as_u64(), again["view"].as_str()), (Some(1), Some("once\n")));
        assert_eq!(h.ok("jobs", json!({"session": "demo"}))["jobs"].as_array().unwrap().len(), 1);
        let looked = h.ok("receipt", json!({"idempotency_key": "k1", "session": "demo"}));
        assert_eq!(looked["receipt"]["id"], first["receipt"]["id"]);
        let by_id = h.ok("receipt", json!({"id": first["receipt"]["id"]}));
        assert_eq!(by_id["receipt"]["job"], 1);
    }

    #[test]
    fn concurrent_retries_wait_for_the_first_and_share_its_job() {
        let h = Harness::new();
        h.open("demo");
        let jobs: Vec<u64> = std::thread::scope(|scope| {
            let calls: Vec<_> = (0..4)
                .map(|_| {
                    let h = &h;
                    scope.spawn(move || {
                        let p =
                            json!({"session": "demo", "cmd": "echo c", "idempotency_key": "same", "yield_ms": 5000});
                        h.ok("run", p)["job"].as_u64().unwrap()
                    })
                })
                .collect();
            calls.into_iter().map(|c| c.join().unwrap()).collect()
        });
        assert_eq!(jobs, [1, 1, 1, 1]);
        assert_eq!(h.ok("jobs", json!({"session": "demo"}))["jobs"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn a_key_reused_with_other_params_is_a_conflict() {
        let h = Harness::new();
        h.open("demo");
        h.ok("run", json!({"session": "demo", "cmd": "echo a", "idempotency_key": "k"}));
        let e = h.call("run", json!({"session": "demo", "cmd": "echo b", "idempotency_key": "k"})).unwrap_err();
        assert_eq!((e.kind, e.kind.code()), (ErrorKind::IdempotencyConflict, -32010));
        assert!(e.message.contains("different request"), "{}", e.message);
    }

    #[test]
    fn every_mutation_carries_a_receipt_and_a_refusal_frees_its_key() {
        let h = Harness::new();
        let open = h.ok("session.open", json!({"name": "demo", "idempotency_key": "o"}));
        assert_eq!(
            (open["receipt"]["op"].as_str(), open["receipt"]["outcome"].as_str()),
            (Some("session.open"), Some("admitted"))
        );
        let e = h.call("run", json!({"session": "nope", "cmd": "x", "idempotency_key": "r"})).unwrap_err();
        assert_eq!(e.kind, ErrorKind::UnknownSession);
        assert!(h.call("receipt", json!({"idempotency_key": "r", "session": "nope"})).is_err());
        let close = h.ok("session.close", json!({"session": "demo"}));
        assert_eq!(close["receipt"]["op"], "session.close");
    }
}
