// Drives Debian's chromium (headless, through playwright-core) over the cockpit page for
// tests/tests/cockpit.rs: what a selected call changed and what was refused, and the override audit.
// Prints what a person would have seen as one JSON line.
// argv: URL SESSION CHANGING_JOB REFUSED_JOB
"use strict";
const { chromium } = require("playwright-core");

const [url, session, changing, refused] = process.argv.slice(2);

(async () => {
  const browser = await chromium.launch({
    executablePath: "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
      "--disable-component-update", "--disable-sync"],
  });
  const seen = {};
  let page;
  try {
    page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
    const facts = () => document.getElementById("job-facts").textContent;
    // The changing job ends while the page watches it; its effects appear without a reload.
    await page.goto(`${url}/#session=${encodeURIComponent(session)}&job=${changing}`);
    await page.waitForFunction(() => document.getElementById("job-facts").textContent.includes("effects:"), null, { timeout: 30000 });
    seen.changing_facts = await page.evaluate(facts);
    // And the session's listing shows it ended: the page has listed the ended job, which must not have
    // reported it (the agent's next call still announces it).
    const row = `.session[data-session="${session}"] tr[data-job="${changing}"] td.phase`;
    await page.waitForFunction((sel) => document.querySelector(sel)?.textContent.startsWith("exited"), row, { timeout: 20000 });
    // The refused write: the sentence saying which rule refused it.
    await page.evaluate((h) => { location.hash = h; }, `session=${encodeURIComponent(session)}&job=${refused}`);
    await page.waitForFunction(() => document.getElementById("job-facts").textContent.includes("refused:"), null, { timeout: 20000 });
    seen.refused_facts = await page.evaluate(facts);
    // The audit of overrides, as rows.
    await page.waitForFunction(() => document.querySelectorAll("#overrides tr.override").length > 0, null, { timeout: 20000 });
    seen.overrides = await page.evaluate(() => [...document.querySelectorAll("#overrides tr.override")].map((r) =>
      [...r.querySelectorAll("td")].map((d) => d.textContent)));
  } catch (e) {
    seen.error = String(e);
    // What the page showed instead, for the failure message.
    if (page) seen.job_facts_at_error = await page.evaluate(() => document.getElementById("job-facts")?.textContent).catch(String);
    if (page) seen.phase_at_error = await page.evaluate(() => document.getElementById("job-phase")?.textContent).catch(String);
  } finally {
    await browser.close();
  }
  console.log(JSON.stringify(seen));
})();
