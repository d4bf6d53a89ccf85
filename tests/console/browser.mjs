// What the console's browser tests share: run.sh's environment, headless Chromium, a fresh
// context whose pages record every Content-Security-Policy violation, a form submitted and
// its navigation awaited, a table cell's text, a page checked for sideways scrolling at a
// narrow width, and the tools an agent is shown.

import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = dirname(fileURLToPath(import.meta.url));

/** Wider than its box by more than this many pixels, a table scrolls sideways. */
export const SCROLL_TOLERANCE_PX = 4;

/** The variable `name` of run.sh's environment. */
export function required(name) {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set: run tests/console/run.sh`);
  return value;
}

/** Headless Chromium (TG_CONSOLE_CHROMIUM, else /usr/bin/chromium) through playwright-core
 * from run.sh's npm packages (installed outside the repository, under TG_TOOLS). */
export function launchChromium() {
  const requireFrom = createRequire(join(process.env.TG_CONSOLE_NPM ?? HERE, 'package.json'));
  const { chromium } = requireFrom('playwright-core');
  return chromium.launch({
    executablePath: process.env.TG_CONSOLE_CHROMIUM ?? '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
      '--no-first-run', '--disable-component-update', '--disable-sync'],
  });
}

/**
 * A fresh context of `browser` whose pages record every Content-Security-Policy
 * violation, as the browser reports it to the page and to its console:
 * `{ context, violations }`.
 */
export async function watchedContext(browser, options = {}) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 }, ...options });
  context.setDefaultTimeout(10_000);
  const violations = [];
  await context.exposeBinding('reportViolation', (_source, text) => violations.push(text));
  // Injected by the browser itself, not by the page: the policy does not apply to it.
  await context.addInitScript(() => {
    document.addEventListener('securitypolicyviolation', (e) =>
      window.reportViolation(`${e.violatedDirective}: ${e.blockedURI}`));
  });
  context.on('console', (message) => {
    if (/Content Security Policy/i.test(message.text())) violations.push(message.text());
  });
  return { context, violations };
}

/** Clicks `selector` and waits for the navigation it causes; its response. */
export async function submit(page, selector) {
  const [response] = await Promise.all([page.waitForNavigation(), page.click(selector)]);
  return response;
}

/** The trimmed text of the cell of class `name` in `row`. */
export async function cell(row, name) {
  return (await row.locator(`td.${name}`).textContent()).trim();
}

/** The scroll boxes of the page whose table is wider than they are (id: widths). */
export function overflowingBoxes(page) {
  return page.$$eval('.scroll', (boxes, tolerance) =>
    boxes.filter((box) => box.scrollWidth > box.clientWidth + tolerance)
      .map((box) => `${box.firstElementChild?.id}: ${box.scrollWidth} > ${box.clientWidth}`),
  SCROLL_TOLERANCE_PX);
}

/**
 * Asserts that `page` (loaded, `width` px wide) does not scroll sideways, nor does any of
 * its tables inside its own scroll box; `what` names the page in the messages.
 */
export async function assertFitsWidth(page, width, what) {
  const wide = await page.evaluate(() => document.scrollingElement.scrollWidth);
  assert.ok(wide <= width + SCROLL_TOLERANCE_PX, `${what} is ${wide} px wide at ${width} px`);
  assert.deepEqual(await overflowingBoxes(page), [], `${what}: tables wider than the screen`);
}

/**
 * The tools a stateless (2026-07-28) `tools/list` on `base`'s `/mcp` with `token` shows,
 * as the server lists them.
 */
export async function listTools(base, token, client = 'tollgate-console-tests') {
  return (await statelessList(base, token, 'tools/list', client)).tools;
}

/** The prompts a stateless (2026-07-28) `prompts/list` by `token` shows. */
export async function listPrompts(base, token, client = 'tollgate-console-tests') {
  return (await statelessList(base, token, 'prompts/list', client)).prompts;
}

/** The result of a stateless (2026-07-28) `method` (a list) by `token`. */
async function statelessList(base, token, method, client) {
  return (await statelessRequest(base, token, method, {}, client)).result;
}

/**
 * A stateless (2026-07-28) request `method` with `params` by `token` on `base`'s `/mcp`,
 * as client `client`: its JSON-RPC answer (an HTTP status other than 200 throws).
 */
export async function statelessRequest(base, token, method, params, client) {
  const meta = {
    'io.modelcontextprotocol/protocolVersion': '2026-07-28',
    'io.modelcontextprotocol/clientCapabilities': {},
    'io.modelcontextprotocol/clientInfo': { name: client, version: '0' },
  };
  const headers = {
    'Content-Type': 'application/json',
    Accept: 'application/json, text/event-stream',
    'MCP-Protocol-Version': '2026-07-28',
    'Mcp-Method': method,
    Authorization: `Bearer ${token}`,
  };
  if (params.name) headers['Mcp-Name'] = params.name;
  const response = await fetch(`${base}/mcp`, {
    method: 'POST',
    headers,
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method, params: { ...params, _meta: meta } }),
    signal: AbortSignal.timeout(10_000),
  });
  if (response.status !== 200) throw new Error(`${method} answered ${response.status}`);
  return response.json();
}
