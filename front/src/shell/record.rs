//! A session's versioned shell-state record: snapshots for new jobs, the restore script, and applying a
//! finished job's capture as a diff against the version it started from.
//!
//! - A job starts from a snapshot `(version, items)` and carries the restore script made from it.
//! - When it completes with a capture, [`StateRecord::apply`] diffs the captured items against that
//!   snapshot and applies only what the job changed to the current record, so concurrent jobs that change
//!   different items all keep their changes. An item is a conflict only when another job changed it after
//!   this one started and the two values differ: the later completion wins, and the result names it. An
//!   item the job set to the value the record already holds is neither a change nor a conflict.
//! - A job that started before the first record (version 0, an empty snapshot) is diffed against that
//!   first record, the nearest known state to the one it started from; an item where the two differ is
//!   named as a conflict (the later completion wins), since which of the two jobs changed it is unknown,
//!   and an item missing from its capture is kept, not removed.
//! - A variable the job unset becomes a tombstone (empty value): the restore script unsets it, because
//!   the job environment brings it back otherwise.
//! - The first capture of a session (version 0 → 1) records everything and is summarised as such.
//!
//! ```
//! use front::shell::record::StateRecord;
//! let mut r = StateRecord::default();
//! let (v, base) = r.snapshot();
//! let mut cap = (*base).clone();
//! cap.insert("cwd".into(), b"/tmp".to_vec());
//! let applied = r.apply(v, &base, cap, 1);
//! assert_eq!(r.version(), 1);
//! assert!(applied.conflicts.is_empty());
//! ```

pub use crate::rpc::results::StateSummary;
use shm_proto::capture::{valid_name, Items};
use std::collections::BTreeMap;
use std::sync::Arc;

/// At most this many entries in a result's `state_changes`.
const MAX_CHANGES: usize = 12;

/// The session's state record.
#[derive(Debug, Default)]
pub struct StateRecord {
    version: u64,
    items: Arc<Items>,
    /// The version at which each item last changed.
    changed_at: BTreeMap<String, u64>,
    /// The job whose completion last set each item.
    changed_by: BTreeMap<String, u64>,
    /// The items of the first record: the base of jobs that started before it.
    first: Option<Arc<Items>>,
    /// The directory the session was opened in, where a job with no record starts: the first record's
    /// summary names its cwd only when a job moved away from it.
    opened_in: Option<Vec<u8>>,
    /// What a fresh job shell starts with: the first record's summary names what the job added to it.
    fresh: Option<Arc<FreshEnv>>,
    /// The restore of a fresh bash for `items` (see [`StateRecord::fresh_restore`]), with the items it
    /// was made from: every job and every spare of a session starts from the same record until a job
    /// changes it, and its restore costs 10–25 µs to make (the environment split, the script).
    restore: std::sync::Mutex<Option<(Arc<Items>, Arc<Restore>)>>,
}

/// The environment a fresh job shell of a session starts with: the policy's allowlist (patterns such as
/// `LC_*`) and forced values, the session's own entries, and the `PATH` jobs get.
#[derive(Clone, Debug, Default)]
pub struct FreshEnv {
    pub allow: Vec<String>,
    pub set: BTreeMap<String, String>,
    pub session: Vec<(String, String)>,
    pub path: String,
    /// Where `path` comes from: `session`, `policy` or `worker`.
    pub path_from: &'static str,
}

/// Variables a fresh non-interactive bash sets without exporting them (beside those bash owns,
/// [`shm_proto::capture::bash_owned`], which are never carried).
const FRESH_PLAIN: &[&str] = &["IFS", "PS4", "SHELL"];

impl FreshEnv {
    /// The environment of a session with `policy` (`None`: the launcher's built-in allowlist) and its
    /// own `session` entries.
    pub fn of(policy: Option<&str>, session: &[(String, String)]) -> FreshEnv {
        let (allow, set): (Vec<String>, BTreeMap<String, String>) = match policy.and_then(policy_env) {
            Some(env) => (*env).clone(),
            None => (
                [
                    "PATH",
                    "HOME",
                    "LANG",
                    "TMPDIR",
                    "USER",
                    "LOGNAME",
                    "XDG_RUNTIME_DIR",
                    "DBUS_SESSION_BUS_ADDRESS",
                    "LC_*",
                ]
                .iter()
                .map(|s| (*s).to_owned())
                .collect(),
                [("TERM", "dumb"), ("NO_COLOR", "1"), ("PAGER", "cat"), ("GIT_PAGER", "cat")]
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            ),
        };
        let own = session.iter().find(|(k, _)| k == "PATH").map(|(_, v)| v.clone());
        let (path, path_from) = match (own, set.get("PATH")) {
            (Some(p), _) => (p, "session"),
            (None, Some(p)) => (p.clone(), "policy"),
            (None, None) => (shm_proto::control::WORKER_PATH.to_owned(), "worker"),
        };
        FreshEnv { allow, set, session: session.to_vec(), path, path_from }
    }

    /// Whether a fresh job shell may have `name` in its environment.
    fn may_have(&self, name: &str) -> bool {
        self.session.iter().any(|(k, _)| k == name)
            || self.set.contains_key(name)
            || self.allow.iter().any(|p| match p.strip_suffix('*') {
                Some(prefix) => name.starts_with(prefix),
                None => p == name,
            })
    }

    /// What the first record holds that a fresh job shell does not: functions and aliases, variables the
    /// job set, variables it exported that the environment does not bring, and a `PATH` it changed.
    fn news(&self, items: &Items) -> Vec<String> {
        let mut v = Vec::new();
        for (k, val) in items {
            let (kind, name) = k.split_once(':').unwrap_or((k, ""));
            match kind {
                "func" | "alias" | "fexport" => v.extend(describe(k, None, Some(val))),
                "var" if val.is_empty() || name == "OLDPWD" => {}
                "var" if flags(val).contains('x') => {
                    if name == "PATH" {
                        if declared(val).is_some_and(|p| p != self.path) {
                            v.push("~var PATH".to_owned());
                        }
                    } else if !self.may_have(name) {
                        v.push(format!("+export {name}"));
                    }
                }
                "var" if !FRESH_PLAIN.contains(&name) => v.push(format!("+var {name}")),
                _ => {}
            }
        }
        v
    }
}

/// A policy's allowlist patterns and forced values.
type PolicyEnv = (Vec<String>, BTreeMap<String, String>);

/// A builtin policy's environment rules (allowlist patterns, forced values), parsed once per policy name:
/// every session's hello sets them, and parsing a whole policy each time would cost each session open.
fn policy_env(name: &str) -> Option<Arc<PolicyEnv>> {
    type Cache = std::sync::Mutex<std::collections::HashMap<String, Option<Arc<PolicyEnv>>>>;
    static CACHE: std::sync::OnceLock<Cache> = std::sync::OnceLock::new();
    let mut cache = CACHE.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    cache
        .entry(name.to_owned())
        .or_insert_with(|| {
            policies::Policy::builtin(name).ok().map(|p| {
                Arc::new((
                    p.env.allow.iter().map(|r| r.matcher.to_string()).collect(),
                    p.env.set.iter().map(|v| (v.name.clone(), v.value.clone())).collect(),
                ))
            })
        })
        .clone()
}

/// The value of a `declare` line whose value is plain (`declare -x A="b"` → `b`).
fn declared(decl: &[u8]) -> Option<&str> {
    let text = std::str::from_utf8(decl).ok()?;
    let (_, value) = text.split_once('=')?;
    Some(value.strip_prefix('"').and_then(|v| v.strip_suffix('"')).unwrap_or(value))
}

/// What applying one job's capture did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// Brief descriptions (`cwd → /x`, `+export FOO`, …).
    pub changes: Vec<String>,
    /// Items another job changed after this one started (this job's value won).
    pub conflicts: Vec<String>,
    pub version: u64,
    /// The earlier jobs whose changes this completion overrode, with the item (their results say so too).
    pub overridden: Vec<(u64, String)>,
}

impl StateRecord {
    /// An empty record for a session opened in `cwd`.
    pub fn opened_in(cwd: &[u8]) -> StateRecord {
        // `/w/` opens where bash's `$PWD` says `/w`.
        let cwd = match cwd.len() > 1 {
            true => cwd.strip_suffix(b"/").unwrap_or(cwd),
            false => cwd,
        };
        StateRecord { opened_in: Some(cwd.to_vec()), ..StateRecord::default() }
    }

    /// The same session's record started afresh (a session re-opened after a restart).
    pub fn restarted(&self) -> StateRecord {
        StateRecord { opened_in: self.opened_in.clone(), fresh: self.fresh.clone(), ..StateRecord::default() }
    }

    /// What a fresh job shell of the session starts with (see [`FreshEnv`]).
    pub fn set_fresh_env(&mut self, fresh: FreshEnv) {
        self.fresh = Some(Arc::new(fresh));
    }

    /// The session's policy became known (the worker's hello): its environment rules apply.
    pub fn set_policy(&mut self, policy: Option<&str>) {
        let session = self.fresh.as_ref().map(|f| f.session.clone()).unwrap_or_default();
        self.set_fresh_env(FreshEnv::of(policy, &session));
    }

    /// The same session's record as journaled before a restart: `items` at `version`; jobs started
    /// from here on diff against it.
    pub fn restored(&self, version: u64, items: Items) -> StateRecord {
        StateRecord {
            version,
            items: Arc::new(items),
            opened_in: self.opened_in.clone(),
            fresh: self.fresh.clone(),
            ..StateRecord::default()
        }
    }

    pub fn version(&self) -> u64 {
        self.version
    }

    pub fn items(&self) -> &Items {
        &self.items
    }

    /// What a new job starts from.
    pub fn snapshot(&self) -> (u64, Arc<Items>) {
        (self.version, Arc::clone(&self.items))
    }

    /// [`StateRecord::snapshot`] and the restore of a fresh bash for it ([`restore`]), made once per
    /// record: the cache holds the very items it was made from (an `Arc` of them, so they cannot be
    /// changed in place under it: [`Arc::make_mut`] copies shared items), and is used only while the
    /// record's items are those.
    pub fn fresh_restore(&self) -> (u64, Arc<Items>, Arc<Restore>) {
        let mut cache = self.restore.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((items, r)) = cache.as_ref().filter(|(items, _)| Arc::ptr_eq(items, &self.items)) {
            return (self.version, Arc::clone(items), Arc::clone(r));
        }
        let r = Arc::new(restore(&self.items));
        *cache = Some((Arc::clone(&self.items), Arc::clone(&r)));
        (self.version, Arc::clone(&self.items), r)
    }

    /// Apply the diff between `base` (the snapshot at `base_version`) and `captured`, the capture of `job`.
    pub fn apply(&mut self, base_version: u64, base: &Items, captured: Items, job: u64) -> Applied {
        let first_record = self.first.clone().filter(|_| base_version == 0);
        let base = first_record.as_deref().unwrap_or(base);
        let mut diff: Vec<(String, Option<Vec<u8>>)> = Vec::new();
        for (k, v) in &captured {
            if base.get(k) != Some(v) {
                diff.push((k.clone(), Some(v.clone())));
            }
        }
        // An item missing from the capture of a job older than the record is no sign it removed it.
        for (k, v) in base.iter().filter(|_| first_record.is_none()) {
            if captured.contains_key(k) {
                continue;
            }
            match (k.starts_with("var:"), v.is_empty()) {
                (true, true) => {}                                         // still unset
                (true, false) => diff.push((k.clone(), Some(Vec::new()))), // unset: tombstone
                (false, _) => diff.push((k.clone(), None)),
            }
        }
        // What the record already holds is no change, whoever set it: concurrent jobs that reach the same
        // value (two `cd`s moving `OLDPWD` alike) do not conflict.
        let unset = |v: Option<&Vec<u8>>| v.is_none_or(Vec::is_empty);
        diff.retain(|(k, new)| match k.starts_with("var:") {
            true => self.items.get(k) != new.as_ref() && !(unset(self.items.get(k)) && unset(new.as_ref())),
            false => self.items.get(k) != new.as_ref(),
        });
        if diff.is_empty() {
            return Applied { version: self.version, ..Applied::default() };
        }
        let first = self.version == 0;
        self.version += 1;
        let mut applied = Applied { version: self.version, ..Applied::default() };
        let items = Arc::make_mut(&mut self.items);
        for (k, new) in diff {
            if self.changed_at.get(&k).is_some_and(|at| *at > base_version) {
                applied.conflicts.push(k.clone());
                if let Some(by) = self.changed_by.get(&k).filter(|by| **by != job) {
                    applied.overridden.push((*by, k.clone()));
                }
            }
            self.changed_by.insert(k.clone(), job);
            let old = match &new {
                Some(v) => items.insert(k.clone(), v.clone()),
                None => items.remove(&k),
            };
            self.changed_at.insert(k.clone(), self.version);
            if !first {
                applied.changes.extend(describe(&k, old.as_deref(), new.as_deref()));
            }
        }
        if first {
            applied.changes.push(format!("state recorded ({} items)", items.len()));
            let moved = items.get("cwd").filter(|c| self.opened_in.as_ref() != Some(*c));
            applied.changes.extend(moved.map(|c| format!("cwd → {}", String::from_utf8_lossy(c))));
            if let Some(fresh) = &self.fresh {
                applied.changes.extend(fresh.news(items));
            }
            self.first = Some(Arc::clone(&self.items));
        }
        if applied.changes.len() > MAX_CHANGES {
            let more = applied.changes.len() - (MAX_CHANGES - 1);
            applied.changes.truncate(MAX_CHANGES - 1);
            applied.changes.push(format!("… and {more} more"));
        }
        applied
    }

    /// A brief summary for `describe`.
    pub fn summary(&self) -> StateSummary {
        let count = |p: &str| self.items.keys().filter(|k| k.starts_with(p)).count();
        let exported = self
            .items
            .iter()
            .filter(|(k, v)| k.starts_with("var:") && flags(v).contains('x'))
            .map(|(k, _)| k[4..].to_owned())
            .collect();
        let on = |p: &str, on: &[u8]| {
            self.items
                .iter()
                .filter(|(k, v)| k.starts_with(p) && v.as_slice() == on)
                .map(|(k, _)| k[p.len()..].to_owned())
                .collect()
        };
        StateSummary {
            version: self.version,
            cwd: self.items.get("cwd").map(|c| String::from_utf8_lossy(c).into_owned()),
            umask: self.items.get("umask").map(|c| String::from_utf8_lossy(c).into_owned()),
            exported,
            variables: self.items.iter().filter(|(k, v)| k.starts_with("var:") && !v.is_empty()).count(),
            functions: self.items.keys().filter_map(|k| k.strip_prefix("func:")).map(str::to_owned).collect(),
            aliases: count("alias:"),
            set_options: on("set:", b"-"),
            shopt_options: on("shopt:", b"s"),
        }
    }
}

/// The flags of a `declare -p` line (`x`, `r`, `a`, …; `-` for none).
/// The attribute letters of a `declare -p` line (`x`, `ir`, …; `-` for none).
pub(crate) fn flags(line: &[u8]) -> String {
    let rest = line.strip_prefix(b"declare -").unwrap_or_default();
    let end = rest.iter().position(|b| *b == b' ').unwrap_or(rest.len());
    String::from_utf8_lossy(&rest[..end]).into_owned()
}

/// One change in a few words, or nothing for changes not worth a line (`OLDPWD` moves with every `cd`).
fn describe(key: &str, old: Option<&[u8]>, new: Option<&[u8]>) -> Option<String> {
    let (kind, name) = key.split_once(':').unwrap_or((key, ""));
    let gone = |v: Option<&[u8]>| v.is_none_or(|v| v.is_empty() && kind == "var");
    Some(match (kind, gone(old), gone(new)) {
        ("cwd", _, _) => format!("cwd → {}", String::from_utf8_lossy(new.unwrap_or_default())),
        ("umask", _, _) => format!("umask {}", String::from_utf8_lossy(new.unwrap_or_default())),
        ("dirstack", _, _) => {
            let n = new.filter(|v| !v.is_empty()).map_or(0, |v| v.split(|b| *b == 0).count());
            format!("directory stack: {n} below the top")
        }
        ("set", _, _) => format!("set {}o {name}", String::from_utf8_lossy(new.unwrap_or(b"+"))),
        ("shopt", _, _) => format!("shopt -{} {name}", String::from_utf8_lossy(new.unwrap_or(b"u"))),
        ("var", _, _) if name == "OLDPWD" => return None,
        ("var", true, false) if flags(new.unwrap_or_default()).contains('x') => format!("+export {name}"),
        ("var", true, false) => format!("+var {name}"),
        ("var", false, true) => format!("-var {name}"),
        ("func", true, false) => format!("+function {name}"),
        ("func", false, true) => format!("-function {name}"),
        ("fexport", true, false) => format!("+export -f {name}"),
        ("fexport", false, true) => format!("-export -f {name}"),
        ("alias", true, false) => format!("+alias {name}"),
        ("alias", false, true) => format!("-alias {name}"),
        (_, true, true) => return None,
        (k, false, false) => format!("~{} {name}", if k == "func" { "function" } else { k }),
        _ => return None,
    })
}

/// Aliases are carried to be used: a non-interactive bash expands none unless `expand_aliases` is on
/// (an interactive shell's default), so a captured state that holds aliases records it on. The call that
/// defines the first alias says `shopt -s expand_aliases` beside `+alias NAME`; `shopt -u
/// expand_aliases` holds only while no alias is defined.
pub fn expand_carried_aliases(items: &mut Items) {
    if items.keys().any(|k| k.starts_with("alias:")) {
        items.insert("shopt:expand_aliases".to_owned(), b"s".to_vec());
    }
}

/// A job's restore: the script bash evaluates and the entries added to its environment.
#[derive(Clone, Debug, Default)]
pub struct Restore {
    pub script: Vec<u8>,
    pub env: Vec<(String, String)>,
}

/// The restore of a fresh bash: what bash can import from its environment travels there
/// ([`crate::shell::env`]), the rest in the script.
pub fn restore(items: &Items) -> Restore {
    let borne = crate::shell::env::split(items);
    Restore { script: script(items, &borne, true), env: borne.env }
}

/// The restore entirely as a script (for a shell that is already running, or started elsewhere).
pub fn restore_script(items: &Items) -> Vec<u8> {
    script(items, &crate::shell::env::EnvBorne::default(), false)
}

/// The bash text that re-applies `items` (less what `borne` carries) in a fresh
/// `bash --noprofile --norc`, in this order: working directory, umask, variables (tombstones unset),
/// functions (with `extglob` on while they are read), aliases, directory stack, then `shopt` and `set`
/// options last (so `set -e`/`-u` never trip the restore, and the command is parsed under the recorded
/// options). Options are items only where they differ from bash's defaults. Empty for an empty record.
///
/// For a fresh bash's wrapper (`fresh`), the trace options `xtrace` and `verbose` are not switched on
/// here but named in `__heddle_t` (`x`, `v`, `xv`): the wrapper switches them on inside the command's own
/// `eval` (worker/src/state.rs), so they trace and echo the command and none of the wrapper.
fn script(items: &Items, borne: &crate::shell::env::EnvBorne, fresh: bool) -> Vec<u8> {
    let mut s = Vec::with_capacity(4096);
    if items.is_empty() {
        return s;
    }
    if let Some(cwd) = items.get("cwd") {
        s.extend_from_slice(b"builtin cd -- ");
        s.extend(quote(cwd));
        s.push(b'\n');
    }
    if let Some(u) = items.get("umask").filter(|u| !u.is_empty() && u.iter().all(u8::is_ascii_digit)) {
        s.extend_from_slice(b"builtin umask ");
        s.extend_from_slice(u);
        s.push(b'\n');
    }
    for (k, v) in items.range("var:".to_owned().."var;".to_owned()) {
        if borne.vars.contains(&k[4..]) {
            continue;
        }
        if v.is_empty() {
            s.extend_from_slice(format!("builtin unset -v {}\n", &k[4..]).as_bytes());
        } else if !v.contains(&b'=') {
            // Declared without a value (`declare -x OLDPWD`): a `declare` keeps a value set earlier in
            // this restore (the `cd` above sets `OLDPWD`), so unset it first, or every job would
            // capture a value the record never had and bump the version with no change.
            s.extend_from_slice(format!("builtin unset -v {}\n", &k[4..]).as_bytes());
            s.extend_from_slice(v);
            s.push(b'\n');
        } else {
            // Plain `declare`: `builtin declare` is not parsed as an assignment builtin (its `(…)` would
            // be a syntax error), and no user function exists yet at this point of the restore.
            s.extend_from_slice(v);
            s.push(b'\n');
        }
    }
    // Functions in `borne` are exported ones (bash imports them exported); the rest are defined here.
    let exported = |f: &str| items.contains_key(&format!("fexport:{f}"));
    let mut funcs = items
        .range("func:".to_owned().."func;".to_owned())
        .filter(|(k, _)| !borne.funcs.iter().any(|f| *f == k[5..]))
        .peekable();
    if funcs.peek().is_some() {
        s.extend_from_slice(b"builtin shopt -s extglob\n");
        let mut export = Vec::new();
        for (k, v) in funcs {
            s.extend_from_slice(v);
            export.extend(Some(&k[5..]).filter(|f| exported(f) && valid_name(f)));
        }
        if items.get("shopt:extglob").is_none_or(|v| v != b"s") {
            s.extend_from_slice(b"builtin shopt -u extglob\n");
        }
        if !export.is_empty() {
            s.extend_from_slice(format!("builtin export -f {}\n", export.join(" ")).as_bytes());
        }
    }
    let mut aliases = items.range("alias:".to_owned().."alias;".to_owned()).peekable();
    if aliases.peek().is_some() {
        s.extend_from_slice(b"builtin alias --");
        for (k, v) in aliases {
            s.push(b' ');
            s.extend(quote(&[&k.as_bytes()[6..], b"=", v].concat()));
        }
        s.push(b'\n');
    }
    if let Some(d) = items.get("dirstack").filter(|d| !d.is_empty()) {
        for dir in d.split(|b| *b == 0).rev() {
            s.extend_from_slice(b"builtin pushd -n -- ");
            s.extend(quote(dir));
            s.extend_from_slice(b" >/dev/null\n");
        }
    }
    options(&mut s, items, "shopt:", (b"s", "builtin shopt -s"), (b"u", "builtin shopt -u"), "", &|_| false);
    let traced = [("set:xtrace", 'x'), ("set:verbose", 'v')];
    let deferred = |k: &str| fresh && traced.iter().any(|(t, _)| *t == k);
    options(&mut s, items, "set:", (b"+", "builtin set"), (b"-", "builtin set"), "o", &deferred);
    let letters: String =
        traced.iter().filter(|(k, _)| fresh && items.get(*k).is_some_and(|v| v == b"-")).map(|(_, l)| *l).collect();
    if !letters.is_empty() {
        s.extend_from_slice(format!("__heddle_t={letters}\n").as_bytes());
    }
    s
}

/// One command per state (`shopt -s a b`, `shopt -u c`), or one `set +o a -o b` for `set`; keys `skip`
/// accepts are left out.
fn options(
    s: &mut Vec<u8>,
    items: &Items,
    prefix: &str,
    a: (&[u8], &str),
    b: (&[u8], &str),
    o: &str,
    skip: &dyn Fn(&str) -> bool,
) {
    let names = |want: &[u8]| -> Vec<&str> {
        items
            .iter()
            .filter(|(k, v)| k.starts_with(prefix) && v.as_slice() == want && !skip(k))
            .map(|(k, _)| &k[prefix.len()..])
            .collect()
    };
    if o.is_empty() {
        for (want, cmd) in [a, b] {
            let n = names(want);
            if !n.is_empty() {
                s.extend_from_slice(format!("{cmd} {}\n", n.join(" ")).as_bytes());
            }
        }
        return;
    }
    let mut line = String::from(a.1);
    for (want, sign) in [(a.0, "+"), (b.0, "-")] {
        for n in names(want) {
            line.push_str(&format!(" {sign}o {n}"));
        }
    }
    if line.len() > a.1.len() {
        s.extend_from_slice(line.as_bytes());
        s.push(b'\n');
    }
}

/// Quote bytes as one bash word: `'…'` when printable ASCII, else `$'…'` with `\xHH` escapes.
pub fn quote(b: &[u8]) -> Vec<u8> {
    if b.iter().all(|c| (0x20..0x7f).contains(c) && *c != b'\'') {
        return [b"'".as_slice(), b, b"'"].concat();
    }
    let mut q = b"$'".to_vec();
    for c in b {
        match c {
            b'\\' | b'\'' => q.extend_from_slice(&[b'\\', *c]),
            0x20..=0x7e => q.push(*c),
            _ => q.extend_from_slice(format!("\\x{c:02x}").as_bytes()),
        }
    }
    q.push(b'\'');
    q
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items(kv: &[(&str, &str)]) -> Items {
        kv.iter().map(|(k, v)| (k.to_string(), v.as_bytes().to_vec())).collect()
    }

    /// The first record of a session used to say only `state recorded (N items)` (and the cwd): a first
    /// job that exported a variable, defined a function or activated a venv never said so.
    #[test]
    fn the_first_record_names_what_a_fresh_job_shell_does_not_have() {
        let path = format!("declare -x PATH=\"{}\"", shm_proto::control::WORKER_PATH);
        let fresh = [
            ("cwd", "/w"),
            ("var:PATH", path.as_str()),
            ("var:HOME", "declare -x HOME=\"/h\""),
            ("var:LC_ALL", "declare -x LC_ALL=\"C\""),
            ("var:OLDPWD", "declare -x OLDPWD"),
            ("var:IFS", "declare -- IFS=$' \\t\\n'"),
            ("var:SHELL", "declare -- SHELL=\"/bin/bash\""),
            ("var:OWN", "declare -x OWN=\"1\""),
        ];
        let first = |extra: &[(&str, &str)]| {
            let mut r = StateRecord::opened_in(b"/w");
            r.set_fresh_env(FreshEnv::of(None, &[("OWN".into(), "1".into())]));
            let (v, base) = r.snapshot();
            let mut all = fresh.to_vec();
            all.extend_from_slice(extra);
            r.apply(v, &base, items(&all), 1).changes
        };
        assert_eq!(first(&[]), ["state recorded (8 items)"], "a fresh shell's own state is no news");
        let venv = "declare -x PATH=\"/w/.venv/bin:/usr/bin\"";
        let changes = first(&[
            ("var:FOO", "declare -x FOO=\"1\""),
            ("var:x", "declare -- x=\"3\""),
            ("func:f", "f () \n{ \n    :\n}\n"),
            ("alias:ll", "alias ll='ls -l'"),
            ("var:PATH", venv),
            ("var:VIRTUAL_ENV", "declare -x VIRTUAL_ENV=\"/w/.venv\""),
        ]);
        assert_eq!(
            changes,
            [
                "state recorded (13 items)",
                "+alias ll",
                "+function f",
                "+export FOO",
                "~var PATH",
                "+export VIRTUAL_ENV",
                "+var x"
            ]
        );
    }

    #[test]
    fn a_records_restore_is_made_once_and_again_when_the_record_changes() {
        let mut r = StateRecord::default();
        let (v0, b0) = r.snapshot();
        r.apply(v0, &b0, items(&[("cwd", "/w"), ("var:A", "declare -x A=\"1\""), ("alias:ll", "alias ll='ls -l'")]), 1);
        let (v1, base, first) = r.fresh_restore();
        let (again_v, _, again) = r.fresh_restore();
        assert!(Arc::ptr_eq(&first, &again), "the same record, the same restore");
        assert_eq!((v1, again_v), (r.version(), r.version()));
        assert_eq!((first.script.clone(), first.env.clone()), (restore(&base).script, restore(&base).env));
        // A job changes the record (its items are shared with the cache, so they are copied, not
        // changed in place): the restore is made anew, from the new items.
        let (v, b) = r.snapshot();
        drop(b0);
        r.apply(
            v,
            &b,
            items(&[("cwd", "/w/sub"), ("var:A", "declare -x A=\"2\""), ("alias:ll", "alias ll='ls -l'")]),
            2,
        );
        let (_, now, changed) = r.fresh_restore();
        assert!(!Arc::ptr_eq(&first, &changed));
        assert_eq!((changed.script.clone(), changed.env.clone()), (restore(&now).script, restore(&now).env));
        assert_ne!(changed.script, first.script);
        assert!(
            String::from_utf8_lossy(&changed.script).contains("/w/sub"),
            "{:?}",
            String::from_utf8_lossy(&changed.script)
        );
    }

    #[test]
    fn the_first_record_names_its_cwd_only_when_it_is_not_where_the_session_was_opened() {
        for (cwd, named) in [("/w", false), ("/elsewhere", true)] {
            let mut r = StateRecord::opened_in(b"/w");
            let (v, base) = r.snapshot();
            let applied = r.apply(v, &base, items(&[("cwd", cwd), ("var:A", "declare -- A=\"1\"")]), 1);
            assert_eq!(applied.changes.contains(&format!("cwd → {cwd}")), named, "{:?}", applied.changes);
            assert_eq!(applied.changes[0], "state recorded (2 items)");
            let mut again = r.restarted();
            let (v, base) = again.snapshot();
            let applied = again.apply(v, &base, items(&[("cwd", cwd)]), 1);
            assert_eq!(applied.changes.contains(&format!("cwd → {cwd}")), named, "after a restart");
        }
    }

    #[test]
    fn concurrent_jobs_keep_each_others_changes_and_name_conflicts() {
        let mut r = StateRecord::default();
        let (v0, b0) = r.snapshot();
        r.apply(v0, &b0, items(&[("cwd", "/"), ("var:HOME", "declare -x HOME=\"/\"")]), 1);
        let (v, base) = r.snapshot();
        let mut a = (*base).clone();
        a.insert("var:A".into(), b"declare -x A=\"1\"".to_vec());
        a.insert("cwd".into(), b"/a".to_vec());
        let mut b = (*base).clone();
        b.insert("var:B".into(), b"declare -- B=\"2\"".to_vec());
        b.insert("cwd".into(), b"/b".to_vec());
        b.remove("var:HOME");
        let ra = r.apply(v, &base, a, 2);
        assert_eq!(ra.changes, ["cwd → /a", "+export A"]);
        let rb = r.apply(v, &base, b, 3);
        assert_eq!(rb.conflicts, ["cwd"]);
        assert_eq!(rb.overridden, [(2, "cwd".to_owned())], "job 2's cwd was overridden by job 3");
        assert_eq!(rb.changes, ["cwd → /b", "+var B", "-var HOME"]);
        assert_eq!((r.version(), r.items()["cwd"].as_slice()), (3, &b"/b"[..]));
        assert!(r.items().contains_key("var:A") && r.items()["var:HOME"].is_empty());
        let script = String::from_utf8(restore_script(r.items())).unwrap();
        assert!(script.contains("builtin unset -v HOME\n"), "{script}");
        assert!(script.contains("\ndeclare -x A=\"1\"\n"), "{script}");
    }

    #[test]
    fn the_same_value_from_two_jobs_is_no_conflict_and_a_job_older_than_the_record_changes_nothing() {
        let opened =
            items(&[("cwd", "/p"), ("var:OLDPWD", "declare -x OLDPWD=\"/p\""), ("var:A", "declare -- A=\"1\"")]);
        let mut r = StateRecord::default();
        let (v0, b0) = r.snapshot();
        let mut quick = opened.clone();
        quick.insert("var:Q".into(), b"declare -- Q=\"1\"".to_vec());
        r.apply(v0, &b0, quick, 1);
        let slow = r.apply(v0, &b0, opened.clone(), 2);
        assert_eq!((slow.conflicts.len(), slow.changes.len(), slow.version), (0, 0, 1), "{slow:?}");
        let (v, base) = r.snapshot();
        let cd = |dir: &str| {
            let mut c = (*base).clone();
            c.insert("cwd".into(), dir.as_bytes().to_vec());
            c.insert("var:OLDPWD".into(), b"declare -x OLDPWD=\"/p\"".to_vec());
            c.insert("var:A".into(), b"declare -- A=\"2\"".to_vec());
            c
        };
        r.apply(v, &base, cd("/a"), 3);
        let b = r.apply(v, &base, cd("/b"), 4);
        assert_eq!(b.conflicts, ["cwd"], "OLDPWD and A were set alike by both: {b:?}");
        assert_eq!(b.overridden, [(3, "cwd".to_owned())]);
        let older = r.apply(v0, &b0, cd("/c"), 5);
        assert_eq!(
            older.conflicts,
            ["cwd"],
            "differs from the first record (who changed it is unknown); A is as recorded"
        );
    }

    #[test]
    fn an_unchanged_capture_keeps_the_version() {
        let mut r = StateRecord::default();
        let (v, b) = r.snapshot();
        r.apply(v, &b, items(&[("cwd", "/")]), 1);
        let (v, b) = r.snapshot();
        let a = r.apply(v, &b, (*b).clone(), 2);
        assert_eq!((a.version, a.changes.len()), (1, 0));
    }

    #[test]
    fn quoting_survives_every_byte() {
        assert_eq!(quote(b"/tmp/a b"), b"'/tmp/a b'");
        assert_eq!(quote(b"it's\n\xff"), b"$'it\\'s\\x0a\\xff'");
    }

    #[test]
    fn restore_orders_options_last() {
        let it = items(&[
            ("set:errexit", "-"),
            ("set:xtrace", "+"),
            ("shopt:extglob", "s"),
            ("func:f", "f () \n{ \n    :\n}\n"),
            ("alias:ll", "ls -l"),
            ("cwd", "/x"),
            ("umask", "0077"),
        ]);
        let s = String::from_utf8(restore_script(&it)).unwrap();
        assert_eq!(
            s,
            "builtin cd -- '/x'\nbuiltin umask 0077\nbuiltin shopt -s extglob\nf () \n{ \n    :\n}\n\
             builtin alias -- 'll=ls -l'\nbuiltin shopt -s extglob\nbuiltin set +o xtrace -o errexit\n"
        );
        let mut exported = it.clone();
        exported.insert("fexport:f".into(), Vec::new());
        exported.insert("alias:la".into(), b"ls -a".to_vec());
        let s = String::from_utf8(restore_script(&exported)).unwrap();
        assert!(s.contains("}\nbuiltin export -f f\nbuiltin alias -- 'la=ls -a' 'll=ls -l'\n"), "{s}");
        let r = restore(&exported);
        assert_eq!(r.env, [("BASH_FUNC_f%%".to_owned(), "() { \n    :\n}\n".to_owned())]);
        assert_eq!(
            String::from_utf8(r.script).unwrap(),
            "builtin cd -- '/x'\nbuiltin umask 0077\n\
             builtin alias -- 'la=ls -a' 'll=ls -l'\nbuiltin shopt -s extglob\nbuiltin set -o errexit\n",
            "a fresh bash starts with xtrace off: the wrapper, not the restore, switches trace options"
        );
        let r = restore(&it);
        assert!(r.env.is_empty(), "an unexported function never travels in the environment: {:?}", r.env);
        assert!(String::from_utf8(r.script).unwrap().contains("f () \n{ \n    :\n}\n"));
    }

    #[test]
    fn a_fresh_restore_names_the_trace_options_instead_of_setting_them() {
        let it = items(&[("set:xtrace", "-"), ("set:verbose", "-"), ("set:nounset", "-")]);
        let fresh = String::from_utf8(restore(&it).script).unwrap();
        assert_eq!(fresh, "builtin set -o nounset\n__heddle_t=xv\n");
        let running = String::from_utf8(restore_script(&it)).unwrap();
        assert_eq!(running, "builtin set -o nounset -o verbose -o xtrace\n", "a running shell's loop handles them");
        let only = String::from_utf8(restore(&items(&[("set:verbose", "-")])).script).unwrap();
        assert_eq!(only, "__heddle_t=v\n");
    }
}
