// The console's users page in headless Chromium: the users of the company's identity
// provider run.sh wrote into the database (Ana García, with one admitted and one refused
// call in the audit log, and a user whose name is markup), as an operator sees and blocks
// them.
//
//   - the page lists who called, with the calls and refusals of the last day and the
//     plan's limits, and shows a name that is markup as text: nothing of it runs or loads;
//   - an operator blocks Ana through her row's link and the confirmation form, sees her
//     blocked, finds the change in the audit log, and unblocks her the same way;
//   - no page breaks the Content-Security-Policy, and at 320 px the page does not scroll
//     sideways.
//
// Run through tests/console/run.sh (see console.test.mjs for what it sets up).

import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';

import {
  assertFitsWidth, cell, launchChromium, overflowingBoxes, required, submit, watchedContext,
} from './browser.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const REPO = resolve(HERE, '..', '..');
const BASE = required('TG_CONSOLE_URL');
const ADMIN_KEY = required('TG_CONSOLE_ADMIN_KEY');
const SHOTS = join(REPO, 'target', 'console-screenshots');

/** The users run.sh wrote. */
const ANA = 'Ana García';
const MARKUP = '<img src=x onerror="document.title=1">';

let browser;
before(async () => {
  mkdirSync(SHOTS, { recursive: true });
  browser = await launchChromium();
});
after(async () => {
  await browser?.close();
});



async function usersPage(context) {
  const page = await context.newPage();
  await page.goto(`${BASE}/console/sign-in`);
  await page.fill('#sign-in #key', ADMIN_KEY);
  await submit(page, '#sign-in [type=submit]');
  await submit(page, '#nav a[href="/console/users"]');
  assert.equal(new URL(page.url()).pathname, '/console/users');
  return page;
}

/** The row of the user named `name`, found as a person finds it: by the name it shows. */
function rowOf(page, name) {
  return page.locator('#users tbody tr').filter({ has: page.locator('th.name', { hasText: name }) });
}



test('users: the page lists who called with their calls and refusals, and a name from a token stays text', async () => {
  const { context, violations } = await watchedContext(browser);
  try {
    const page = await usersPage(context);
    const title = await page.title();
    assert.equal(await page.getAttribute('#nav a[aria-current=page]', 'href'), '/console/users');
    const ana = rowOf(page, ANA);
    assert.equal(await ana.count(), 1);
    assert.equal((await ana.locator('td.subject code').first().textContent()).trim(), 'ana@acme.example');
    assert.equal(await cell(ana, 'calls'), '2');
    assert.equal(await cell(ana, 'refusals'), '1');
    assert.equal(await cell(ana, 'status'), 'active');
    assert.equal(await cell(ana, 'own-limits'), 'plan default');
    assert.equal((await ana.locator('.issuer').textContent()).trim(), 'https://login.acme.example · OAuth client portal');

    // The markup is shown as the user's name, and nothing of it became an element.
    const mallory = rowOf(page, MARKUP);
    assert.equal(await mallory.count(), 1);
    assert.equal(await page.locator('#users img').count(), 0);
    assert.equal(await page.title(), title);
    assert.equal(await cell(mallory, 'calls'), '0');

    // Her calls open her rows of the audit log, each naming her.
    await submit(page, `#users tbody tr:has(th.name:has-text("${ANA}")) td.calls a`);
    const credentials = await page.$$eval('#audit .audit-row td.credential', (tds) =>
      tds.map((td) => ({ text: td.textContent.trim(), title: td.getAttribute('title') })));
    assert.equal(credentials.length, 2, JSON.stringify(credentials));
    // By her name, her id on hover.
    for (const c of credentials) {
      assert.equal(c.text, ANA, JSON.stringify(c));
      assert.match(c.title, /^u[0-9a-f]{24}$/);
    }
    await page.goto(`${BASE}/console/users`);
    await page.screenshot({ path: join(SHOTS, 'users.png'), fullPage: true });
    // Every column, the actions too, is in view at 1280 px.
    assert.deepEqual(await overflowingBoxes(page), []);
    assert.deepEqual(violations, []);
  } finally {
    await context.close();
  }
});

test('users: blocking through the confirmation shows the user blocked and is audited; unblocking undoes it', async () => {
  const { context, violations } = await watchedContext(browser);
  try {
    const page = await usersPage(context);
    await submit(page, `#users tbody tr:has(th.name:has-text("${ANA}")) a.block`);
    assert.match(new URL(page.url()).pathname, /^\/console\/users\/u[0-9a-f]{24}\/block$/);
    assert.match(await page.textContent('#confirm p'), new RegExp(`^Block ${ANA} \\(u[0-9a-f]{24}\\)\\?`));
    await page.screenshot({ path: join(SHOTS, 'users-block.png'), fullPage: true });
    const blocked = await submit(page, '#confirm-button');
    assert.equal(blocked.status(), 200);
    assert.equal(new URL(page.url()).pathname, '/console/users');
    const ana = rowOf(page, ANA);
    assert.match(await cell(ana, 'status'), /^blocked since \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
    assert.equal(await ana.locator('a.block').count(), 0);

    await page.goto(`${BASE}/console/audit?tool=console:block_user`);
    assert.equal(await page.locator('#audit .audit-row').count(), 1);

    await page.goto(`${BASE}/console/users`);
    await submit(page, `#users tbody tr:has(th.name:has-text("${ANA}")) a.unblock`);
    await submit(page, '#confirm-button');
    assert.equal(await cell(rowOf(page, ANA), 'status'), 'active');
    assert.deepEqual(violations, []);
  } finally {
    await context.close();
  }
});

test('users: at 320 px the page does not scroll sideways, nor does its table', async () => {
  const { context, violations } = await watchedContext(browser, { viewport: { width: 320, height: 640 } });
  try {
    const page = await usersPage(context);
    await page.screenshot({ path: join(SHOTS, 'users-320.png'), fullPage: true });
    await assertFitsWidth(page, 320, 'the page');
    assert.deepEqual(violations, []);
  } finally {
    await context.close();
  }
});
