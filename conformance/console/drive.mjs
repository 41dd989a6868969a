// The console's browser tests' hands: a headless Chromium (Debian's, never a
// downloaded build) driven through Playwright, one JSON command per line on
// stdin, one JSON answer per line on stdout ({"ok":true,"value":…} or
// {"ok":false,"error":"…"}).
//
// Why this shape: the Rust test (tests/it/console_browser.rs) owns the
// scenario and every assertion, because it also starts the server, seeds it
// through the protocol and checks what the protocol returns between two
// browser steps; this script only does what a person at a browser does and
// reports what the page shows. Playwright (playwright-core, pinned, no
// browser download) rather than a Rust WebDriver or DevTools crate: it waits
// for navigations and elements by itself, reports dialogs and page errors,
// takes screenshots, and can switch the page's CSP off for the XSS sweep
// (`bypassCSP`), which proves escaping on its own; and it costs the test
// build nothing to compile.
//
// Usage: node drive.mjs CHROMIUM_PATH
import { createInterface } from "node:readline";
import { chromium } from "playwright-core";

const executablePath = process.argv[2] || "/usr/bin/chromium";
const browser = await chromium.launch({
  executablePath,
  headless: true,
  // Root in CI and containers: Chromium's sandbox needs user namespaces
  // those may not give; the pages are our own server's.
  args: ["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"],
});

// Every page is its own browser context (its own cookie jar): a page is one
// person's session.
const pages = new Map();

function tab(id) {
  const t = pages.get(id);
  if (!t) throw new Error(`no page ${id}`);
  return t;
}

async function open({ id, width = 1280, height = 900, bypassCSP = false }) {
  const context = await browser.newContext({
    viewport: { width, height },
    bypassCSP,
    // Stable screenshots and dates.
    locale: "en-US",
    timezoneId: "UTC",
  });
  const page = await context.newPage();
  const t = { context, page, dialogs: [], errors: [], console: [], requests: [] };
  // A dialog is what a payload's alert() would open: record and dismiss it.
  page.on("dialog", (d) => {
    t.dialogs.push(`${d.type()}: ${d.message()}`);
    d.dismiss().catch(() => {});
  });
  page.on("pageerror", (e) => t.errors.push(String(e)));
  page.on("console", (m) => t.console.push(`${m.type()}: ${m.text()}`));
  // Every request the page made (its assets, its live reads): the test
  // checks that none leaves the server's origin and that live reads are few.
  page.on("request", (r) => t.requests.push(r.url()));
  pages.set(id, t);
  return null;
}

async function answer(response) {
  return response
    ? { status: response.status(), url: response.url() }
    : { status: null, url: null };
}

const ops = {
  open,
  async close({ id }) {
    await tab(id).context.close();
    pages.delete(id);
    return null;
  },
  async goto({ id, url }) {
    const { page } = tab(id);
    const response = await page.goto(url, { waitUntil: "load" });
    return { ...(await answer(response)), at: page.url() };
  },
  // Fill a form's fields (by name) and press its submit button, waiting for
  // the navigation it starts.
  async submit({ id, form, fields = {} }) {
    const { page } = tab(id);
    const f = page.locator(form).first();
    await f.waitFor({ timeout: 5000 });
    for (const [name, value] of Object.entries(fields)) {
      const field = f.locator(`[name="${name}"]`).first();
      const kind = await field.evaluate((e) => (e.tagName === "INPUT" ? e.type : e.tagName.toLowerCase()));
      if (kind === "select") await field.selectOption(String(value));
      // A hidden field is set as a page's own script would; a person cannot type there.
      else if (kind === "hidden") await field.evaluate((e, v) => { e.value = v; }, String(value));
      else await field.fill(String(value));
    }
    const submitter = f.locator('button[type="submit"], input[type="submit"], button:not([type])').first();
    const [response] = await Promise.all([
      page.waitForNavigation({ waitUntil: "load", timeout: 15000 }),
      submitter.click(),
    ]);
    return { ...(await answer(response)), at: page.url() };
  },
  async text({ id, selector }) {
    const l = tab(id).page.locator(selector);
    return (await l.count()) ? await l.first().innerText() : null;
  },
  async texts({ id, selector }) {
    return await tab(id).page.locator(selector).allInnerTexts();
  },
  async attrs({ id, selector, name }) {
    return await tab(id).page.locator(selector).evaluateAll(
      (es, n) => es.map((e) => e.getAttribute(n)),
      name,
    );
  },
  async count({ id, selector }) {
    return await tab(id).page.locator(selector).count();
  },
  // Wait until `selector` matches (attached); the time it took in ms.
  async wait({ id, selector, timeout = 5000 }) {
    const started = Date.now();
    await tab(id).page.locator(selector).first().waitFor({ state: "attached", timeout });
    return Date.now() - started;
  },
  async eval({ id, expression }) {
    return await tab(id).page.evaluate(expression);
  },
  async html({ id }) {
    return await tab(id).page.content();
  },
  async screenshot({ id, path, fullPage = false }) {
    await tab(id).page.screenshot({ path, fullPage });
    return null;
  },
  async cookies({ id }) {
    return await tab(id).context.cookies();
  },
  // What the page reported: dialogs opened, uncaught errors, console lines,
  // requests made.
  async reports({ id }) {
    const { dialogs, errors, console, requests } = tab(id);
    return { dialogs, errors, console, requests };
  },
  // Click a link or button and wait for the navigation it starts.
  async follow({ id, selector }) {
    const { page } = tab(id);
    const [response] = await Promise.all([
      page.waitForNavigation({ waitUntil: "load", timeout: 15000 }),
      page.locator(selector).first().click(),
    ]);
    return { ...(await answer(response)), at: page.url() };
  },
  // A request with this page's cookies (Playwright's APIRequestContext),
  // e.g. a POST that claims another Origin.
  async request({ id, method = "GET", url, form, headers = {} }) {
    const r = await tab(id).context.request.fetch(url, {
      method,
      form,
      headers,
      maxRedirects: 0,
      failOnStatusCode: false,
    });
    return { status: r.status(), headers: r.headers(), body: await r.text() };
  },
  // A page of another origin (`origin`, answered by the browser itself)
  // whose form posts `fields` to `action`: a cross-site request as a hostile
  // site would send it, cookies and Origin as the browser chooses.
  async crossSitePost({ id, origin, action, fields }) {
    const { page } = tab(id);
    const inputs = Object.entries(fields)
      .map(([k, v]) => `<input name="${escapeHtml(k)}" value="${escapeHtml(v)}">`)
      .join("");
    const html = `<!doctype html><form method="post" action="${escapeHtml(action)}">${inputs}<button>go</button></form>`;
    await page.route(`${origin}/**`, (route) =>
      route.fulfill({ status: 200, contentType: "text/html", body: html }),
    );
    await page.goto(`${origin}/attack`, { waitUntil: "load" });
    const [response] = await Promise.all([
      page.waitForNavigation({ waitUntil: "load", timeout: 15000 }),
      page.locator("button").click(),
    ]);
    await page.unroute(`${origin}/**`);
    return { ...(await answer(response)), at: page.url(), body: await page.content() };
  },
};

function escapeHtml(s) {
  return String(s).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

const lines = createInterface({ input: process.stdin });
for await (const line of lines) {
  if (!line.trim()) continue;
  let reply;
  try {
    const command = JSON.parse(line);
    const op = ops[command.op];
    if (!op) throw new Error(`unknown op ${command.op}`);
    reply = { ok: true, value: (await op(command)) ?? null };
  } catch (e) {
    reply = { ok: false, error: String(e && e.stack ? e.stack : e) };
  }
  process.stdout.write(JSON.stringify(reply) + "\n");
}
await browser.close();
