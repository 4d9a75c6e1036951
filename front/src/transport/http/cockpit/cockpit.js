// The cockpit page: everything from the server is put into the page as text (textContent), except the
// raw view, which the server drew as escaped HTML spans (terminal::html). No library, no build step.
"use strict";

const $ = (id) => document.getElementById(id);
let selected = null; // {session, job}
let screen = null; // the EventSource of the selected job's drawing
let lastSnapshot = null;

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "onclick") e.addEventListener("click", v);
    else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c ?? "")));
  return e;
}

function seconds(ms) {
  if (ms == null) return "?";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 120000) return `${(ms / 1000).toFixed(1)} s`;
  return `${Math.round(ms / 60000)} min`;
}

function bytes(n) {
  if (n == null) return "not accounted per job here";
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(0)} KiB`;
  return `${(n / 1024 / 1024).toFixed(1)} MiB`;
}

function phase(j) {
  if (j.state === "running") return "running";
  let p = j.state;
  if (j.exit_code != null) p += ` with code ${j.exit_code}`;
  if (j.signal != null) p += ` by signal ${j.signal}`;
  if (j.oom_killed) p += " (out of memory)";
  return p;
}

function liveness(j) {
  const l = j.liveness;
  if (j.state !== "running") return `ran ${seconds(j.duration_ms)}`;
  if (!l) return `running for ${seconds(j.duration_ms)}`;
  let w = `running for ${seconds(l.running_ms)}`;
  w += l.last_output_ms_ago == null ? ", no output yet" : `, last output ${seconds(l.last_output_ms_ago)} ago`;
  if (l.procs != null) w += `, ${l.procs} process${l.procs === 1 ? "" : "es"}`;
  if (l.busy_cmdline) w += `, busy in ${l.busy_cmdline}`;
  return w;
}

function cpu(j) {
  const ms = j.usage?.cpu_ms ?? j.liveness?.cpu_ms;
  return ms == null ? "?" : seconds(ms);
}

async function rpc(method, params) {
  const r = await fetch("/rpc", {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method, params }),
  });
  if (!r.ok) throw new Error(await r.text());
  const a = await r.json();
  if (a.error) throw new Error(a.error.message);
  return a.result;
}

function receipt(what, result) {
  const id = result?.receipt?.id ?? result?.receipt ?? "none";
  $("receipt").textContent = `${what}: done, receipt ${typeof id === "object" ? JSON.stringify(id) : id}`;
}

async function killJob(session, job, cmd) {
  if (!window.confirm(`Kill job ${job} (${cmd}) of session ${session}?`)) return;
  try {
    receipt(`kill job ${job} of ${session}`, await rpc("kill", { session, job }));
  } catch (e) {
    $("receipt").textContent = `kill job ${job} of ${session} failed: ${e.message}`;
  }
}

async function closeSession(session) {
  if (!window.confirm(`Close session ${session}? Its running jobs are killed.`)) return;
  try {
    receipt(`close session ${session}`, await rpc("session.close", { session }));
  } catch (e) {
    $("receipt").textContent = `close session ${session} failed: ${e.message}`;
  }
}

function renderOverrides(audit) {
  const box = $("overrides");
  box.replaceChildren(el("h2", {}, "Guard overrides (audit)"));
  if (audit?.error) return box.append(el("p", { class: "facts warn" }, audit.error));
  const lines = audit?.lines || [];
  if (!lines.length) return box.append(el("p", { class: "quiet" }, "None."));
  const t = el("table", {}, el("tr", {}, ...["when", "session", "job", "rule", "reason", "command", ""].map((h) => el("th", {}, h))));
  for (const o of lines) {
    t.append(el("tr", { class: "override" },
      el("td", {}, new Date(o.at_ms).toLocaleString()),
      el("td", {}, o.session ?? ""),
      el("td", {}, o.job != null ? `#${o.job}` : ""),
      el("td", { class: "rule" }, o.rule ?? ""),
      el("td", { class: "reason" }, o.reason ?? ""),
      el("td", { class: "cmd" }, o.cmd ?? ""),
      el("td", {}, o.matched ? "overridden" : "the rule had not refused it"),
    ));
  }
  box.append(t);
}

// What the selected job's call changed and what was refused: its result read without reporting it.
async function refreshFacts(session, job) {
  const box = $("job-facts");
  let r;
  try {
    const a = await fetch(`/cockpit/job?session=${encodeURIComponent(session)}&job=${job}`);
    if (!a.ok) throw new Error(await a.text());
    r = await a.json();
  } catch (e) {
    box.replaceChildren(el("p", { class: "facts warn" }, `the job's result could not be read: ${e.message}`));
    return;
  }
  if (!selected || selected.session !== session || selected.job !== job) return;
  const parts = [];
  const fx = r.effects?.project;
  if (fx) {
    const changed = (fx.changed || []).map((c) => `${c.path} (${c.change}${c.from ? ` from ${c.from}` : ""})`);
    let line = changed.length ? `effects: ${changed.join(", ")}` : "effects: nothing changed";
    if (fx.changed_more) line += ` and ${fx.changed_more} more`;
    if (fx.confidence !== "complete") line = `effects (${fx.confidence}): ${changed.join(", ") || "unknown"}${fx.reason ? ` — ${fx.reason}` : ""}`;
    parts.push(el("p", { class: "facts effects" }, line));
    if (fx.diff) parts.push(el("pre", { class: "diff" }, fx.diff));
  } else if (r.state !== "running") {
    parts.push(el("p", { class: "facts effects quiet" }, "effects: not recorded for this call"));
  }
  for (const x of r.refusals || []) parts.push(el("p", { class: "facts warn refusal" }, `refused: ${x}`));
  for (const w of r.warnings || []) parts.push(el("p", { class: "facts warn" }, `warning: ${w}`));
  if (r.state_changes?.length) parts.push(el("p", { class: "facts" }, `shell state changed: ${r.state_changes.join(", ")}`));
  if (r.note) parts.push(el("p", { class: "facts" }, r.note));
  box.replaceChildren(...parts);
}

function renderSessions(snap) {
  lastSnapshot = snap;
  renderOverrides(snap.overrides);
  $("who").textContent = `uid ${snap.uid}`;
  const box = $("sessions");
  box.replaceChildren();
  if (!snap.sessions.length) box.append(el("p", { class: "quiet" }, "No sessions."));
  for (const s of snap.sessions) {
    const f = s.facts;
    const name = f.session;
    const sec = el("div", { class: "session", "data-session": name });
    sec.append(
      el("h2", {}, `session ${name} `, el("span", { class: "quiet" }, `${f.state} · ${f.jobs_running} running of ${f.jobs_total} · cwd ${f.cwd}`), " ",
        el("button", { class: "close", onclick: () => closeSession(name) }, "Close session…")),
      el("p", { class: "facts" }, `shell state: ${JSON.stringify(f.shell_state)}`),
      el("p", { class: "facts" }, `guard overrides: ${f.guard_overrides ?? 0}`),
    );
    for (const w of f.warnings || []) sec.append(el("p", { class: "facts warn" }, `warning: ${typeof w === "string" ? w : JSON.stringify(w)}`));
    if (f.note) sec.append(el("p", { class: "facts warn" }, f.note));
    const t = el("table", {}, el("tr", {}, ...["job", "command", "phase", "liveness", "CPU", "memory peak", "survivors", "kept", ""].map((h) => el("th", {}, h))));
    for (const j of s.jobs || []) {
      const isSel = selected && selected.session === name && selected.job === j.job;
      const row = el("tr", { class: isSel ? "selected" : "", "data-job": j.job },
        el("td", {}, el("a", { href: `#session=${encodeURIComponent(name)}&job=${j.job}` }, `#${j.job}`)),
        el("td", { class: "cmd" }, j.cmd),
        el("td", { class: `phase phase-${j.state}` }, phase(j)),
        el("td", {}, liveness(j)),
        el("td", {}, cpu(j)),
        el("td", {}, bytes(j.usage?.memory_peak)),
        el("td", {}, j.survivors?.length ? j.survivors.map((v) => `${v.pid ?? ""} ${v.cmdline ?? v.comm ?? ""}`).join(", ") + (j.survivors_more ? ` +${j.survivors_more}` : "") : "none"),
        el("td", {}, j.kept ?? ""),
        el("td", {}, j.state === "running" ? el("button", { class: "kill", onclick: () => killJob(name, j.job, j.cmd) }, "Kill…") : ""),
      );
      t.append(row);
      if (isSel) {
        const was = $("job-phase").dataset.state;
        $("job-phase").textContent = `${phase(j)} · ${liveness(j)}`;
        $("job-phase").dataset.state = j.state;
        if (was !== j.state) refreshFacts(name, j.job);
      }
    }
    sec.append(t);
    // The page lists a session's running jobs and its newest ended ones; it says how many it leaves out.
    if (s.older) sec.append(el("p", { class: "quiet" }, `… ${s.older} older ended job${s.older === 1 ? "" : "s"} not listed`));
    box.append(sec);
  }
}

async function refreshModel(session, job) {
  try {
    // The redacted, numbered lines an agent reads (`output {tail}`), as text, read as an onlooker.
    const a = await fetch(`/cockpit/model?session=${encodeURIComponent(session)}&job=${job}`);
    if (!a.ok) throw new Error(await a.text());
    $("model").textContent = (await a.json()).text;
  } catch (e) {
    $("model").textContent = `the model view could not be read: ${e.message}`;
  }
}

function select(session, job) {
  if (screen) screen.close();
  selected = { session, job };
  $("job").hidden = false;
  $("job-title").textContent = `job ${job} of session ${session}`;
  $("raw").replaceChildren();
  $("model").textContent = "";
  $("job-facts").replaceChildren();
  delete $("job-phase").dataset.state;
  if (lastSnapshot) renderSessions(lastSnapshot);
  screen = new EventSource(`/cockpit/screen?session=${encodeURIComponent(session)}&job=${job}`);
  screen.addEventListener("screen", (e) => {
    // The server drew this: text escaped, spans for colours only.
    $("raw").innerHTML = JSON.parse(e.data).html;
    $("raw").scrollTop = $("raw").scrollHeight;
    refreshModel(session, job);
  });
  screen.addEventListener("settled", () => {
    screen.close();
    $("raw").dataset.settled = "true";
    refreshModel(session, job);
    refreshFacts(session, job);
  });
}

function fromHash() {
  const q = new URLSearchParams(location.hash.slice(1));
  const job = Number(q.get("job"));
  if (q.get("session") && job) select(q.get("session"), job);
}

const sessions = new EventSource("/cockpit/sessions");
sessions.addEventListener("open", () => { $("link").textContent = "live"; });
sessions.addEventListener("error", () => { $("link").textContent = "reconnecting…"; });
sessions.addEventListener("sessions", (e) => renderSessions(JSON.parse(e.data)));
window.addEventListener("hashchange", fromHash);
fromHash();
