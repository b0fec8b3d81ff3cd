// Logs in to JupyterHub (DummyAuthenticator) with headless Chromium,
// opens the spawn-pending page of a server that is starting, waits until
// its event log shows an expected message and takes a screenshot.
// jupyterhub_test.go runs it with NODE_PATH pointing at an npm prefix that
// holds playwright-core; the browser is Debian's /usr/bin/chromium.
//
// Environment: HUB (http://127.0.0.1:port), HUB_USER, PENDING_PATH
// (/hub/spawn-pending/<user>[/<server>]), EXPECT (text the event log must
// contain), PNG (output), CHROMIUM, PROFILE_DIR (a new user data dir).
// Prints {"log": [...], "message": "..."} on stdout.
"use strict";
const { chromium } = require("playwright-core");

async function main() {
  const env = process.env;
  const context = await chromium.launchPersistentContext(env.PROFILE_DIR, {
    executablePath: env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
    viewport: { width: 1000, height: 460 },
    args: [
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
  try {
    // Loopback only: anything else the page asks for is refused.
    await context.route("**/*", (route) => {
      const host = new URL(route.request().url()).hostname;
      return host === "127.0.0.1" ? route.continue() : route.abort();
    });
    const page = context.pages()[0] || (await context.newPage());
    page.setDefaultTimeout(30000);
    await page.goto(env.HUB + "/hub/login");
    await page.fill("#username_input", env.HUB_USER);
    await page.fill("#password_input", "any");
    await Promise.all([page.waitForNavigation(), page.click("#login_submit")]);
    await page.goto(env.HUB + env.PENDING_PATH);
    try {
      await page.waitForFunction(
        (expect) => (document.querySelector("#progress-log") || {}).textContent?.includes(expect),
        env.EXPECT,
      );
    } catch (err) {
      throw new Error(`${err.message}\nat ${page.url()}:\n${await page.innerText("body")}`);
    }
    await page.evaluate(() => {
      document.querySelector("#progress-details").open = true;
    });
    // Fast-forwards the progress bar's CSS transition.
    await page.screenshot({ path: env.PNG, animations: "disabled" });
    const log = await page.$$eval("#progress-log .progress-log-event", (els) => els.map((e) => e.textContent));
    const message = await page.textContent("#progress-message");
    process.stdout.write(JSON.stringify({ log, message }) + "\n");
  } finally {
    await context.close();
  }
}

main().catch((err) => {
  process.stderr.write(String(err && err.stack ? err.stack : err) + "\n");
  process.exit(1);
});
