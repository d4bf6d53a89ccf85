// The OAuth front door and the console's Grants page in headless Chromium, against the
// server run.sh starts with [oauth_server] on, and a second server on the same database
// that speaks Spanish (`locale = "es"`).
//
//   - a person signs an application in: the application registers itself with a redirect
//     on this machine (a tiny HTTP server of this test on 127.0.0.1), sends the browser to
//     /oauth/authorize, the person signs in with their personal key, reads the application's
//     name, the host they will be sent back to and the scopes, clicks Allow, and lands on
//     the application's redirect with a code, the state and the issuer; the application
//     exchanges the code for a token that works on /mcp;
//   - the same pages in Spanish, where the person denies: the redirect says access_denied;
//   - no page breaks the strict Content-Security-Policy (the consent form's redirect to
//     the application's origin included);
//   - the operator finds the grant on the Grants page (the person by name, the application
//     by name with its id as the title, the scopes, the state), revokes it through the
//     confirmation, sees it revoked and the change in the audit log, and the application's
//     token is refused on its next call as revoked;
//   - at 320 px the Grants page does not scroll sideways.
//
// Run through tests/console/run.sh, which sets TG_CONSOLE_URL and TG_CONSOLE_URL_ES (the
// two servers), TG_CONSOLE_ADMIN_KEY and TG_CONSOLE_PERSON_KEY (a personal key of Pablo
// Ruiz's, invoices:read and clients:read).

import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { createServer } from 'node:http';
import { dirname, join, resolve } from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';

import {
  assertFitsWidth, cell, launchChromium, overflowingBoxes, required, submit, watchedContext,
} from './browser.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const REPO = resolve(HERE, '..', '..');
const BASE = required('TG_CONSOLE_URL');
const BASE_ES = required('TG_CONSOLE_URL_ES');
const ADMIN_KEY = required('TG_CONSOLE_ADMIN_KEY');
const PERSON_KEY = required('TG_CONSOLE_PERSON_KEY');
const SHOTS = join(REPO, 'target', 'console-screenshots');

/** The person run.sh made a key for, and the application of this test. */
const PERSON = 'Pablo Ruiz';
const APP = 'Claude (browser test)';
const SCOPES = ['invoices:read', 'clients:read'];

// ---- the application's side ---------------------------------------------------------------

/** The redirect target: a page on 127.0.0.1 that says it got the answer. */
let callback;
let callbackUrl;
let browser;
before(async () => {
  mkdirSync(SHOTS, { recursive: true });
  callback = createServer((request, response) => {
    response.writeHead(200, { 'Content-Type': 'text/html; charset=utf-8' });
    response.end('<!doctype html><title>callback</title><p id="done">signed in</p>');
  });
  await new Promise((done) => callback.listen(0, '127.0.0.1', done));
  callbackUrl = `http://127.0.0.1:${callback.address().port}/callback`;
  browser = await launchChromium();
});
after(async () => {
  await browser?.close();
  await new Promise((done) => (callback ? callback.close(done) : done()));
});

/** Registers the application at `base` (RFC 7591): its client id. */
async function register(base) {
  const response = await fetch(`${base}/oauth/register`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({
      client_name: APP, redirect_uris: [callbackUrl], token_endpoint_auth_method: 'none',
      grant_types: ['authorization_code', 'refresh_token'],
    }),
  });
  const body = await response.json();
  assert.equal(response.status, 201, JSON.stringify(body));
  return body.client_id;
}

/** A PKCE pair (S256): `{ verifier, challenge }`. */
function pkce() {
  const verifier = randomBytes(32).toString('base64url');
  return { verifier, challenge: createHash('sha256').update(verifier).digest('base64url') };
}

/** The authorization request's URL at `base` for `client`. */
function authorizeUrl(base, client, challenge, state) {
  const query = new URLSearchParams({
    response_type: 'code', client_id: client, redirect_uri: callbackUrl,
    code_challenge: challenge, code_challenge_method: 'S256', state,
    scope: SCOPES.join(' '), resource: `${base}/mcp`,
  });
  return `${base}/oauth/authorize?${query}`;
}

/** The token endpoint's answer to a code exchange. */
async function exchange(base, client, code, verifier) {
  const response = await fetch(`${base}/oauth/token`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({
      grant_type: 'authorization_code', code, redirect_uri: callbackUrl,
      code_verifier: verifier, client_id: client,
    }),
  });
  return { status: response.status, body: await response.json() };
}

/** One stateless `tools/call` of `search_invoices` with `token`: the answer's body. */
async function searchInvoices(token) {
  const response = await fetch(`${BASE}/mcp`, {
    method: 'POST',
    headers: {
      'Content-Type': 'application/json', Accept: 'application/json, text/event-stream',
      'MCP-Protocol-Version': '2026-07-28', 'Mcp-Method': 'tools/call',
      'Mcp-Name': 'search_invoices', Authorization: `Bearer ${token}`,
    },
    body: JSON.stringify({
      jsonrpc: '2.0', id: 1, method: 'tools/call',
      params: {
        name: 'search_invoices', arguments: {},
        _meta: {
          'io.modelcontextprotocol/protocolVersion': '2026-07-28',
          'io.modelcontextprotocol/clientCapabilities': {},
          'io.modelcontextprotocol/clientInfo': { name: 'tollgate-console-tests', version: '0' },
        },
      },
    }),
    signal: AbortSignal.timeout(10_000),
  });
  return response.json();
}

// ---- the browser --------------------------------------------------------------------------



async function texts(page, selector) {
  return page.$$eval(selector, (all) => all.map((e) => e.textContent.trim()));
}

/**
 * Walks a person through the front door at `base` up to the consent page, checking what
 * each page shows in its language: the page, the client id, the PKCE verifier.
 */
async function toConsent(context, base, words, state) {
  const client = await register(base);
  const { verifier, challenge } = pkce();
  const page = await context.newPage();
  const answer = await page.goto(authorizeUrl(base, client, challenge, state));
  assert.equal(answer.status(), 200);
  assert.equal(await page.getAttribute('html', 'lang'), words.lang);
  assert.equal((await page.textContent('h1')).trim(), words.signIn);
  assert.equal((await page.textContent('#client')).trim(), APP);
  assert.equal(await page.getAttribute('#key', 'type'), 'password');
  await page.screenshot({ path: join(SHOTS, `oauth-sign-in-${words.lang}.png`), fullPage: true });
  await page.fill('#sign-in #key', PERSON_KEY);
  const consent = await submit(page, '#sign-in [type=submit]');
  assert.equal(consent.status(), 200);
  assert.equal((await page.textContent('h1')).trim(), words.consent);
  assert.equal((await page.textContent('#client')).trim(), APP);
  assert.equal((await page.textContent('#person')).trim(), PERSON);
  assert.equal((await page.textContent('#client-id')).trim(), client);
  assert.equal((await page.textContent('#redirect-host')).trim(), '127.0.0.1');
  assert.deepEqual((await texts(page, '#granted li')).sort(), [...SCOPES].sort());
  assert.equal(await page.locator('#not-held').count(), 0, 'the person holds every scope asked');
  // Every redirect of the application is on this computer: the person is warned.
  assert.ok((await page.textContent('#loopback-warning')).trim().length > 0);
  assert.equal((await page.textContent('#allow')).trim(), words.allow);
  await page.screenshot({ path: join(SHOTS, `oauth-consent-${words.lang}.png`), fullPage: true });
  return { page, client, verifier };
}

/** The fields of the redirect the browser landed on. */
function landedOn(page) {
  const url = new URL(page.url());
  assert.equal(`${url.origin}${url.pathname}`, callbackUrl);
  return url.searchParams;
}

/** The application's access token, shared with the Grants page's tests. */
let accessToken;

test('front door: a person signs in with a personal key, reads what the application asks, allows it, and lands on its redirect with a code', async () => {
  const { context, violations } = await watchedContext(browser);
  try {
    const words = { lang: 'en', signIn: 'Sign in', consent: 'Allow access?', allow: 'Allow' };
    const { page, client, verifier } = await toConsent(context, BASE, words, 'st-en');
    await submit(page, '#allow');
    const fields = landedOn(page);
    assert.equal(fields.get('state'), 'st-en');
    assert.equal(fields.get('iss'), BASE);
    assert.equal(fields.get('error'), null);
    const code = fields.get('code');
    assert.ok(code, 'a code');
    assert.equal((await page.textContent('#done')).trim(), 'signed in');

    const tokens = await exchange(BASE, client, code, verifier);
    assert.equal(tokens.status, 200, JSON.stringify(tokens.body));
    assert.equal(tokens.body.scope.split(' ').sort().join(' '), [...SCOPES].sort().join(' '));
    accessToken = tokens.body.access_token;
    assert.match(accessToken, /^tg_at_/);
    const listed = await searchInvoices(accessToken);
    assert.equal(listed.result?.isError, false, JSON.stringify(listed));
    assert.deepEqual(violations, []);
  } finally {
    await context.close();
  }
});

test('front door: the same pages in Spanish, where the person denies and the application hears access_denied', async () => {
  const { context, violations } = await watchedContext(browser);
  try {
    const words = { lang: 'es', signIn: 'Iniciar sesión', consent: '¿Permitir el acceso?', allow: 'Permitir' };
    const { page } = await toConsent(context, BASE_ES, words, 'st-es');
    assert.equal((await page.textContent('#deny')).trim(), 'Denegar');
    await submit(page, '#deny');
    const fields = landedOn(page);
    assert.equal(fields.get('error'), 'access_denied');
    assert.equal(fields.get('state'), 'st-es');
    assert.equal(fields.get('iss'), BASE_ES);
    assert.equal(fields.get('code'), null);
    assert.deepEqual(violations, []);
  } finally {
    await context.close();
  }
});

// ---- the operator's Grants page -----------------------------------------------------------

async function grantsPage(context) {
  const page = await context.newPage();
  await page.goto(`${BASE}/console/sign-in`);
  await page.fill('#sign-in #key', ADMIN_KEY);
  await submit(page, '#sign-in [type=submit]');
  await submit(page, '#nav a[href="/console/grants"]');
  assert.equal(new URL(page.url()).pathname, '/console/grants');
  return page;
}

/** The row of the grant of PERSON to APP, found as the operator finds it: by the names. */
function grantRow(page) {
  return page.locator('#grants tbody tr')
    .filter({ has: page.locator('th.person', { hasText: PERSON }) })
    .filter({ has: page.locator('td.client', { hasText: APP }) });
}



test('grants: the operator finds the grant, revokes it through the confirmation, sees it revoked and audited, and its token is refused', async () => {
  assert.ok(accessToken, 'the front door test made a grant');
  const { context, violations } = await watchedContext(browser);
  try {
    const page = await grantsPage(context);
    assert.equal(await page.getAttribute('#nav a[aria-current=page]', 'href'), '/console/grants');
    const row = grantRow(page);
    assert.equal(await row.count(), 1);
    const clientId = await row.locator('.client-name').getAttribute('title');
    assert.match(clientId, /^tgc_[0-9a-f]{32}$/);
    assert.deepEqual((await row.locator('td.scopes code').allTextContents()).sort(), [...SCOPES].sort());
    assert.equal(await cell(row, 'state'), 'standing');
    assert.match(await cell(row, 'created'), /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
    assert.match(await cell(row, 'last-used'), /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
    // The application registered itself: it is listed with its redirect and no secret.
    const registered = page.locator(`#registered tr#client-${clientId}`);
    assert.equal(await registered.count(), 1);
    assert.equal(await cell(registered, 'redirects'), callbackUrl);
    assert.equal(await cell(registered, 'auth-method'), 'none');
    await page.screenshot({ path: join(SHOTS, 'grants.png'), fullPage: true });
    assert.deepEqual(await overflowingBoxes(page), []);

    await submit(page, `#grants tbody tr:has(th.person:has-text("${PERSON}")):has(td.client:has-text("${APP}")) a.revoke`);
    assert.match(new URL(page.url()).pathname, /^\/console\/grants\/g_[0-9a-f]{32}\/revoke$/);
    assert.equal((await page.textContent('#confirm p')).trim().split('?')[0],
      `Revoke the grant of ${PERSON} to ${APP}`);
    await page.screenshot({ path: join(SHOTS, 'grants-revoke.png'), fullPage: true });
    const done = await submit(page, '#confirm-button');
    assert.equal(done.status(), 200);
    assert.equal(new URL(page.url()).pathname, '/console/grants');
    const revoked = grantRow(page);
    assert.match(await cell(revoked, 'state'), /^revoked since \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
    assert.equal(await revoked.locator('a.revoke').count(), 0);

    await page.goto(`${BASE}/console/audit?tool=console:revoke_grant`);
    assert.equal(await page.locator('#audit .audit-row').count(), 1);

    const refused = await searchInvoices(accessToken);
    assert.equal(refused.error?.data?.code, 'invalid_token', JSON.stringify(refused));
    assert.equal(refused.error.data.details?.reason, 'revoked', JSON.stringify(refused));
    assert.deepEqual(violations, []);
  } finally {
    await context.close();
  }
});

test('grants: at 320 px the page does not scroll sideways, nor do its tables', async () => {
  const { context, violations } = await watchedContext(browser, { viewport: { width: 320, height: 640 } });
  try {
    const page = await grantsPage(context);
    await page.screenshot({ path: join(SHOTS, 'grants-320.png'), fullPage: true });
    await assertFitsWidth(page, 320, 'the page');
    assert.deepEqual(violations, []);
  } finally {
    await context.close();
  }
});
