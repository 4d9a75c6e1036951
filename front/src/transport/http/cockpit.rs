//! The cockpit: a page at `GET /` for the people watching a heddle, served by the HTTP door with the
//! door's authentication (the page, its script and its streams act as the requesting uid, and show
//! only what that uid's calls would show).
//!
//! - `GET /`, `/cockpit.js`, `/cockpit.css`: three static files compiled in (`include_str!`); no build
//!   step, no copied library.
//! - `GET /cockpit/sessions`: Server-Sent Events, one `sessions` event with the uid's sessions (the
//!   facts `describe` gives: shell state, warnings, override count) and each session's `jobs` listing
//!   (command, phase, liveness, usage, survivors, kept), sent again whenever it changed (sampled once a
//!   second on the server, since CPU and memory change without an event).
//! - `GET /cockpit/screen?session=S&job=J`: Server-Sent Events of the job's raw stream drawn by a
//!   terminal emulator ([`crate::terminal::html::RawScreen`]) as escaped HTML, one `screen` event per
//!   batch of output and a final `settled`.
//!
//! - `GET /cockpit/job?session=S&job=J`: the job's result as it stands (its effects, refusals, warnings
//!   and state changes), read without reporting the job, so its announcement still reaches the agent.
//!
//! - `GET /cockpit/model?session=S&job=J`: the last 200 lines of the job's model view.
//!
//! Everything the page reads, it reads as an onlooker: no listing or view of the page takes the
//! announcements meant for the agent's next call. The `sessions` event also carries the audit of the uid's guard overrides (newest 50).
//!
//! Killing a job or closing a session is the page's `POST /rpc` of `kill` / `session.close`, through the
//! same door, the same `Origin` check and the same receipts as any client.

use super::{blocking, not_found_or_bad, refuse, Body, Door, EventBody, KEEPALIVE};
use crate::kernel::{Client, Kernel};
use crate::rpc::outbox::{Outbox, OutboxReader};
use crate::terminal::html::RawScreen;
use base64::Engine;
use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use hyper::{Response, StatusCode};
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

const PAGE: &str = include_str!("cockpit/index.html");
const SCRIPT: &str = include_str!("cockpit/cockpit.js");
const STYLE: &str = include_str!("cockpit/cockpit.css");

/// How often the session listing is sampled for changes.
const SAMPLE: Duration = Duration::from_secs(1);
/// The emulator's size for a job's raw view.
const ROWS: u16 = 40;
const COLS: u16 = 160;

/// A static file, or `None` for a path that is not one.
pub(super) fn asset(path: &str) -> Option<Response<Body>> {
    let (body, ty) = match path {
        "/" | "/index.html" => (PAGE, "text/html; charset=utf-8"),
        "/cockpit.js" => (SCRIPT, "text/javascript; charset=utf-8"),
        "/cockpit.css" => (STYLE, "text/css; charset=utf-8"),
        _ => return None,
    };
    let mut r = Response::new(http_body_util::Either::Left(Full::new(Bytes::from_static(body.as_bytes()))));
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(ty));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    // Nothing but the page's own script and style runs; no frame may embed it.
    h.insert(
        "content-security-policy",
        HeaderValue::from_static("default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; connect-src 'self'; img-src 'self'; frame-ancestors 'none'"),
    );
    h.insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    h.insert("x-frame-options", HeaderValue::from_static("DENY"));
    Some(r)
}

fn sse(rx: tokio::sync::mpsc::Receiver<Bytes>, outbox: Outbox) -> Response<Body> {
    let mut r = Response::new(http_body_util::Either::Right(EventBody { rx, outbox }));
    r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    r.headers_mut().insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

fn event(name: &str, data: &Value) -> Bytes {
    Bytes::from(format!("event: {name}\ndata: {data}\n\n"))
}

/// What the page lists: the uid's sessions with their facts and jobs.
fn snapshot(kernel: &Kernel, client: &Client) -> Value {
    let (described, _) = kernel.answer(client, "describe", json!({}));
    let described: Value = described.ok().and_then(|r| serde_json::from_str(r.get()).ok()).unwrap_or(Value::Null);
    let mut sessions = Vec::new();
    for facts in described["sessions"].as_array().into_iter().flatten() {
        let name = facts["session"].as_str().unwrap_or_default();
        // Listed as an onlooker: the page must not take the announcements meant for the agent's next call.
        let page = crate::kernel::jobs_list::Page::first();
        let listed = crate::kernel::jobs_list::listing(kernel, client, name.to_owned(), false, page).ok();
        let older = listed.as_ref().map_or(0, |r| r.older);
        let jobs = listed.and_then(|r| serde_json::to_value(r.jobs).ok()).unwrap_or(Value::Null);
        sessions.push(json!({"facts": facts, "jobs": jobs, "older": older}));
    }
    json!({"uid": client.uid, "sessions": sessions, "overrides": overrides(kernel, client)})
}

/// How many of the uid's guard overrides the page lists, newest first.
const OVERRIDES_SHOWN: u32 = 50;

/// The audit of the uid's guard overrides: when, which session and job, the rule, the reason given, the
/// command (redacted as every command shown is) and whether the rule had refused it at all.
fn overrides(kernel: &Kernel, client: &Client) -> Value {
    let rows = match kernel.db.audit_lines(client.uid, "override", OVERRIDES_SHOWN) {
        Ok(rows) => rows,
        Err(e) => return json!({"error": format!("the audit log could not be read: {e}")}),
    };
    let lines: Vec<Value> = rows
        .into_iter()
        .map(|r| {
            let d: Value = serde_json::from_str(&r.detail).unwrap_or(Value::Null);
            let cmd = d["cmd"].as_str().map(crate::rpc::results::redacted);
            json!({"at_ms": r.at_ms, "session": r.session, "job": r.job, "rule": d["rule"],
                   "reason": d["reason"], "cmd": cmd, "matched": d["matched"]})
        })
        .collect();
    json!({"lines": lines})
}

/// `GET /cockpit/job?session=S&job=J`: the job's result as it stands (effects, refusals, warnings,
/// state changes), read without reporting it, so the agent's next call still announces the job.
pub(super) async fn job(door: &Door, client: Client, query: &str) -> Response<Body> {
    let Some((session, job)) = session_and_job(query) else {
        return refuse(StatusCode::BAD_REQUEST, "GET /cockpit/job needs ?session=NAME&job=N: the job to show");
    };
    let kernel = door.kernel.clone();
    match blocking(move || crate::kernel::job_wait::look(&kernel, &client, &session, job)).await {
        Ok(Ok(result)) => match serde_json::to_vec(&result) {
            Ok(body) => super::reply(StatusCode::OK, "application/json", body),
            Err(e) => refuse(StatusCode::INTERNAL_SERVER_ERROR, &format!("the job's result could not be written: {e}")),
        },
        Ok(Err(e)) => refuse(not_found_or_bad(&e), &e.message),
        Err(r) => r,
    }
}

/// How many lines of the model view the page shows.
const MODEL_TAIL: u64 = 200;

/// `GET /cockpit/model?session=S&job=J`: the last lines of the job's model view (what an agent reads:
/// redacted, numbered), read as an onlooker.
pub(super) async fn model(door: &Door, client: Client, query: &str) -> Response<Body> {
    let Some((session, job)) = session_and_job(query) else {
        return refuse(StatusCode::BAD_REQUEST, "GET /cockpit/model needs ?session=NAME&job=N: the job to show");
    };
    let kernel = door.kernel.clone();
    match blocking(move || crate::kernel::output_read::look_tail(&kernel, &client, &session, job, MODEL_TAIL)).await {
        Ok(Ok(view)) => match serde_json::to_vec(&view) {
            Ok(body) => super::reply(StatusCode::OK, "application/json", body),
            Err(e) => refuse(StatusCode::INTERNAL_SERVER_ERROR, &format!("the job's view could not be written: {e}")),
        },
        Ok(Err(e)) => refuse(not_found_or_bad(&e), &e.message),
        Err(r) => r,
    }
}

/// `session` and `job` of a query string.
fn session_and_job(query: &str) -> Option<(String, u64)> {
    let mut session = None;
    let mut job = None;
    for (k, v) in super::form_pairs(query) {
        match k.as_str() {
            "session" => session = Some(v),
            "job" => job = v.parse::<u64>().ok(),
            _ => {}
        }
    }
    Some((session?, job?))
}

/// `GET /cockpit/sessions`.
pub(super) fn sessions(door: &Door, client: Client) -> Response<Body> {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let conn = door.next_conn.fetch_add(1, Ordering::Relaxed);
    let (outbox, reader) = Outbox::queued(conn);
    let kernel = door.kernel.clone();
    let spawned = std::thread::Builder::new().name("cockpit-sessions".into()).spawn(move || {
        let mut last = Value::Null;
        let mut quiet = Instant::now();
        loop {
            let now = snapshot(&kernel, &client);
            let sent = if now == last {
                if quiet.elapsed() < KEEPALIVE {
                    true
                } else {
                    quiet = Instant::now();
                    tx.blocking_send(Bytes::from_static(b": keepalive\n\n")).is_ok()
                }
            } else {
                quiet = Instant::now();
                let ok = tx.blocking_send(event("sessions", &now)).is_ok();
                last = now;
                ok
            };
            // The body was dropped (the browser went away): this thread ends with it.
            if !sent || reader.next_within(SAMPLE) == Some(None) {
                break;
            }
        }
    });
    if spawned.is_err() {
        return refuse(StatusCode::SERVICE_UNAVAILABLE, "cannot start the cockpit's stream now; try again");
    }
    sse(rx, outbox)
}

/// `GET /cockpit/screen?session=S&job=J`.
pub(super) async fn screen(door: &Door, client: Client, query: &str) -> Response<Body> {
    let Some((session, job)) = session_and_job(query) else {
        return refuse(
            StatusCode::BAD_REQUEST,
            "GET /cockpit/screen needs ?session=NAME&job=N: the job whose output to draw",
        );
    };
    let (conn, outbox, reader) = match super::subscribe_raw(door, client, session, job, [0, 0]).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let kernel = door.kernel.clone();
    let spawned =
        std::thread::Builder::new().name("cockpit-screen".into()).spawn(move || draw(&reader, &tx, &kernel, conn));
    if spawned.is_err() {
        door.kernel.drop_subscriptions(conn, None);
        return refuse(StatusCode::SERVICE_UNAVAILABLE, "cannot start the cockpit's stream now; try again");
    }
    sse(rx, outbox)
}

/// Feed the job's chunks to one emulator and send its drawing after each batch.
fn draw(reader: &OutboxReader, tx: &tokio::sync::mpsc::Sender<Bytes>, kernel: &Kernel, conn: u64) {
    // Line feeds get their `\r` added: a pipe's need it, and a PTY's `\r\r\n` draws as its `\r\n`.
    let mut screen: Option<RawScreen> = None;
    while let Some(batch) = super::next_batch(reader, tx) {
        let mut changed = false;
        let mut end = None;
        for line in batch.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            let Ok(v) = serde_json::from_slice::<Value>(line) else { continue };
            let p = &v["params"];
            match v.get("method").and_then(Value::as_str) {
                Some("output") => {
                    let Some(data) = p["data"].as_str() else { continue };
                    let bytes = if p["encoding"] == "base64" {
                        base64::engine::general_purpose::STANDARD.decode(data).unwrap_or_default()
                    } else {
                        data.as_bytes().to_vec()
                    };
                    let s = screen.get_or_insert_with(|| RawScreen::new(ROWS, COLS, false));
                    s.feed(&bytes);
                    changed = true;
                }
                Some("job.settled") => end = Some(p.clone()),
                Some("subscription.overflow") => end = Some(json!({"overflow": true})),
                _ => {}
            }
        }
        if changed || end.is_some() {
            let html = screen.as_mut().map(RawScreen::render).unwrap_or_default();
            if tx.blocking_send(event("screen", &json!({"html": html}))).is_err() {
                break;
            }
        }
        if let Some(e) = end {
            let _ = tx.blocking_send(event("settled", &e));
            break;
        }
    }
    reader.close();
    kernel.drop_subscriptions(conn, None);
}
