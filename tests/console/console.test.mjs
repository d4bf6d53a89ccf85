// The operator console in headless Chromium (Debian's package), driven by playwright-core,
// against one running `tollgate serve` whose database `tollgate init --demo` made.
//
// What an operator does, end to end, with the agents' side checked over /mcp:
//
//   - signs in with the admin key and lands on the overview; a wrong key is refused;
//   - sees the calls just made in the overview's chart;
//   - creates a key, reads its secret once, uses it, revokes it, and sees it refused;
//   - lowers a key's `read` limit to 1 a minute and sees the second call refused;
//   - filters the audit log and exports the filtered rows as CSV;
//   - reads each backend tool's scope, category and the calls and failures of the last day
//     (the `shop` backend run.sh configures), and opens a failing call's row from there;
//   - reads the overview and the credentials page at 320 px without scrolling sideways,
//     and signs in and reads the overview and the audit log with JavaScript off;
//   - opens an audit row from the list: its outcome and duration, and for a failure what
//     the catalog says of its code;
//   - sees a code keep its colour in the charts when the ranking of the codes changes;
//   - reads keys by their names (the operator, the buckets, the last failures, the
//     credentials page), the ids only on hover, and a bucket past its limit drawn full in
//     the warning colour while one below it is not;
//   - reads the charts' time and count axes;
//   - reads a tool's p50/p95/p99 on the latency page and opens its slowest call's row.
//
// A screenshot of every page goes to target/console-screenshots/; with
// TG_CONSOLE_SCREENSHOT_DOC=1 the overview at 1280 px is also written to
// docs/console-overview.png.
//
// Run through tests/console/run.sh, which starts the server and sets TG_CONSOLE_URL (its
// base URL), TG_CONSOLE_ADMIN_KEY (the key `tollgate init` printed), TG_CONSOLE_CHROMIUM
// and TG_CONSOLE_NPM (where playwright-core is installed). The tests run in file order and
// share the server; each makes the keys it needs.

import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { assertFitsWidth, launchChromium, required } from './browser.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const REPO = resolve(HERE, '..', '..');
const BASE = required('TG_CONSOLE_URL');
const ADMIN_KEY = required('TG_CONSOLE_ADMIN_KEY');
/** The admin key's public id: `tg_live_<id>_<secret>`. */
const ADMIN_ID = ADMIN_KEY.split('_')[2];
const SHOTS = join(REPO, 'target', 'console-screenshots');
const DOC_SHOT = join(REPO, 'docs', 'console-overview.png');
const WRITE_DOC_SHOT = process.env.TG_CONSOLE_SCREENSHOT_DOC === '1';

// ---- browser ------------------------------------------------------------------------------

let browser;
before(async () => {
  mkdirSync(SHOTS, { recursive: true });
  browser = await launchChromium();
});
after(async () => {
  await browser?.close();
});

/** A fresh browser context (its own cookies); 1280 px wide unless told otherwise. */
async function newContext(options = {}) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 }, ...options });
  context.setDefaultTimeout(10_000);
  return context;
}

/** Writes a full-page screenshot of `page` to target/console-screenshots/NAME.png. */
async function shot(page, name) {
  await page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true });
}

/**
 * Clicks `selector` (a submit button), waits for the page it leads to, and resolves with
 * that page's response (after any redirect).
 */
async function submit(page, selector) {
  const [response] = await Promise.all([page.waitForNavigation(), page.click(selector)]);
  return response;
}

/** Opens the sign-in page in `context`, signs in with `key`, and returns the page. */
async function signIn(context, key = ADMIN_KEY) {
  const page = await context.newPage();
  await page.goto(`${BASE}/console/sign-in`);
  await page.fill('#sign-in #key', key);
  await submit(page, '#sign-in [type=submit]');
  return page;
}

/**
 * Creates an API key with the console's `#create-key` form and returns what the page shows
 * once: `{ id, secret }`. The page stays on the secret page.
 */
async function createKey(page, name, scopes) {
  await page.goto(`${BASE}/console/credentials`);
  await page.fill('#create-key [name=name]', name);
  for (const scope of scopes.split(',')) {
    await page.check(`#create-key input[name=scopes][value="${scope}"]`);
  }
  await page.selectOption('#create-key [name=mode]', 'live');
  const response = await submit(page, '#create-key [type=submit]');
  assert.equal(response.status(), 200);
  assert.equal(new URL(page.url()).pathname, '/console/credentials/keys');
  const secret = (await page.textContent('#secret')).trim();
  const id = (await page.textContent('#public-id')).trim();
  assert.ok(secret.startsWith(`tg_live_${id}_`), `secret ${secret.slice(0, 30)}… for key ${id}`);
  return { id, secret };
}

/** The rows of the audit log's CSV export for `query` (the page's session cookie). */
async function auditCsvRows(page, query) {
  const response = await page.request.get(`${BASE}/console/audit.csv?${query}`);
  assert.equal(response.status(), 200);
  return (await response.text()).split('\r\n').filter((line) => line !== '').length - 1;
}

/**
 * Waits until the audit log holds at least `count` rows for `query`: calls are audited by a
 * writer thread a few milliseconds after they are answered. Bounded: 100 looks, 50 ms apart.
 */
async function untilAudited(page, query, count) {
  for (let look = 0; look < 100; look++) {
    if ((await auditCsvRows(page, query)) >= count) return;
    await new Promise((done) => setTimeout(done, 50));
  }
  assert.fail(`the audit log never held ${count} rows for ${query}`);
}

/**
 * The `.audit-row`s of the page's `#audit` table, as `{ credential, name, tool, outcome }`:
 * the caller's id (kept in the cell's `data-id` and `title`) and the name it shows.
 */
async function auditRows(page) {
  return page.$$eval('#audit .audit-row', (rows) =>
    rows.map((row) => ({
      credential: row.querySelector('.credential').getAttribute('data-id'),
      name: row.querySelector('.credential').textContent.trim(),
      tool: row.querySelector('.tool').textContent.trim(),
      outcome: row.querySelector('.outcome').textContent.trim(),
    })),
  );
}

/** Asserts that the page (already loaded) has an element matching `selector`. */
async function assertPresent(page, selector) {
  assert.ok(await page.$(selector), `${page.url()} has no ${selector}`);
}

/** Where the audit filter's text and time fields put their labels and inputs. */
function filterFields(page) {
  return page.$$eval('#audit-filter .field:not(.check)', (all) =>
    all.map((field) => {
      const label = field.querySelector('label').getBoundingClientRect();
      const input = field.querySelector('input').getBoundingClientRect();
      return {
        labelTop: label.top,
        labelBottom: label.bottom,
        labelLeft: label.left,
        inputTop: input.top,
        inputLeft: input.left,
        inputRight: input.right,
      };
    }),
  );
}

// ---- MCP over HTTP (the agents' side) ------------------------------------------------------

const MODERN = '2026-07-28';
let rpcId = 0;

/**
 * One stateless (2026-07-28) `tools/call` of `tool` with `token`; resolves with
 * `{ status, headers, body }` (the body parsed).
 */
async function callTool(token, tool, args = {}) {
  const body = {
    jsonrpc: '2.0',
    id: ++rpcId,
    method: 'tools/call',
    params: {
      name: tool,
      arguments: args,
      _meta: {
        'io.modelcontextprotocol/protocolVersion': MODERN,
        'io.modelcontextprotocol/clientCapabilities': {},
        'io.modelcontextprotocol/clientInfo': { name: 'tollgate-console-tests', version: '0' },
      },
    },
  };
  const response = await fetch(`${BASE}/mcp`, {
    method: 'POST',
    headers: {
      'Content-Type': 'application/json',
      Accept: 'application/json, text/event-stream',
      'MCP-Protocol-Version': MODERN,
      'Mcp-Method': 'tools/call',
      'Mcp-Name': tool,
      Authorization: `Bearer ${token}`,
    },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(10_000),
  });
  return { status: response.status, headers: response.headers, body: await response.json() };
}

/** Asserts that `call` is a successful `search_clients` result. */
function assertClientsFound(call) {
  assert.equal(call.status, 200, JSON.stringify(call.body));
  assert.equal(call.body.error, undefined, JSON.stringify(call.body));
  assert.notEqual(call.body.result.isError, true, JSON.stringify(call.body));
  assert.match(call.body.result.content[0].text, /client\(s\) found/);
}

// ---- the tests ----------------------------------------------------------------------------

test('sign-in: the admin key opens the overview, a wrong key is refused, sign-out ends it', async () => {
  // Without a session every page sends the browser to the sign-in page.
  const anonymous = await fetch(`${BASE}/console`, { redirect: 'manual' });
  assert.equal(anonymous.status, 303);
  assert.equal(new URL(anonymous.headers.get('location'), BASE).pathname, '/console/sign-in');

  const context = await newContext();
  try {
    const page = await context.newPage();
    await page.goto(`${BASE}/console`);
    assert.equal(new URL(page.url()).pathname, '/console/sign-in');
    assert.equal(await page.getAttribute('html', 'lang'), 'en');
    assert.equal(await page.getAttribute('#sign-in', 'method'), 'post');
    assert.equal(await page.getAttribute('#key', 'type'), 'password');
    assert.ok((await page.inputValue('#sign-in [name=csrf]')).length > 0, 'the form carries a csrf token');
    await shot(page, 'sign-in');

    // A key that does not exist: a 401 page with the alert, and no session.
    await page.fill('#key', 'tg_live_0000000000000000_not-a-secret');
    const [refused] = await Promise.all([page.waitForNavigation(), page.click('#sign-in [type=submit]')]);
    assert.equal(refused.status(), 401);
    assert.ok((await page.textContent('#error[role=alert]')).trim().length > 0);
    assert.deepEqual((await context.cookies()).filter((c) => c.name === 'tollgate_console'), []);

    await page.goto(`${BASE}/console/sign-in`);
    await page.fill('#key', ADMIN_KEY);
    await submit(page, '#sign-in [type=submit]');
    assert.equal(new URL(page.url()).pathname, '/console');
    await assertPresent(page, '#calls-hour');
    const [cookie] = (await context.cookies()).filter((c) => c.name === 'tollgate_console');
    assert.ok(cookie, 'the session cookie is set');
    assert.equal(cookie.httpOnly, true);
    assert.equal(cookie.sameSite, 'Strict');
    assert.equal(cookie.path, '/console');

    const links = await page.$$eval('#nav a', (as) => as.map((a) => new URL(a.href).pathname));
    for (const path of ['/console', '/console/credentials', '/console/limits', '/console/audit', '/console/backends']) {
      assert.ok(links.includes(path), `#nav links to ${path}: ${links}`);
    }

    await submit(page, '#sign-out [type=submit]');
    await page.goto(`${BASE}/console`);
    assert.equal(new URL(page.url()).pathname, '/console/sign-in');
  } finally {
    await context.close();
  }
});

test('overview: the calls just made show in the chart of the last hour', async () => {
  const made = 3;
  const context = await newContext();
  try {
    const page = await signIn(context);
    const query = `credential=${ADMIN_KEY.split('_')[2]}&tool=search_clients`;
    const before = await auditCsvRows(page, query);
    for (let i = 0; i < made; i++) assertClientsFound(await callTool(ADMIN_KEY, 'search_clients'));
    await untilAudited(page, query, before + made);
    await page.goto(`${BASE}/console`);
    assert.equal(new URL(page.url()).pathname, '/console');
    const hour = Number(await page.getAttribute('#calls-hour svg[data-total]', 'data-total'));
    const day = Number(await page.getAttribute('#calls-day svg[data-total]', 'data-total'));
    assert.ok(Number.isInteger(hour) && hour >= made, `calls in the last hour: ${hour}`);
    assert.ok(Number.isInteger(day) && day >= hour, `calls in the last day: ${day} (hour: ${hour})`);
    assert.equal(await page.getAttribute('#calls-hour svg', 'role'), 'img');
    assert.ok((await page.textContent('#calls-hour figcaption')).trim().length > 0);
    // The admin key's `read` bucket was just charged: it is among the tightest, with a bar.
    const buckets = await page.$$eval('#buckets li.bucket', (items) =>
      items.map((li) => ({
        value: Number(li.getAttribute('data-count')),
        max: Number(li.getAttribute('data-limit')),
        bar: li.querySelector('svg.bucket-bar rect.fill') !== null,
      })),
    );
    assert.ok(buckets.some((b) => b.value >= made && b.max > 0 && b.bar), JSON.stringify(buckets));
    await assertPresent(page, '#errors');
    await shot(page, 'overview');
  } finally {
    await context.close();
  }
});

test('credentials: a key created in the console shows its secret once, works, and is refused once revoked', async () => {
  const context = await newContext();
  try {
    const page = await signIn(context);
    await page.goto(`${BASE}/console/credentials`);
    await assertPresent(page, '#keys');
    await assertPresent(page, '#clients');
    await shot(page, 'credentials');

    const key = await createKey(page, 'browser test reader', 'clients:read');
    assert.ok(await page.isVisible('#copy-secret'));
    await shot(page, 'secret');

    // The copy button puts the secret on the clipboard.
    await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: BASE });
    await page.click('#copy-secret');
    assert.equal(await page.evaluate(() => navigator.clipboard.readText()), key.secret);

    // Never shown again: not on the list, which names the key by its public id.
    await page.goto(`${BASE}/console/credentials`);
    const listed = await page.content();
    assert.ok(!listed.includes(key.secret), 'the credentials page shows the secret again');
    assert.ok(!listed.includes(key.secret.slice(`tg_live_${key.id}_`.length)), 'the credentials page shows the secret part');
    const row = `#keys tr[id="key-${key.id}"]`;
    assert.equal((await page.textContent(`${row} .status`)).trim(), 'active');

    // The new key works over MCP, and cannot open the console: it is a valid key without
    // the `admin` scope, so the sign-in page refuses it with 403 (a wrong key gets 401).
    assertClientsFound(await callTool(key.secret, 'search_clients'));
    const other = await newContext();
    try {
      const refused = await other.newPage();
      await refused.goto(`${BASE}/console/sign-in`);
      await refused.fill('#key', key.secret);
      const [response] = await Promise.all([refused.waitForNavigation(), refused.click('#sign-in [type=submit]')]);
      assert.equal(response.status(), 403);
      assert.ok((await refused.textContent('#error[role=alert]')).trim().length > 0);
    } finally {
      await other.close();
    }

    // Revoke: the link, the confirmation page, back on the list.
    await Promise.all([page.waitForNavigation(), page.click(`${row} a.revoke`)]);
    assert.equal(new URL(page.url()).pathname, `/console/credentials/keys/${key.id}/revoke`);
    assert.equal(await page.getAttribute('#confirm', 'method'), 'post');
    await shot(page, 'revoke-confirm');
    await submit(page, '#confirm-button');
    assert.equal(new URL(page.url()).pathname, '/console/credentials');
    assert.equal((await page.textContent(`${row} .status`)).trim(), 'revoked');

    // The very next call with it is refused: -32001 with 401, and the holder of the
    // secret learns why.
    const call = await callTool(key.secret, 'search_clients');
    assert.equal(call.status, 401, JSON.stringify(call.body));
    assert.match(call.headers.get('www-authenticate') ?? '', /^Bearer /);
    assert.equal(call.body.error.code, -32001);
    assert.equal(call.body.error.message, 'invalid_token');
    assert.equal(call.body.error.data.code, 'invalid_token');
    assert.equal(call.body.error.data.http_status, 401);
    assert.equal(call.body.error.data.retryable, false);
    assert.deepEqual(call.body.error.data.details, { reason: 'revoked' });
  } finally {
    await context.close();
  }
});

test('limits: a key lowered to one read a minute gets its second call refused', async () => {
  const context = await newContext();
  try {
    const page = await signIn(context);
    const key = await createKey(page, 'browser test limited', 'clients:read');

    await page.goto(`${BASE}/console/limits`);
    await assertPresent(page, '#plan-limits');
    await page.selectOption('#set-credential-limit [name=credential]', key.id);
    await page.selectOption('#set-credential-limit [name=category]', 'read');
    await page.fill('#set-credential-limit [name=per_minute]', '1');
    await submit(page, '#set-credential-limit [type=submit]');
    assert.equal(new URL(page.url()).pathname, '/console/limits');
    const override = `#overrides tr[id="override-${key.id}-read"]`;
    const cells = await page.$$eval(`${override} td`, (tds) => tds.map((td) => td.textContent.trim()));
    assert.deepEqual(cells, ['read', '1']);
    // The key by its name, its id on hover.
    assert.equal((await page.textContent(`${override} th.name`)).trim(), 'browser test limited');
    assert.equal(await page.getAttribute(`${override} th.name`, 'title'), key.id);
    await shot(page, 'limits');

    assertClientsFound(await callTool(key.secret, 'search_clients'));
    // Refused by the rate guard: in the default `compatible` mode a JSON-RPC error with
    // HTTP 200, the wait in `data.retry_after` and in `Retry-After`.
    const call = await callTool(key.secret, 'search_clients');
    assert.equal(call.status, 200, JSON.stringify(call.body));
    assert.equal(call.body.error.code, -32006);
    assert.equal(call.body.error.message, 'rate_limited');
    const { data } = call.body.error;
    assert.equal(data.code, 'rate_limited');
    assert.equal(data.http_status, 429);
    assert.equal(data.retryable, true);
    assert.equal(data.bucket, 'read');
    assert.equal(data.limit, 1);
    assert.ok(Number.isInteger(data.retry_after) && data.retry_after >= 1 && data.retry_after <= 60, JSON.stringify(data));
    assert.equal(call.headers.get('retry-after'), String(data.retry_after));
  } finally {
    await context.close();
  }
});

test('audit: the filter keeps only the matching rows, and the CSV export has them too', async () => {
  const context = await newContext();
  try {
    const page = await signIn(context);
    const key = await createKey(page, 'browser test auditor', 'clients:read,invoices:read');
    assertClientsFound(await callTool(key.secret, 'search_clients'));
    const invoices = await callTool(key.secret, 'search_invoices');
    assert.equal(invoices.body.error, undefined, JSON.stringify(invoices.body));
    await untilAudited(page, `credential=${key.id}`, 2);

    // The filter's fields line up: the labels of one row at one height, their inputs at
    // another, whatever help line a field has below its input.
    await page.goto(`${BASE}/console/audit`);
    const boxes = await filterFields(page);
    const firstRow = boxes.filter((b) => Math.abs(b.labelTop - boxes[0].labelTop) < 1);
    assert.ok(firstRow.length >= 3, JSON.stringify(boxes));
    for (const b of firstRow) assert.ok(Math.abs(b.inputTop - firstRow[0].inputTop) < 1, JSON.stringify(boxes));
    assert.ok(boxes.every((b) => b.inputTop >= b.labelBottom - 1), JSON.stringify(boxes));

    // By credential: exactly this key's two calls.
    await page.fill('#audit-filter [name=credential]', key.id);
    await submit(page, '#audit-filter [type=submit]');
    assert.equal(new URL(page.url()).searchParams.get('credential'), key.id);
    const mine = await auditRows(page);
    assert.deepEqual(mine.map((r) => r.tool).sort(), ['search_clients', 'search_invoices'], JSON.stringify(mine));
    for (const row of mine) assert.equal(row.credential, key.id, JSON.stringify(row));
    await shot(page, 'audit');

    // By tool as well: one row left.
    await page.fill('#audit-filter [name=tool]', 'search_invoices');
    await submit(page, '#audit-filter [type=submit]');
    const filtered = await auditRows(page);
    assert.equal(filtered.length, 1, JSON.stringify(filtered));
    assert.equal(filtered[0].tool, 'search_invoices');

    // By tool alone: other credentials' rows of that tool, no other tool.
    await page.goto(`${BASE}/console/audit`);
    await page.fill('#audit-filter [name=credential]', '');
    await page.fill('#audit-filter [name=tool]', 'search_clients');
    await submit(page, '#audit-filter [type=submit]');
    const clients = await auditRows(page);
    assert.ok(clients.length >= 2, JSON.stringify(clients));
    assert.deepEqual([...new Set(clients.map((r) => r.tool))], ['search_clients']);

    // The export link carries the filter; its CSV has a header row and the same rows.
    const href = await page.getAttribute('#export-csv', 'href');
    const exportUrl = new URL(href, page.url());
    assert.equal(exportUrl.pathname, '/console/audit.csv');
    assert.equal(exportUrl.searchParams.get('tool'), 'search_clients');
    const csv = await page.request.get(exportUrl.href);
    assert.equal(csv.status(), 200);
    assert.match(csv.headers()['content-type'], /^text\/csv\b/);
    const lines = (await csv.text()).split(/\r?\n/).filter((line) => line.length > 0);
    assert.equal(lines[0], 'id,at,credential_id,client_id,tool,outcome,calls,duration_us,transport,source,backend,request_id,user_name,trace_id');
    assert.equal(lines.length - 1, clients.length, lines.join('\n'));
    for (const line of lines.slice(1)) assert.ok(line.includes('search_clients'), line);

    // The console's own changes are audited under the operator's credential, and the
    // secret it showed is not among them.
    await page.goto(`${BASE}/console/audit?tool=${encodeURIComponent('console:create_key')}`);
    const created = await auditRows(page);
    assert.ok(created.length >= 1, 'console:create_key rows');
    for (const row of created) assert.equal(row.credential, ADMIN_ID, JSON.stringify(row));
    assert.ok(!(await page.content()).includes(key.secret), 'the audit log shows a secret');
  } finally {
    await context.close();
  }
});

/** The calls and failures cells of a backends-page row (`#backend-…` or `#tool-…`). */
async function counts(page, row) {
  const cell = async (name) => Number((await page.textContent(`${row} td.${name}`)).trim());
  return { calls: await cell('calls'), failures: await cell('failures') };
}

test('backends: each tool shows its scope, category and the calls and failures of the last day', async () => {
  const context = await newContext();
  try {
    const page = await signIn(context);
    await page.goto(`${BASE}/console/backends`);
    await assertPresent(page, '#backends');
    const backend = '#backends tr[id="backend-shop"]';
    const tool = '#tools-shop tr[id="tool-shop_get_thing"]';
    const idle = '#tools-shop tr[id="tool-shop_list_things"]';
    assert.equal((await page.textContent(`${backend} .state`)).trim(), 'ready');
    assert.equal((await page.textContent(`${backend} .tool-count`)).trim(), '2');
    assert.equal((await page.textContent(`${backend} .in-flight`)).trim(), '0 / 64');
    assert.equal((await page.textContent(`${backend} .queued`)).trim(), '0');
    assert.equal((await page.textContent(`${backend} .circuit`)).trim(), 'closed');
    assert.equal((await page.textContent(`${tool} .scope`)).trim(), 'shop:read');
    assert.equal((await page.textContent(`${tool} .category`)).trim(), 'read');
    const before = { backend: await counts(page, backend), tool: await counts(page, tool) };

    // Two calls found, one not (the backend's 404 is the catalog's not_found).
    const query = 'tool=shop_get_thing';
    const audited = await auditCsvRows(page, query);
    for (const [thing, code] of [['ok', null], ['ok', null], ['missing', 'not_found']]) {
      const call = await callTool(ADMIN_KEY, 'shop_get_thing', { case: thing });
      assert.equal(call.status, 200, JSON.stringify(call.body));
      const error = call.body.result?._meta?.['dev.tollgate/error'];
      assert.equal(error?.code ?? null, code, JSON.stringify(call.body));
    }
    await untilAudited(page, query, audited + 3);

    await page.goto(`${BASE}/console/backends`);
    assert.deepEqual(await counts(page, tool), { calls: before.tool.calls + 3, failures: before.tool.failures + 1 });
    assert.deepEqual(await counts(page, backend), {
      calls: before.backend.calls + 3,
      failures: before.backend.failures + 1,
    });
    assert.deepEqual(await counts(page, idle), { calls: 0, failures: 0 });
    assert.equal((await page.textContent(`${idle} .scope`)).trim(), 'shop:read');
    await shot(page, 'backends');

    // The failures open the audit log on those rows; the newest is the one just made.
    await Promise.all([page.waitForNavigation(), page.click(`${tool} td.failures a`)]);
    const url = new URL(page.url());
    assert.equal(url.pathname, '/console/audit');
    assert.equal(url.searchParams.get('tool'), 'shop_get_thing');
    assert.equal(url.searchParams.get('failures'), '1');
    const rows = await auditRows(page);
    assert.equal(rows.length, before.tool.failures + 1, JSON.stringify(rows));
    assert.equal(rows[0].outcome, 'not_found');
    // The filter form takes the link's time as it is (seconds included) and filters again.
    await submit(page, '#audit-filter [type=submit]');
    assert.equal((await auditRows(page)).length, rows.length);

    await Promise.all([page.waitForNavigation(), page.click('#audit .audit-row a.open')]);
    assert.match(new URL(page.url()).pathname, /^\/console\/audit\/\d+$/);
    assert.equal((await page.textContent('#audit-row dd.outcome')).trim(), 'not_found');
    assert.equal((await page.textContent('#audit-row dd.backend')).trim(), 'shop');
    assert.equal((await page.textContent('#catalog dd.code')).trim(), 'not_found');
    assert.equal((await page.textContent('#catalog dd.http-status')).trim(), '404');
    assert.equal((await page.textContent('#catalog dd.error-code')).trim(), '3101');
    assert.ok((await page.textContent('#catalog dd.hint')).trim().length > 0);
    await shot(page, 'audit-row-backend');
  } finally {
    await context.close();
  }
});

test('320 px: the overview, credentials, limits, audit, audit row, latency and backends pages do not scroll sideways, nor do their tables', async () => {
  const context = await newContext({ viewport: { width: 320, height: 640 } });
  try {
    const page = await signIn(context);
    await page.goto(`${BASE}/console/audit`);
    const row = await page.getAttribute('#audit .audit-row a.open', 'href');
    for (const [path, name] of [
      ['/console', 'overview-320'],
      ['/console/credentials', 'credentials-320'],
      ['/console/limits', 'limits-320'],
      ['/console/audit', 'audit-320'],
      ['/console/backends', 'backends-320'],
      ['/console/latency', 'latency-320'],
      [row, 'audit-row-320'],
    ]) {
      await page.goto(`${BASE}${path}`);
      await shot(page, name);
      await assertFitsWidth(page, 320, path);
      // A time is never broken across lines.
      const broken = await page.$$eval('time', (times) =>
        times.filter((t) => t.getClientRects().length > 1).map((t) => t.textContent));
      assert.deepEqual(broken, [], `${path}: times over two lines`);
    }
    // The audit filter's labels and fields line up: one column, each label above its field.
    await page.goto(`${BASE}/console/audit`);
    const fields = await filterFields(page);
    assert.ok(fields.length >= 5, JSON.stringify(fields));
    for (const f of fields) {
      assert.ok(f.inputTop >= f.labelBottom - 1, JSON.stringify(fields));
      assert.equal(Math.round(f.labelLeft), Math.round(fields[0].labelLeft), JSON.stringify(fields));
      assert.equal(Math.round(f.inputLeft), Math.round(fields[0].inputLeft), JSON.stringify(fields));
      assert.ok(f.inputRight <= 320, JSON.stringify(fields));
    }
  } finally {
    await context.close();
  }
});

test('without JavaScript: sign in, read the overview and the audit log', async () => {
  const context = await newContext({ javaScriptEnabled: false });
  try {
    const page = await signIn(context);
    await untilAudited(page, 'outcome=rate_limited', 1);
    await page.goto(`${BASE}/console`);
    assert.equal(new URL(page.url()).pathname, '/console');
    const hour = Number(await page.getAttribute('#calls-hour svg[data-total]', 'data-total'));
    assert.ok(hour > 0, `calls in the last hour: ${hour}`);
    // The refusals of the tests above are among the last errors.
    const outcomes = await page.$$eval('#errors td.outcome', (tds) => tds.map((td) => td.textContent.trim()));
    assert.ok(outcomes.includes('rate_limited'), JSON.stringify(outcomes));
    await page.goto(`${BASE}/console/audit`);
    const rows = await auditRows(page);
    assert.ok(rows.length > 0, 'the audit log has rows');
    // The filter is a plain GET form.
    await page.fill('#audit-filter [name=tool]', 'search_invoices');
    await submit(page, '#audit-filter [type=submit]');
    const filtered = await auditRows(page);
    assert.ok(filtered.length > 0);
    assert.deepEqual([...new Set(filtered.map((r) => r.tool))], ['search_invoices']);
    // A row opens from its link.
    await Promise.all([page.waitForNavigation(), page.click('#audit .audit-row a.open')]);
    assert.equal((await page.textContent('#audit-row dd.tool')).trim(), 'search_invoices');
  } finally {
    await context.close();
  }
});

test('audit row: opened from the list, it shows its outcome and duration, and a failure its catalog entry', async () => {
  const context = await newContext();
  try {
    const page = await signIn(context);
    const key = await createKey(page, 'browser test row', 'clients:read');
    assertClientsFound(await callTool(key.secret, 'search_clients'));
    const refused = await callTool(key.secret, 'search_invoices');
    assert.equal(refused.body.error?.data?.code, 'insufficient_scope', JSON.stringify(refused.body));
    await untilAudited(page, `credential=${key.id}`, 2);

    await page.goto(`${BASE}/console/audit?credential=${key.id}`);
    const rows = await auditRows(page);
    assert.deepEqual(rows.map((r) => r.outcome), ['insufficient_scope', 'ok'], JSON.stringify(rows));
    // Each row's time is a <time> element that stays on one line, and its link.
    const at = await page.$eval('#audit .audit-row td.at', (td) => ({
      datetime: td.querySelector('time').getAttribute('datetime'),
      text: td.textContent.trim(),
      nowrap: getComputedStyle(td.querySelector('time')).whiteSpace,
    }));
    assert.equal(at.datetime, at.text);
    assert.ok(!Number.isNaN(Date.parse(at.datetime)), at.datetime);
    assert.equal(at.nowrap, 'nowrap');

    // The admitted call.
    await Promise.all([page.waitForNavigation(), page.click('#audit .audit-row:nth-child(2) a.open')]);
    assert.match(new URL(page.url()).pathname, /^\/console\/audit\/\d+$/);
    assert.equal((await page.textContent('#audit-row dd.outcome')).trim(), 'ok (admitted)');
    assert.match((await page.textContent('#audit-row dd.duration')).trim(), /^\d+(\.\d+)? ms$/);
    assert.equal((await page.textContent('#audit-row dd.tool')).trim(), 'search_clients');
    // The caller by its key's name (a link to its calls), its id beside it on this page.
    assert.equal((await page.textContent('#audit-row dd.credential a.name')).trim(), 'browser test row');
    assert.equal((await page.textContent('#audit-row dd.credential code.id')).trim(), key.id);
    assert.equal((await page.textContent('#audit-row dd.transport')).trim(), 'http');
    assert.equal(await page.$('#catalog'), null, 'an admitted call has no catalog entry');
    assert.equal(await page.getAttribute('#nav a[aria-current=page]', 'href'), '/console/audit');
    await shot(page, 'audit-row');

    // The refused call: the catalog's code, status, numeric code and hint template.
    await page.goBack();
    await Promise.all([page.waitForNavigation(), page.click('#audit .audit-row:nth-child(1) a.open')]);
    assert.equal((await page.textContent('#audit-row dd.outcome')).trim(), 'insufficient_scope');
    assert.equal((await page.textContent('#catalog dd.code')).trim(), 'insufficient_scope');
    assert.equal((await page.textContent('#catalog dd.http-status')).trim(), '403');
    assert.equal((await page.textContent('#catalog dd.error-code')).trim(), '1105');
    assert.equal((await page.textContent('#catalog dd.retryable')).trim(), 'false');
    assert.equal((await page.textContent('#catalog dd.rpc-code')).trim(), '-32005');
    assert.match((await page.textContent('#catalog dd.hint')).trim(), /scope/);
    await shot(page, 'audit-row-failure');

    // A row that does not exist: the console's 404 page.
    const missing = await page.goto(`${BASE}/console/audit/999999999`);
    assert.equal(missing.status(), 404);
    assert.ok((await page.textContent('#error[role=alert]')).trim().length > 0);
  } finally {
    await context.close();
  }
});

/** Each code of the chart's legend with its colour: `{ code: { colour, count, css } }`. */
async function legendColours(page, chart) {
  return page.$$eval(`#${chart} .legend li`, (items) =>
    Object.fromEntries(
      items.map((li) => {
        const swatch = li.querySelector('.swatch');
        const [label, count] = li.textContent.trim().split(/:\s*(?=\d+$)/);
        const colour = [...swatch.classList].find((c) => c.startsWith('o-'));
        return [label, { colour, count: Number(count), css: getComputedStyle(swatch).backgroundColor }];
      }),
    ),
  );
}

test('overview: a code keeps its colour in both charts when the ranking of the codes changes', async () => {
  const context = await newContext();
  try {
    const page = await signIn(context);
    const invalid = 'idempotency_key_invalid';
    const required = 'idempotency_key_required';
    const made = async (code, count) => {
      const before = await auditCsvRows(page, `outcome=${code}`);
      for (let i = 0; i < count; i++) {
        const call =
          code === invalid
            ? await callTool(ADMIN_KEY, 'create_client', { name: 'Colour test', idempotency_key: '' })
            : await callTool(ADMIN_KEY, 'record_payment', { invoice_id: 'inv_x', amount_cents: 100 });
        assert.equal(call.body.error?.data?.code, code, JSON.stringify(call.body));
      }
      await untilAudited(page, `outcome=${code}`, before + count);
    };

    // First one code leads the refusals, then another overtakes it.
    await made(invalid, 3);
    await page.goto(`${BASE}/console`);
    const first = await legendColours(page, 'calls-hour');
    assert.ok(first[invalid] && !first[required], JSON.stringify(first));
    await made(required, first[invalid].count + 3);
    await page.goto(`${BASE}/console`);
    const second = await legendColours(page, 'calls-hour');
    assert.ok(second[required].count > second[invalid].count, JSON.stringify(second));

    for (const [code, entry] of Object.entries(first)) {
      assert.equal(second[code]?.colour, entry.colour, `${code}: ${JSON.stringify({ first, second })}`);
      assert.equal(second[code]?.css, entry.css, code);
    }
    // Each guard code has the colour of its own name, the same in the day's chart.
    assert.equal(second[invalid].colour, `o-${invalid}`);
    assert.equal(second[required].colour, `o-${required}`);
    assert.notEqual(second[invalid].css, second[required].css);
    const day = await legendColours(page, 'calls-day');
    for (const [code, entry] of Object.entries(second)) {
      assert.equal(day[code]?.colour, entry.colour, code);
      assert.equal(day[code]?.css, entry.css, code);
    }
    // The bars use the legend's colours.
    const bars = await page.$$eval(`#calls-hour rect.o-${required}`, (rects) =>
      [...new Set(rects.map((r) => getComputedStyle(r).fill))]);
    assert.deepEqual(bars, [second[required].css]);
    await shot(page, 'overview-colours');
  } finally {
    await context.close();
  }
});

test('names: the overview and the credentials page show keys by their names, the ids on hover, and a bucket past its limit in the warning colour', async () => {
  const context = await newContext();
  try {
    const page = await signIn(context);
    const name = 'browser test named';
    const key = await createKey(page, name, 'clients:read');
    // One read a minute, then two calls: the key's `read` bucket stands at 2 / 1.
    await page.goto(`${BASE}/console/limits`);
    await page.selectOption('#set-credential-limit [name=credential]', key.id);
    await page.selectOption('#set-credential-limit [name=category]', 'read');
    await page.fill('#set-credential-limit [name=per_minute]', '1');
    await submit(page, '#set-credential-limit [type=submit]');
    assertClientsFound(await callTool(key.secret, 'search_clients'));
    const refused = await callTool(key.secret, 'search_clients');
    assert.equal(refused.body.error?.data?.code, 'rate_limited', JSON.stringify(refused.body));
    // And the admin key's own `read` bucket, well below its limit.
    assertClientsFound(await callTool(ADMIN_KEY, 'search_clients'));
    await untilAudited(page, `credential=${key.id}`, 2);

    await page.goto(`${BASE}/console`);
    // The operator by the key's name, not its id; the id on hover.
    const who = await page.$eval('#sign-out .who', (span) => ({
      text: span.innerText.trim(),
      name: span.querySelector('.operator-name').innerText.trim(),
      title: span.querySelector('.operator-name').getAttribute('title'),
    }));
    assert.equal(who.title, ADMIN_ID);
    assert.ok(who.name.length > 0 && who.name !== ADMIN_ID, JSON.stringify(who));
    assert.ok(!who.text.includes(ADMIN_ID), `the frame shows the id: ${JSON.stringify(who)}`);

    // The buckets by their credential's name; past its limit, full and in the warning colour.
    const buckets = await page.$$eval('#buckets li.bucket', (items) =>
      items.map((li) => {
        const fill = li.querySelector('svg.bucket-bar rect.fill');
        return {
          id: li.querySelector('.bucket-name .name').getAttribute('title'),
          name: li.querySelector('.bucket-name .name').innerText.trim(),
          text: li.innerText,
          count: li.querySelector('.bucket-count').innerText.trim(),
          full: li.classList.contains('bucket-full'),
          width: Number(fill.getAttribute('width')),
          colour: getComputedStyle(fill).fill,
        };
      }),
    );
    const mine = buckets.find((b) => b.id === key.id);
    assert.ok(mine, `no bucket of ${key.id}: ${JSON.stringify(buckets)}`);
    assert.equal(mine.name, name);
    assert.ok(!mine.text.includes(key.id), JSON.stringify(mine));
    assert.match(mine.count, /^2 \/ 1\b/);
    assert.equal(mine.full, true);
    assert.equal(mine.width, 100, 'the bar stops at full width');
    const admin = buckets.find((b) => b.id === ADMIN_ID && !b.full);
    assert.ok(admin, `no admin bucket below its limit: ${JSON.stringify(buckets)}`);
    assert.ok(admin.width < 100, JSON.stringify(admin));
    assert.notEqual(mine.colour, admin.colour, 'a bucket past its limit looks like one below it');
    assert.equal(mine.colour, 'rgb(198, 40, 40)');
    // The last failures name the caller too.
    const failure = await page.$eval(`#errors td.credential[data-id="${key.id}"]`, (td) => td.innerText.trim());
    assert.equal(failure, name);
    await shot(page, 'overview-names');

    // The credentials page: the key's row by its name, its id only in the title.
    await page.goto(`${BASE}/console/credentials`);
    const row = `#keys tr[id="key-${key.id}"]`;
    assert.equal((await page.innerText(`${row} th.name`)).trim(), name);
    assert.equal(await page.getAttribute(`${row} th.name`, 'title'), key.id);
    assert.ok(!(await page.innerText(row)).includes(key.id), 'the credentials page shows the id');
  } finally {
    await context.close();
  }
});

test('overview: the charts have a time axis and a count axis with labelled ticks', async () => {
  const context = await newContext();
  try {
    const page = await signIn(context);
    assertClientsFound(await callTool(ADMIN_KEY, 'search_clients'));
    await page.goto(`${BASE}/console`);
    for (const chart of ['calls-hour', 'calls-day']) {
      const axes = await page.$eval(`#${chart} svg`, (svg) => ({
        x: [...svg.querySelectorAll('.x-axis text.tick')].map((t) => t.textContent.trim()),
        y: [...svg.querySelectorAll('.y-axis text.tick')].map((t) => t.textContent.trim()),
        titles: [...svg.querySelectorAll('text.axis-title')].map((t) => t.textContent.trim()),
        desc: svg.querySelector('desc').textContent.trim(),
        peak: Number(svg.getAttribute('data-peak')),
      }));
      assert.ok(axes.x.length >= 3, `${chart}: ${JSON.stringify(axes)}`);
      for (const label of axes.x) assert.match(label, /^(\d\d-\d\d )?\d\d:\d\d$/, chart);
      assert.equal(axes.y[0], '0', chart);
      assert.ok(axes.y.length >= 2, `${chart}: a count tick above 0: ${JSON.stringify(axes)}`);
      for (const label of axes.y) assert.ok(Number(label) <= axes.peak, `${chart}: ${label} > ${axes.peak}`);
      assert.deepEqual(axes.titles, ['UTC', 'calls']);
      assert.match(axes.desc, /UTC/);
    }
    // The day's first tick carries its date.
    const first = await page.textContent('#calls-day .x-axis text.tick');
    assert.match(first.trim(), /^\d\d-\d\d \d\d:\d\d$/);
  } finally {
    await context.close();
  }
});

test('latency: a tool called a few times shows its p50, p95 and p99, and its slowest call opens its audit row', async () => {
  const anonymous = await fetch(`${BASE}/console/latency`, { redirect: 'manual' });
  assert.equal(anonymous.status, 303);
  assert.equal(new URL(anonymous.headers.get('location'), BASE).pathname, '/console/sign-in');
  const context = await newContext();
  try {
    const page = await signIn(context);
    const key = await createKey(page, 'browser test latency', 'clients:read');
    for (let i = 0; i < 3; i++) assertClientsFound(await callTool(key.secret, 'search_clients'));
    await untilAudited(page, `credential=${key.id}`, 3);

    await page.goto(`${BASE}/console/latency`);
    assert.equal(await page.getAttribute('#nav a[aria-current=page]', 'href'), '/console/latency');
    assert.equal((await page.textContent('h1')).trim(), 'Latency');
    const line = '#by-tool tr[data-name="search_clients"]';
    const figures = await page.$eval(line, (tr) => {
      const cell = (c) => tr.querySelector(`td.hour.${c}`);
      return {
        calls: Number(cell('calls').textContent),
        text: ['p50', 'p95', 'p99'].map((p) => cell(p).textContent.trim()),
        us: ['p50', 'p95', 'p99'].map((p) => Number(cell(p).getAttribute('data-us'))),
        dayCalls: Number(tr.querySelector('td.day.calls').textContent),
        backend: tr.querySelector('.backend').textContent.trim(),
      };
    });
    assert.ok(figures.calls >= 3, JSON.stringify(figures));
    assert.ok(figures.dayCalls >= figures.calls, JSON.stringify(figures));
    for (const text of figures.text) assert.match(text, /^\d+(\.\d+)? ms$/);
    const [p50, p95, p99] = figures.us;
    assert.ok(p50 >= 0 && p50 <= p95 && p95 <= p99, JSON.stringify(figures));
    assert.equal(figures.backend, '(none: a built-in tool)');
    // The backend test's calls count under their backend.
    await assertPresent(page, '#by-backend tr[data-name="shop"]');
    await assertPresent(page, '#by-tool tr[data-name="shop_get_thing"]');
    await shot(page, 'latency');

    // The slowest call of the hour opens its row of the audit log, with that duration.
    const slowest = await page.$eval('#slowest-hour tr.slow-call', (tr) => ({
      us: Number(tr.getAttribute('data-us')),
      duration: tr.querySelector('td.duration').textContent.trim(),
      tool: tr.querySelector('td.tool').textContent.trim(),
    }));
    const listed = await page.$$eval('#slowest-hour tr.slow-call', (trs) => trs.map((tr) => Number(tr.getAttribute('data-us'))));
    assert.deepEqual(listed, [...listed].sort((a, b) => b - a), 'slowest first');
    await Promise.all([page.waitForNavigation(), page.click('#slowest-hour tr.slow-call a.open')]);
    assert.match(new URL(page.url()).pathname, /^\/console\/audit\/\d+$/);
    const shown = (await page.textContent('#audit-row dd.duration')).trim();
    assert.match(shown, /^\d+(\.\d+)? ms$/);
    assert.equal(Math.round(parseFloat(shown) * 1000), slowest.us, `${shown} vs ${slowest.duration}`);
    assert.equal((await page.textContent('#audit-row dd.tool')).trim(), slowest.tool);
  } finally {
    await context.close();
  }
});

test('docs/console-overview.png: the overview at 1280 px', { skip: !WRITE_DOC_SHOT && 'set TG_CONSOLE_SCREENSHOT_DOC=1 to regenerate it' }, async () => {
  const context = await newContext({ viewport: { width: 1280, height: 800 }, deviceScaleFactor: 1 });
  try {
    const page = await signIn(context);
    await assertPresent(page, '#calls-hour svg');
    await page.screenshot({ path: DOC_SHOT, fullPage: true });
  } finally {
    await context.close();
  }
});
