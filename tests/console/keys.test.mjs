// The console's create-key form in headless Chromium: the scope picker (the known scopes as
// checkboxes, grouped, each named by its label) and the expiry choice, with JavaScript on
// and off, and the server's refusal of a scope no tool needs.
//
//   - an operator ticks two scopes by their labels and picks "in 7 days": the key is
//     created, its row says when it expires, and over /mcp it sees exactly the tools of
//     those scopes;
//   - a form whose box was changed to a mistyped scope (as a stale or hand-made form would
//     send) comes back 422 with the closest known scope, what was chosen still chosen;
//   - nothing ticked is refused; with JavaScript off the picker and the expiry still work.
//
// Run through tests/console/run.sh (see console.test.mjs for what it sets up); this file
// makes its own keys and does not depend on the other's.

import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { launchChromium, listTools, required } from './browser.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const REPO = resolve(HERE, '..', '..');
const BASE = required('TG_CONSOLE_URL');
const ADMIN_KEY = required('TG_CONSOLE_ADMIN_KEY');
const SHOTS = join(REPO, 'target', 'console-screenshots');

/** A day, in milliseconds. */
const DAY_MS = 86_400_000;
/** How far the shown expiry may be from "now plus the lifetime" (the test's own time). */
const EXPIRY_SLACK_MS = 5 * 60_000;

let browser;
before(async () => {
  mkdirSync(SHOTS, { recursive: true });
  browser = await launchChromium();
});
after(async () => {
  await browser?.close();
});

async function newContext(options = {}) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 }, ...options });
  context.setDefaultTimeout(10_000);
  return context;
}

/** Clicks `selector` and resolves with the response of the page it leads to. */
async function submit(page, selector) {
  const [response] = await Promise.all([page.waitForNavigation(), page.click(selector)]);
  return response;
}

/** Signs in with the admin key and opens the credentials page. */
async function credentialsPage(context) {
  const page = await context.newPage();
  await page.goto(`${BASE}/console/sign-in`);
  await page.fill('#sign-in #key', ADMIN_KEY);
  await submit(page, '#sign-in [type=submit]');
  await page.goto(`${BASE}/console/credentials`);
  return page;
}

/** The picker's checkbox of `scope`, found as a person finds it: by its label. */
function scopeBox(page, scope) {
  return page.locator('#create-key').getByRole('checkbox', { name: scope, exact: true });
}

/** The names of the tools a stateless (2026-07-28) `tools/list` with `token` shows. */
async function listedTools(token) {
  return (await listTools(BASE, token, 'tollgate-console-keys-tests')).map((tool) => tool.name).sort();
}

test('the picker groups the known scopes, each checkbox named by its label', async () => {
  const context = await newContext();
  try {
    const page = await credentialsPage(context);
    const legends = await page.$$eval('#key-scopes .scope-group > legend', (all) => all.map((l) => l.textContent.trim()));
    assert.deepEqual(legends, [
      'Special',
      'Built-in tools: clients',
      'Built-in tools: invoices',
      'Built-in tools: payments',
      'Built-in tools: reports',
      // The OpenAPI backend run.sh configures for the browser tests.
      'Backend shop',
    ]);
    for (const scope of ['*', 'admin', 'clients:read', 'invoices:void', 'payments:write', 'reports:generate', 'shop:read']) {
      assert.equal(await scopeBox(page, scope).count(), 1, `one box for ${scope}`);
      assert.equal(await scopeBox(page, scope).isChecked(), false, `${scope} starts unticked`);
    }
    // Each box is described by what it grants.
    const note = await scopeBox(page, 'invoices:void').getAttribute('aria-describedby');
    assert.equal((await page.textContent(`#${note}`)).trim(), 'void_invoice');
    const expiries = await page.$$eval('#key-expires option', (all) => all.map((o) => [o.value, o.textContent.trim()]));
    assert.deepEqual(expiries, [
      ['never', 'never'], ['1d', 'in 1 day'], ['7d', 'in 7 days'], ['30d', 'in 30 days'], ['90d', 'in 90 days'],
    ]);
    assert.equal(await page.inputValue('#key-expires'), 'never');
    assert.ok((await page.inputValue('#create-key [name=csrf]')).length > 0, 'the form carries a csrf token');
    await page.screenshot({ path: join(SHOTS, 'create-key-picker.png'), fullPage: true });
  } finally {
    await context.close();
  }
});

test('ticked scopes and an expiry make a key that sees exactly those tools and says when it expires', async () => {
  const context = await newContext();
  try {
    const page = await credentialsPage(context);
    await page.fill('#create-key [name=name]', 'browser picker reader');
    await scopeBox(page, 'clients:read').check();
    await scopeBox(page, 'invoices:read').check();
    await page.selectOption('#key-expires', { label: 'in 7 days' });
    const asked = Date.now();
    const response = await submit(page, '#create-key [type=submit]');
    assert.equal(response.status(), 200);
    const secret = (await page.textContent('#secret')).trim();
    const id = (await page.textContent('#public-id')).trim();
    assert.ok(secret.startsWith(`tg_live_${id}_`));

    await page.goto(`${BASE}/console/credentials`);
    const row = `#key-${id}`;
    assert.equal((await page.textContent(`${row} .status`)).trim(), 'active');
    const expires = Date.parse((await page.textContent(`${row} .expires`)).trim());
    assert.ok(Math.abs(expires - (asked + 7 * DAY_MS)) < EXPIRY_SLACK_MS, `expires ${new Date(expires).toISOString()}`);

    assert.deepEqual(await listedTools(secret), [
      'get_client', 'get_invoice', 'list_payments', 'search_clients', 'search_invoices',
    ]);
  } finally {
    await context.close();
  }
});

test('a mistyped scope comes back 422 with the closest known one, the form as it was', async () => {
  const context = await newContext();
  try {
    const page = await credentialsPage(context);
    await page.fill('#create-key [name=name]', 'browser picker typo');
    await scopeBox(page, 'clients:read').check();
    // What a stale or hand-made form sends: a box whose value no tool needs.
    await page.$eval('#create-key input[value="invoices:read"]', (box) => { box.value = 'invoices:raed'; });
    await scopeBox(page, 'invoices:read').check();
    await page.selectOption('#key-expires', '30d');
    const response = await submit(page, '#create-key [type=submit]');
    assert.equal(response.status(), 422);
    assert.equal((await page.textContent('#form-error[role=alert]')).trim(),
      'Unknown scope: invoices:raed. Did you mean invoices:read?');
    assert.equal(await page.inputValue('#create-key [name=name]'), 'browser picker typo');
    assert.equal(await scopeBox(page, 'clients:read').isChecked(), true);
    assert.equal(await scopeBox(page, 'invoices:read').isChecked(), false);
    assert.equal(await page.inputValue('#key-expires'), '30d');
    assert.equal(await page.locator('#keys tr', { hasText: 'browser picker typo' }).count(), 0, 'no key was made');
    await page.screenshot({ path: join(SHOTS, 'create-key-refused.png'), fullPage: true });

    // Nothing ticked: refused the same way.
    await page.goto(`${BASE}/console/credentials`);
    await page.fill('#create-key [name=name]', 'browser picker nothing');
    const none = await submit(page, '#create-key [type=submit]');
    assert.equal(none.status(), 422);
    assert.equal((await page.textContent('#form-error')).trim(), 'Choose at least one scope.');
  } finally {
    await context.close();
  }
});

test('with JavaScript off the picker and the expiry still make a key', async () => {
  const context = await newContext({ javaScriptEnabled: false });
  try {
    const page = await credentialsPage(context);
    await page.fill('#create-key [name=name]', 'browser picker no script');
    await scopeBox(page, 'reports:generate').check();
    await page.selectOption('#key-expires', '1d');
    const asked = Date.now();
    const response = await submit(page, '#create-key [type=submit]');
    assert.equal(response.status(), 200);
    const id = (await page.textContent('#public-id')).trim();
    await page.goto(`${BASE}/console/credentials`);
    const expires = Date.parse((await page.textContent(`#key-${id} .expires`)).trim());
    assert.ok(Math.abs(expires - (asked + DAY_MS)) < EXPIRY_SLACK_MS, `expires ${new Date(expires).toISOString()}`);
    assert.equal((await page.textContent(`#key-${id} td[data-label=Scopes]`)).trim(), 'reports:generate');
  } finally {
    await context.close();
  }
});
