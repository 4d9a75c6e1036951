//! Applying the guards to one `run`: build the [`Ctx`] from the session (its writable roots, the cwd
//! and HOME its shell state carries), check the command against the session policy's rules, record an
//! override in the audit log, and put the warnings on the job. Returns the refusal's notes when a deny
//! rule matched and was not overridden.

use crate::guard::{check, Ctx, Hit};
use crate::kernel::{Client, Kernel};
use crate::sessions::session::Session;
use policies::Guard;
use shm_proto::msg::JobId;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

/// The guards of a builtin profile, parsed once.
fn guards_of(policy: &str) -> Arc<Vec<Guard>> {
    static CACHE: OnceLock<Mutex<HashMap<String, Arc<Vec<Guard>>>>> = OnceLock::new();
    let mut cache = CACHE.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    cache
        .entry(policy.to_owned())
        .or_insert_with(|| Arc::new(policies::Policy::builtin(policy).map(|p| p.guards).unwrap_or_default()))
        .clone()
}

/// The value of `declare -x HOME="/root"` as the shell-state record keeps it.
pub(crate) fn declared_value(decl: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(decl).ok()?;
    let (_, value) = text.split_once('=')?;
    let value = value.strip_prefix('"').and_then(|v| v.strip_suffix('"')).unwrap_or(value);
    (!value.is_empty() && !value.contains(['$', '\\', '`'])).then(|| value.to_owned())
}

/// Check `cmd` for `job` of `s`; see the module docs.
pub(crate) fn apply(
    k: &Kernel,
    client: &Client,
    s: &Session,
    job: JobId,
    cmd: &str,
    over: Option<(&str, &str)>,
    tty: bool,
) -> Option<Vec<String>> {
    let (policy, ctx) = {
        let st = s.lock();
        let (_, items) = st.record().snapshot();
        let cwd =
            items.get("cwd").map(|c| String::from_utf8_lossy(c).into_owned()).unwrap_or_else(|| s.spec().cwd.clone());
        let home = items
            .get("var:HOME")
            .and_then(|d| declared_value(d))
            .or_else(|| s.spec().env.iter().find(|(n, _)| n == "HOME").map(|(_, v)| v.clone()));
        let (policy, roots) = match st.sandbox() {
            Some(info) => (info.policy.clone(), info.writable.iter().map(|r| PathBuf::from(&r.path)).collect()),
            None => (policies::DEFAULT_PROFILE.to_owned(), vec![PathBuf::from(&s.spec().cwd)]),
        };
        (policy, Ctx { roots, cwd: cwd.into(), home: home.map(PathBuf::from), tty })
    };
    let guards = guards_of(&policy);
    let verdict = check(cmd, &guards, &ctx);
    let mut warnings: Vec<String> = verdict.warn.iter().map(Hit::sentence).collect();
    warnings.extend(verdict.unread.clone());
    let mut deny = verdict.deny;
    if let Some((rule, reason)) = over {
        let matched = deny.iter().position(|h| h.rule == rule);
        let detail = serde_json::json!({"rule": rule, "reason": reason, "cmd": cmd, "matched": matched.is_some()});
        k.db.write(crate::storage::db::Write::Audit {
            uid: client.uid,
            op: "override".into(),
            session: Some(s.name().to_owned()),
            job: Some(job),
            detail: detail.to_string(),
        });
        match matched {
            Some(i) => {
                let h = deny.remove(i);
                warnings.push(format!(
                    "guard {} overridden for this call (reason: {reason}); the override is audited",
                    h.rule
                ));
                s.lock().count_guard_override();
            }
            None if !guards.iter().any(|g| g.name == rule) => {
                let names: Vec<&str> = guards.iter().map(|g| g.name.as_str()).collect();
                warnings.push(format!(
                    "override of guard {rule}: the session's policy has no guard of that name, so nothing was \
                     overridden (its guards: {})",
                    names.join(", ")
                ))
            }
            None => warnings.push(format!(
                "override of guard {rule}: that rule did not refuse this command, so nothing was overridden"
            )),
        }
    }
    let refusal = (!deny.is_empty()).then(|| {
        let mut why: Vec<String> = deny.iter().map(|h| format!("refused before launch: {}", h.sentence())).collect();
        why.push(format!(
            "nothing of this command ran; to run it anyway, repeat the call with override: {{\"rule\": \"{}\", \"reason\": \"…\"}} (audited)",
            deny[0].rule
        ));
        why
    });
    if let Some(j) = s.lock().job_mut(job) {
        j.warnings.extend(warnings);
    }
    refusal
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn home_is_read_from_the_record_only_when_literal() {
        assert_eq!(declared_value(br#"declare -x HOME="/root""#).as_deref(), Some("/root"));
        assert_eq!(declared_value(br#"declare -x HOME="$X""#), None);
        assert_eq!(declared_value(b"declare -x HOME"), None);
    }

    #[test]
    fn profiles_are_parsed_once() {
        assert!(Arc::ptr_eq(&guards_of("workspace"), &guards_of("workspace")));
        assert!(guards_of("no-such-profile").is_empty());
    }
}
