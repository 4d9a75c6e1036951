// Drives Debian's chromium (headless, through playwright-core) over the cockpit page for
// tests/tests/cockpit.rs, and prints what a person would have seen as one JSON line.
// argv: URL SESSION WATCHED_JOB KILL_JOB SCREENSHOT
"use strict";
const { chromium } = require("playwright-core");

const [url, session, watched, victim, shot] = process.argv.slice(2);

(async () => {
  const browser = await chromium.launch({
    executablePath: "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
      "--disable-component-update", "--disable-sync"],
  });
  const seen = { dialogs: [] };
  try {
    const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
    page.on("dialog", async (d) => { seen.dialogs.push(d.message()); await d.accept(); });
    await page.goto(`${url}/#session=${encodeURIComponent(session)}&job=${watched}`);
    const row = (job) => `.session[data-session="${session}"] tr[data-job="${job}"]`;
    // The job's colored output, drawn live while the job still runs.
    await page.waitForFunction(() => document.getElementById("raw").textContent.includes("red alert"), null, { timeout: 20000 });
    seen.phase_while_streaming = await page.textContent(`${row(watched)} td.phase`);
    seen.raw_text = await page.textContent("#raw");
    seen.red_color = await page.evaluate(() => {
      const span = [...document.querySelectorAll("#raw span")].find((s) => s.textContent.includes("red alert"));
      return span ? getComputedStyle(span).color : null;
    });
    seen.script_elements = await page.evaluate(() => document.querySelectorAll("script").length);
    seen.pwned = await page.evaluate(() => window.pwned === 1);
    // The phase changes when the job ends, without a reload.
    await page.waitForFunction((sel) => document.querySelector(sel)?.textContent.startsWith("exited"), `${row(watched)} td.phase`, { timeout: 30000 });
    seen.phase_after_end = await page.textContent(`${row(watched)} td.phase`);
    seen.raw_text_after_end = await page.textContent("#raw");
    await page.waitForFunction(() => document.getElementById("model").textContent.includes("red alert"), null, { timeout: 10000 });
    seen.model_text = await page.textContent("#model");
    await page.screenshot({ path: shot, fullPage: true });
    // Kill a job from the page, confirming the dialog.
    await page.click(`${row(victim)} button.kill`);
    await page.waitForFunction(() => /receipt/.test(document.getElementById("receipt").textContent), null, { timeout: 20000 });
    seen.receipt_text = await page.textContent("#receipt");
    await page.waitForFunction((sel) => document.querySelector(sel)?.textContent.startsWith("killed"), `${row(victim)} td.phase`, { timeout: 20000 });
    seen.victim_phase = await page.textContent(`${row(victim)} td.phase`);
  } catch (e) {
    seen.error = String(e);
  } finally {
    await browser.close();
  }
  console.log(JSON.stringify(seen));
})();
