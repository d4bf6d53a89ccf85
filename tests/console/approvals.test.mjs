// A call held by a `require_approval` policy rule, approved in headless Chromium: an agent's
// `create_client` for a client whose name starts with "Big" is refused approval_required
// with the URL of its approval's page; an approver (a key holding only `approve`) signs in,
// opens that URL, reads the tool, the arguments, who asked and the rule, approves behind a
// confirmation; the agent's retry with the same idempotency key runs, once, and the next is
// a replay; the decision is an audit row under the approver's key. The approver's sign-in
// opens no other page.
//
// Self-contained: it makes its own database and runs its own `tollgate serve` (TG_CONSOLE_BIN,
// the binary run.sh tests) on a free loopback port.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { launchChromium, required, statelessRequest, submit } from './browser.mjs';
import { serve, signIn, stop, until } from './gate.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const REPO = resolve(HERE, '..', '..');
const BIN = required('TG_CONSOLE_BIN');
const SHOTS = join(REPO, 'target', 'console-screenshots');

let dir;
let db;
let base;
let agentKey;
let approverKey;
let approverId;
let server;
let browser;

/** `tollgate … --json` on the test's database: its parsed output. */
function cli(...args) {
  const run = spawnSync(BIN, ['--database', db, ...args], { encoding: 'utf8' });
  assert.equal(run.status, 0, run.stderr);
  return JSON.parse(run.stdout);
}

before(async () => {
  mkdirSync(SHOTS, { recursive: true });
  dir = mkdtempSync(join(tmpdir(), 'tollgate-approvals-'));
  db = join(dir, 't.db');
  const init = spawnSync(BIN, ['--database', db, 'init'], { encoding: 'utf8' });
  assert.equal(init.status, 0, init.stderr);
  agentKey = cli('key', 'create', '--name', 'agent', '--scopes', '*', '--json').token;
  const approver = cli('key', 'create', '--name', 'Marta (finance)', '--scopes', 'approve', '--json');
  approverKey = approver.token;
  approverId = approver.id;
  const config = join(dir, 'tollgate.toml');
  writeFileSync(config, `[[policy.rules]]
name = "big_clients"
tools = ["create_client"]
condition = "args.name.startsWith('Big')"
effect = "require_approval"
`);
  ({ server, base } = await serve(BIN, db, config));
  await until('the gate is ready', async () => (await fetch(`${base}/healthz`)).status === 200);
  browser = await launchChromium();
});

after(async () => {
  await browser?.close();
  await stop(server);
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** A stateless (2026-07-28) `tools/call` of `create_client` by the agent: its JSON-RPC answer. */
function createClient(args) {
  const params = { name: 'create_client', arguments: args };
  return statelessRequest(base, agentKey, 'tools/call', params, 'tollgate-console-approvals-tests');
}

test('an approver opens the approval URL, approves behind a confirmation, and the call runs once', async () => {
  const args = { name: 'Big Browser SL', email: 'ops@big.example', idempotency_key: 'browser-1' };
  const held = await createClient(args);
  assert.equal(held.error?.message, 'approval_required', JSON.stringify(held));
  const { approval_url: url, approval_id: id } = held.error.data;
  assert.equal(url, `${base}/console/approvals/${id}`);
  // The retry before a decision points at the same approval.
  assert.equal((await createClient(args)).error.data.approval_id, id);

  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  context.setDefaultTimeout(10_000);
  try {
    const page = await context.newPage();
    await signIn(page, base, approverKey);
    assert.equal(new URL(page.url()).pathname, '/console/approvals');
    assert.equal(await page.locator(`#approval-${id}`).count(), 1);
    // An approve-only sign-in sees the Approvals page alone.
    const nav = await page.$$eval('#nav a', (links) => links.map((a) => a.getAttribute('href')));
    assert.deepEqual(nav, ['/console/approvals']);
    await page.goto(`${base}/console/credentials`);
    assert.equal(new URL(page.url()).pathname, '/console/approvals');

    await page.goto(url);
    const approval = page.locator('#approval');
    assert.equal(await approval.getAttribute('data-state'), 'pending');
    assert.equal((await approval.locator('.tool').textContent()).trim(), 'create_client');
    assert.equal((await approval.locator('.rule').textContent()).trim(), 'big_clients');
    const shown = JSON.parse(await page.textContent('#approval-arguments'));
    assert.deepEqual(shown, { name: 'Big Browser SL', email: 'ops@big.example' });
    await page.screenshot({ path: join(SHOTS, 'approval.png'), fullPage: true });

    await submit(page, '#approve');
    assert.match(await page.textContent('#confirm'), /create_client/);
    await submit(page, '#confirm-button');
    assert.equal(new URL(page.url()).pathname, `/console/approvals/${id}`);
    assert.equal(await page.locator('#approval').getAttribute('data-state'), 'approved');
    assert.equal(await page.locator('#approve').count(), 0, 'decided: no more actions');
  } finally {
    await context.close();
  }

  const ran = await createClient(args);
  assert.equal(ran.result?.isError, false, JSON.stringify(ran));
  const again = await createClient(args);
  assert.equal(again.result._meta['dev.tollgate/idempotentReplay'], true);
  assert.deepEqual(again.result.structuredContent, ran.result.structuredContent);
  const listed = cli('approvals', 'list', '--all', '--json').find((a) => a.id === id);
  assert.equal(listed.state, 'used');
  assert.equal(listed.decided_by, `console:${approverId}`);

  // The decision is an audit row under the approver's key, naming the approval.
  await until('the decision is audited', async () =>
    cli('audit', '--tool', 'console:approve_call', '--json').length === 1);
  const [row] = cli('audit', '--tool', 'console:approve_call', '--json');
  assert.equal(row.credential_id, approverId, JSON.stringify(row));
  assert.match(row.request_id, new RegExp(id));
});
