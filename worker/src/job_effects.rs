//! The effects ledger around a job (see [`crate::effects`]): the "before" at launch, the "after" and the
//! comparison just before `Exited`.

use crate::cgroup::CgroupOps;
use crate::effects::{self, Git, GitEnv, JobEffects, Snapshot, GIT_RUNS};
use crate::effects_monitor::{Changes, Monitor};
use crate::effects_watch::{self, Quiet, Watch, WATCH_LIMIT};
use crate::event_loop::WorkerError;
use crate::Worker;
use shm_proto::msg::{EffectsMode, Event, JobId, ProjectEffects, RunSpec, StdinMode};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Instant;

/// A snapshot of the work tree now, how it was read (`watch`, `pathspec`, `full`), and why it was not
/// read through the change monitor when it was not.
/// For `watch` and `pathspec`, the note is where the snapshot brought up to date came from.
type Now = (Result<Arc<Snapshot>, String>, &'static str, Option<String>);

impl<C: CgroupOps> Worker<C> {
    /// True when a job other than `except` may still write: running, or ended with processes left.
    pub(crate) fn others_running(&self, except: Option<JobId>) -> bool {
        self.jobs.iter().any(|(id, j)| Some(*id) != except && !(j.exited_sent && j.emptied_sent))
    }

    fn git_for<'a>(&'a self, env: &'a GitEnv) -> Option<Git<'a>> {
        Some(Git {
            program: env.program.as_deref()?,
            env: &env.env,
            ruleset: self.sandbox.as_ref().and_then(|s| s.job_ruleset()),
            seccomp: self.sandbox.as_ref().and_then(|s| s.job_seccomp()),
        })
    }

    /// The environment git runs with for `spec`'s ledger: the last one when the job's environment is
    /// made from the same parts, else made now (and kept).
    fn git_env(&mut self, spec: &RunSpec) -> Arc<GitEnv> {
        let tty = matches!(spec.stdin, StdinMode::Tty { .. });
        if let Some(((env, state_env, state, t), made)) = &self.ledger.git_env {
            let same = *env == spec.env && *state_env == spec.state_env && *state == spec.state.is_some() && *t == tty;
            if same && made.program.is_some() {
                return Arc::clone(made);
            }
        }
        let made = Arc::new(GitEnv::new(self.spec_env(spec)));
        let key = (spec.env.clone(), spec.state_env.clone(), spec.state.is_some(), tty);
        self.ledger.git_env = Some((key, Arc::clone(&made)));
        made
    }

    /// The job's "before", at launch: the last snapshot when still valid, else one taken now.
    pub(crate) fn effects_before(&mut self, spec: &RunSpec) -> Option<JobEffects> {
        // Jobs that may write while this one runs (and this one, for their ledgers).
        let mut overlapped = std::collections::BTreeSet::new();
        for (id, j) in self.jobs.iter_mut() {
            if *id != spec.job && !(j.exited_sent && j.emptied_sent) {
                overlapped.insert(*id);
                if let Some(fx) = j.effects.as_mut() {
                    fx.overlapped.insert(spec.job);
                }
            }
        }
        if spec.effects == EffectsMode::None {
            return None;
        }
        // Where the command starts: the carried cwd (after the restore's `cd`), when it is a directory.
        let carried = spec.state_cwd.as_deref().map(|c| Path::new(OsStr::from_bytes(c))).filter(|c| c.is_dir());
        let cwd = carried.unwrap_or(Path::new(OsStr::from_bytes(&spec.cwd)));
        let root = effects::work_tree(cwd);
        let t = Instant::now();
        let env = self.git_env(spec);
        let runs = GIT_RUNS.load(Relaxed);
        let watching = |w: &Self, root: &Path| w.ledger.monitor.as_ref().is_some_and(|(m, _, _)| m.root == root);
        let (before, how) = match &root {
            None => (Err(String::new()), String::new()),
            Some(root) => match self.ledger.cached_before(root, !self.others_running(None)) {
                Some((s, how)) if !watching(self, root) => (Ok(s), how),
                _ => {
                    let (s, method, note) = self.project_now(root, &env);
                    let origin = note.clone().filter(|o| !o.is_empty()).unwrap_or_else(|| "the last snapshot".into());
                    self.set_origin(&s, format!("taken at the launch of job {}", spec.job));
                    let how = match method {
                        "watch" => format!("{origin}, which the change monitor saw no change to since (no git run)"),
                        "pathspec" => format!("{origin}, brought up to date by a status of the paths the change monitor saw change since (the job waited for it)"),
                        _ => format!(
                            "taken at launch (the job waited for it){}",
                            note.map(|n| format!(": {n}")).unwrap_or_default()
                        ),
                    };
                    (s, how)
                }
            },
        };
        self.ledger.generation += 1;
        let before_us = t.elapsed().as_micros() as u64;
        let roots = self.watched_roots(cwd, root.as_deref());
        let watched_skipped = match roots.is_empty() {
            true => None,
            false => self.ledger.over_limit.skipped(&roots, WATCH_LIMIT as usize),
        };
        let (watched, watched_reused) = match roots.is_empty() || watched_skipped.is_some() {
            true => (None, false),
            false => {
                let (w, walked) = self.look_watched(&roots);
                self.ledger.over_limit.note(&w, spec.job);
                (Some(w), !walked)
            }
        };
        let before_git_runs = GIT_RUNS.load(Relaxed).wrapping_sub(runs);
        Some(JobEffects {
            mode: spec.effects,
            root,
            before,
            before_how: how,
            before_us,
            git: env,
            overlapped,
            watched,
            watched_reused,
            watched_skipped,
            before_git_runs,
        })
    }

    /// The watched roots' entries now, through the [`Quiet`] that keeps the last walk valid (started
    /// at the first look); and whether that took a walk.
    fn look_watched(&mut self, roots: &[PathBuf]) -> (Arc<Watch>, bool) {
        let quiet = self.ledger.quiet.get_or_insert_with(|| Quiet::new().ok_or(()));
        match quiet {
            Ok(q) => q.look(roots, WATCH_LIMIT as usize),
            Err(()) => (Arc::new(Watch::take(roots, WATCH_LIMIT as usize)), true),
        }
    }

    /// The work tree at `root` now: through the change monitor when it watches `root` (no git run
    /// when it saw no change, a status of the changed paths when it saw a few), else a full status,
    /// with a monitor started first so the next look can use it.
    fn project_now(&mut self, root: &Path, env: &GitEnv) -> Now {
        let no_git = || "no git program on the job's PATH".to_owned();
        let mut note = None;
        let drained = match self.ledger.monitor.as_mut().filter(|(m, _, _)| m.root == root) {
            Some((m, base, origin)) => Some((m.drain(), Arc::clone(base), origin.clone())),
            None => None,
        };
        match drained {
            Some((Changes::None, base, origin)) => return (Ok(base), "watch", Some(origin)),
            Some((Changes::Paths(paths), base, origin)) => {
                let fresh = match self.git_for(env) {
                    None => Err(no_git()),
                    Some(git) => effects::refresh(&git, &base, &paths, true),
                };
                match fresh {
                    Ok(s) => {
                        let s = Arc::new(s);
                        if let Some((_, last, named)) = self.ledger.monitor.as_mut() {
                            *last = Arc::clone(&s);
                            named.clear();
                        }
                        return (Ok(s), "pathspec", Some(origin));
                    }
                    Err(why) => note = Some(format!("a status of the {} changed paths failed ({why})", paths.len())),
                }
            }
            Some((Changes::Full(why), _, _)) => note = Some(why),
            None => {}
        }
        // A full status; the monitor is kept when still sound, else another one is started first, so
        // what changes while git reads is seen at the next look.
        let kept = match self.ledger.monitor.take() {
            Some((m, _, _)) if m.root == root && m.broken.is_none() => Some(m),
            _ => None,
        };
        let monitor = match kept {
            Some(m) => Some(m),
            None => match Monitor::start(root) {
                Ok(m) => Some(m),
                Err(why) => {
                    note.get_or_insert(format!("the change monitor cannot watch this work tree: {why}"));
                    None
                }
            },
        };
        note.get_or_insert_with(|| "the change monitor had not watched this work tree before".into());
        let snap = match self.git_for(env) {
            None => Err(no_git()),
            Some(git) => effects::snapshot(&git, root, true).map(Arc::new),
        };
        if let (Some(m), Ok(s)) = (monitor, &snap) {
            self.ledger.monitor = Some((m, Arc::clone(s), String::new()));
        }
        (snap, "full", note)
    }

    /// The paths no git status covers: the cwd when it is in no work tree, and the session's writable
    /// roots that neither lie in the work tree nor contain it.
    fn watched_roots(&self, cwd: &Path, tree: Option<&Path>) -> Vec<PathBuf> {
        let mut roots: Vec<PathBuf> = Vec::new();
        if tree.is_none() {
            roots.push(cwd.to_path_buf());
        }
        let writable = self.sandbox.as_ref().map(|s| s.info.writable.as_slice()).unwrap_or_default();
        for r in writable {
            let r = PathBuf::from(&r.path);
            let apart = tree.is_none_or(|t| !r.starts_with(t) && !t.starts_with(&r));
            // A root above the cwd would walk it again (and, outside a repository, its whole parent).
            if apart && !cwd.starts_with(&r) && r.is_dir() {
                roots.push(r);
            }
        }
        roots
    }

    /// Just before `Exited`: the "after", compared with the "before", as `Event::Effects`.
    pub(crate) fn effects_after(&mut self, job: JobId) -> Result<(), WorkerError> {
        self.ledger.generation += 1;
        let Some(fx) = self.jobs.get_mut(&job).and_then(|j| j.effects.take()) else { return Ok(()) };
        let t = Instant::now();
        let runs = GIT_RUNS.load(Relaxed);
        let quiet = !self.others_running(Some(job));
        let mut project = ProjectEffects { confidence: "none".into(), ..Default::default() };
        match (&fx.root, &fx.before) {
            (None, _) => {
                project.scope = "no git work tree contains the job's working directory".into();
                project.reasons.push(
                    "the job's cwd is in no git work tree, so no project ledger was taken (the paths it changed are unknown)"
                        .into(),
                );
            }
            (Some(root), Err(why)) => {
                project.root = root.to_string_lossy().into_owned();
                project.scope = format!("git work tree {}", root.display());
                project.reasons.push(format!("the state before the job could not be read: {why}"));
            }
            (Some(root), Ok(before)) => {
                let (after, method, note) = self.project_now(root, &fx.git);
                match after {
                    Err(why) => {
                        project.root = root.to_string_lossy().into_owned();
                        project.scope = format!("git work tree {}", root.display());
                        project.reasons.push(format!("the state after the job could not be read: {why}"));
                    }
                    Ok(after) => {
                        let mut links = std::mem::take(&mut self.ledger.links);
                        let writable: Option<Vec<PathBuf>> = self
                            .sandbox
                            .as_ref()
                            .filter(|s| s.info.landlock_status != "not_enforced")
                            .map(|s| s.info.writable.iter().map(|r| PathBuf::from(&r.path)).collect());
                        if let Some(git) = self.git_for(&fx.git) {
                            project = effects::compare(&git, &mut links, before, &after, fx.mode, writable.as_deref());
                        }
                        self.ledger.links = links;
                        project.before = fx.before_how.clone();
                        if method != "full" || fx.before_how.contains("change monitor") {
                            project.scope.push_str(
                                "; what changed since the last snapshot was told by the change monitor (inotify), which does not see writes through a shared memory mapping or a hard link from outside the tree",
                            );
                        }
                        project.method = method.into();
                        project.method_note = (method == "full").then_some(note).flatten();
                        self.set_origin(&Ok(Arc::clone(&after)), format!("the after of job {job}"));
                        // Another job's writes can only be mistaken for this one's when something is
                        // listed: an empty list is true of the tree whoever ran beside it.
                        if !fx.overlapped.is_empty() && !project.changed.is_empty() {
                            project.confidence = "partial".into();
                            project.reasons.push(overlap_reason(&fx.overlapped));
                        }
                        self.ledger.remember(after, quiet, format!("the after of job {job}"));
                    }
                }
            }
        }
        project.cost_us = fx.before_us + t.elapsed().as_micros() as u64;
        project.git_runs = fx.before_git_runs + GIT_RUNS.load(Relaxed).wrapping_sub(runs);
        if let Some(before) = &fx.watched {
            let (after, walked) = self.look_watched(&before.roots);
            self.ledger.over_limit.note(&after, job);
            let mut part = effects_watch::compare(before, &after);
            // A side that took no walk cost nothing now (the walk it reused was paid for earlier).
            part.cost_us = if fx.watched_reused { 0 } else { before.cost_us } + if walked { after.cost_us } else { 0 };
            if fx.watched_reused && !walked {
                part.scope.push_str(
                    "; inotify on every directory of the last walk saw no change since, so neither side walked \
                     again (writes through a shared mmap raise no event)",
                );
            }
            if !fx.overlapped.is_empty() && !part.changed.is_empty() {
                part.confidence = "partial".into();
                part.reasons.push(overlap_reason(&fx.overlapped));
            }
            project.watched = Some(part);
        } else if let Some(part) = fx.watched_skipped {
            project.watched = Some(part);
        }
        shrink_to(&mut project, self.out.max_frame().saturating_sub(512));
        Ok(self.out.emit(&Event::Effects { job, project })?)
    }

    /// Name where the monitor's snapshot came from, when it is `s` and was just taken.
    fn set_origin(&mut self, s: &Result<Arc<Snapshot>, String>, how: String) {
        if let (Some((_, last, origin)), Ok(s)) = (self.ledger.monitor.as_mut(), s) {
            if Arc::ptr_eq(last, s) && origin.is_empty() {
                *origin = how;
            }
        }
    }

    /// A job's processes outlived it: the last "after" may not stay a valid "before".
    pub(crate) fn effects_invalidate(&mut self) {
        self.ledger.generation += 1;
    }
}

/// Why other jobs of the session lower a ledger's confidence.
fn overlap_reason(jobs: &std::collections::BTreeSet<JobId>) -> String {
    let named: Vec<String> = jobs.iter().map(|j| format!("job {j}")).collect();
    format!(
        "{} of this session ran or kept processes while this job ran and may have written the same tree: the paths listed may be theirs, not this job's",
        named.join(", ")
    )
}

/// Cut the ledger until it encodes within `max` bytes (the diff first, then listed paths).
fn shrink_to(p: &mut ProjectEffects, max: usize) {
    let size = |p: &ProjectEffects| postcard::to_stdvec(p).map_or(usize::MAX, |v| v.len());
    if size(p) <= max {
        return;
    }
    if p.diff.take().is_some() {
        p.diff_note = Some("the diff did not fit the worker's event frame; run `git diff` as a job to see it".into());
    }
    while size(p) > max && !p.changed.is_empty() {
        let cut = p.changed.len().div_ceil(2);
        p.changed.truncate(p.changed.len() - cut);
        p.changed_more += cut as u32;
    }
    while size(p) > max && p.watched.as_ref().is_some_and(|w| !w.changed.is_empty()) {
        let Some(w) = p.watched.as_mut() else { break };
        let cut = w.changed.len().div_ceil(2);
        w.changed.truncate(w.changed.len() - cut);
        w.changed_more += cut as u32;
    }
}
