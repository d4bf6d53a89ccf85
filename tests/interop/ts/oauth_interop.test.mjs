// The official TypeScript SDK 2.x client (`@modelcontextprotocol/client` 2.4.0) signing a
// person in through tollgate's OAuth front door with its own OAuth client provider
// machinery: `auth()` discovers tollgate (RFC 9728, RFC 8414), registers (RFC 7591) or
// names a client metadata document, sends the person to `/oauth/authorize` with PKCE and
// `resource`, `finishAuth()` checks `iss` and exchanges the code, and a 401 makes it
// refresh. The person signs in at a real OpenID Provider nobody here wrote (the npm
// package `oidc-provider`, tests/idp/provider.mjs, with its development login and consent
// pages), and their role in the ID token becomes their tollgate scopes through
// `[auth.issuers.roles]`.
//
// The browser is a script: `fetch` with a small cookie jar, following redirects, filling
// in the provider's login and consent forms and tollgate's consent form, and stopping at
// the redirect to the client's (never dialled) loopback redirect URI.
//
// Two flows: with dynamic client registration, and with a client metadata document the
// test serves over HTTPS under a certificate authority it makes with the `openssl` command
// (tollgate trusts it through `client_documents.ca_file`). Each lists and calls tools as
// that person, is refused a tool outside their scopes (-32005 insufficient_scope), and
// then has its access token expire: the token's expiry is moved into the past in
// tollgate's database (a running server's clock cannot be moved), tollgate answers 401,
// and the SDK refreshes and calls again. The database is read with `node:sqlite`, so the
// Node that runs the provider (TG_NODE) must be Node 22 or later.
//
// Run: `TG_BIN=target/debug/tollgate TG_NODE=/path/to/node22 node --test tests/interop/ts/`
// after `npm ci` in tests/interop/ts and `npm ci --prefix tests/idp`.

import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { openSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer as createHttpsServer } from 'node:https';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';

import { Client, ProtocolError, StreamableHTTPClientTransport, UnauthorizedError } from '@modelcontextprotocol/client';
import {
  TOLLGATE,
  NODE,
  START_MS,
  cleanEnv,
  scratchDir,
  onStop,
  stopChild,
  tollgate,
  freePort,
  makeDb,
  startProvider,
  rejection,
} from './harness.mjs';

// How long the provider and tollgate may take to be ready.
// The most redirects and pages one sign-in may take in the scripted browser.
const MAX_BROWSER_STEPS = 20;

// tollgate's client at the provider, for signing people in.
const LOGIN_CLIENT = { client_id: 'tollgate-login', client_secret: 'login-secret-4f1d9a' };
// The people at the provider and their roles (in their ID tokens with the `profile` scope,
// which tollgate asks for by default); `[auth.issuers.roles]` below maps the roles.
const PEOPLE = {
  ana: { name: 'Ana Interop', roles: ['invoice-clerks'] },
  bo: { name: 'Bo Interop', roles: ['bookkeepers'] },
};
const ROLE_SCOPES = {
  'invoice-clerks': ['clients:read', 'invoices:read'],
  bookkeepers: ['invoices:read', 'invoices:write'],
};

// ---- harness ------------------------------------------------------------------------------

const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));



/** `tollgate serve` on 127.0.0.1:`port` with `config`, resolving once /healthz answers. */
async function serve(db, port, config) {
  const file = join(db.dir, 'tollgate.toml');
  writeFileSync(file, config);
  const args = ['--database', db.path, '--config', file, 'serve', '--listen', `127.0.0.1:${port}`];
  const log = join(db.dir, 'serve.log');
  const child = spawn(TOLLGATE, args, { env: cleanEnv(), stdio: ['ignore', 'ignore', openSync(log, 'w')] });
  onStop(() => {
    child.kill('SIGTERM');
    return stopChild(child);
  });
  const base = `http://127.0.0.1:${port}`;
  for (const deadline = Date.now() + START_MS; ; await sleep(50)) {
    assert.equal(child.exitCode, null, `tollgate serve exited: ${readFileSync(log, 'utf8')}`);
    assert.ok(Date.now() < deadline, `tollgate serve did not become healthy: ${readFileSync(log, 'utf8')}`);
    try {
      if ((await fetch(`${base}/healthz`)).ok) return { base, url: `${base}/mcp`, log };
    } catch {
      // not listening yet
    }
  }
}

/**
 * Runs `sql` with `params` on the SQLite database at `path` through `node:sqlite` in the
 * Node of TG_NODE (Node 22 or later): the rows of a query, or nothing for a statement
 * (`write`).
 */
function sqlite(path, sql, params = [], { write = false } = {}) {
  const script = `
    import { DatabaseSync } from 'node:sqlite';
    const [path, sql, params, write] = JSON.parse(process.argv[1]);
    const db = new DatabaseSync(path);
    db.exec('PRAGMA busy_timeout = 5000');
    const statement = db.prepare(sql);
    const rows = write ? (statement.run(...params), []) : statement.all(...params);
    db.close();
    process.stdout.write(JSON.stringify(rows));
  `;
  let out;
  try {
    const args = JSON.stringify([path, sql, params, write]);
    out = execFileSync(NODE, ['--no-warnings', '--input-type=module', '-e', script, args], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'pipe'],
    });
  } catch (error) {
    assert.fail(`reading tollgate's database needs node:sqlite (set TG_NODE to Node 22 or later): ${error.stderr ?? error}`);
  }
  return JSON.parse(out);
}

/** The lowercase hex SHA-256 of `text`: how tollgate stores its codes and tokens. */
const sha256 = (text) => createHash('sha256').update(text).digest('hex');

/**
 * A certificate authority and a certificate for 127.0.0.1 it signed, made with the
 * `openssl` command: `{ caFile, key, cert }`.
 */
function makeCertificates() {
  const dir = scratchDir('tollgate-ts-oauth-pki-');
  const run = (...args) => {
    try {
      execFileSync('openssl', args, { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] });
    } catch (error) {
      assert.fail(`openssl ${args[0]} failed (the test makes its certificates with it): ${error.stderr ?? error}`);
    }
  };
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes'];
  run('req', '-x509', ...ec, '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '2', '-subj', '/CN=tollgate interop test CA',
    '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign');
  run('req', '-new', ...ec, '-keyout', 'server.key', '-out', 'server.csr', '-subj', '/CN=127.0.0.1');
  writeFileSync(join(dir, 'server.ext'), [
    'basicConstraints=critical,CA:FALSE',
    'keyUsage=critical,digitalSignature',
    'extendedKeyUsage=serverAuth',
    'subjectAltName=IP:127.0.0.1',
    '',
  ].join('\n'));
  run('x509', '-req', '-in', 'server.csr', '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-days', '2',
    '-extfile', 'server.ext', '-out', 'server.pem');
  return {
    caFile: join(dir, 'ca.pem'),
    key: readFileSync(join(dir, 'server.key')),
    cert: readFileSync(join(dir, 'server.pem')),
  };
}

/**
 * An HTTPS server on 127.0.0.1 answering `GET /oauth/client.json` with the client metadata
 * document `documentFor(url)` (the document's own URL given) and counting the fetches.
 */
async function serveClientDocument(pki, documentFor) {
  const fetches = [];
  const server = createHttpsServer({ key: pki.key, cert: pki.cert }, (request, response) => {
    fetches.push(`${request.method} ${request.url}`);
    if (request.method !== 'GET' || request.url !== '/oauth/client.json') {
      response.writeHead(404).end();
      return;
    }
    response.writeHead(200, { 'Content-Type': 'application/json', 'Cache-Control': 'max-age=300' });
    response.end(JSON.stringify(documentFor(url)));
  });
  await new Promise((ok) => server.listen(0, '127.0.0.1', ok));
  const { port } = server.address();
  const url = `https://127.0.0.1:${port}/oauth/client.json`;
  onStop(() => new Promise((ok) => server.close(ok)));
  return { url, host: `127.0.0.1:${port}`, fetches };
}

// ---- the person's browser -------------------------------------------------------------------

/** `text` with its character references decoded (`&amp;`, `&#x2f;`, `&#47;`, …). */
function decodeHtml(text) {
  const named = { amp: '&', lt: '<', gt: '>', quot: '"', apos: "'" };
  return text.replace(/&(#x[0-9a-f]+|#[0-9]+|[a-z]+);/gi, (whole, ref) => {
    if (ref[0] !== '#') return named[ref.toLowerCase()] ?? whole;
    const hex = ref[1] === 'x' || ref[1] === 'X';
    return String.fromCodePoint(Number.parseInt(ref.slice(hex ? 2 : 1), hex ? 16 : 10));
  });
}

/** The value of the hidden field `name` in a page, `undefined` when it has none. */
function hiddenField(html, name) {
  const match = html.match(new RegExp(`name="${name}"\\s+value="([^"]*)"`));
  return match && decodeHtml(match[1]);
}

/** The text of the element whose id is `id` (its tags dropped), `undefined` without one. */
function elementText(html, id) {
  const match = html.match(new RegExp(`<([a-z0-9]+)[^>]*\\sid="${id}"[^>]*>([\\s\\S]*?)</\\1>`));
  return match && decodeHtml(match[2].replace(/<[^>]*>/g, ''));
}

/** The texts of the items of the list whose id is `id` (empty without one). */
function listItems(html, id) {
  const match = html.match(new RegExp(`<ul[^>]*\\sid="${id}"[^>]*>([\\s\\S]*?)</ul>`));
  return match ? [...match[1].matchAll(/<li>([\s\S]*?)<\/li>/g)].map((item) => decodeHtml(item[1].replace(/<[^>]*>/g, ''))) : [];
}

/**
 * A person's browser, as far as a sign-in needs one: a cookie jar (by name and path; a
 * browser does not tell ports apart either), redirects followed one by one, the provider's
 * development login and consent forms filled in as `login`, and tollgate's consent form
 * answered "allow" from its own origin. It stops at a redirect that leaves the provider and
 * tollgate (the client's redirect URI) and returns that URL; it also keeps the pages it saw.
 */
class Browser {
  constructor({ login, tollgate, provider }) {
    this.login = login;
    this.origins = new Set([new URL(tollgate).origin, new URL(provider).origin]);
    this.tollgate = new URL(tollgate).origin;
    this.cookies = new Map();
    this.pages = [];
  }

  cookieHeader(url) {
    const path = new URL(url).pathname;
    return [...this.cookies.values()]
      .filter((c) => path.startsWith(c.path))
      .map((c) => `${c.name}=${c.value}`)
      .join('; ');
  }

  keepCookies(url, response) {
    for (const line of response.headers.getSetCookie()) {
      const [pair, ...attributes] = line.split(';').map((part) => part.trim());
      const eq = pair.indexOf('=');
      const cookie = { name: pair.slice(0, eq), value: pair.slice(eq + 1), path: '/' };
      let expired = false;
      for (const attribute of attributes) {
        const [key, value = ''] = attribute.split('=');
        if (key.toLowerCase() === 'path') cookie.path = value;
        if (key.toLowerCase() === 'max-age' && Number(value) <= 0) expired = true;
        if (key.toLowerCase() === 'expires' && Date.parse(value) <= Date.now()) expired = true;
      }
      if (!cookie.path.startsWith('/')) cookie.path = new URL(url).pathname;
      const key = `${cookie.name} ${cookie.path}`;
      if (expired) this.cookies.delete(key);
      else this.cookies.set(key, cookie);
    }
  }

  async request(url, { method = 'GET', form, headers = {} } = {}) {
    const response = await fetch(url, {
      method,
      redirect: 'manual',
      headers: {
        ...headers,
        ...(form ? { 'Content-Type': 'application/x-www-form-urlencoded' } : {}),
        Cookie: this.cookieHeader(url),
      },
      body: form ? new URLSearchParams(form).toString() : undefined,
    });
    this.keepCookies(url, response);
    return response;
  }

  /** What the person does on a page at `url`: the form they send, or a failure. */
  answer(url, status, html) {
    const here = new URL(url);
    this.pages.push({ url, status, html });
    if (here.origin === this.tollgate && html.includes('action="/oauth/consent"')) {
      const request = hiddenField(html, 'request');
      const csrf = hiddenField(html, 'csrf');
      assert.ok(request && csrf, `tollgate's consent page has no request or csrf: ${html}`);
      return {
        url: new URL('/oauth/consent', here).href,
        form: { request, csrf, decision: 'allow' },
        headers: { Origin: this.tollgate },
      };
    }
    if (here.pathname.startsWith('/interaction/')) {
      const form = html.includes('name="login"')
        ? { prompt: 'login', login: this.login, password: '-' }
        : { prompt: 'consent' };
      return { url, form };
    }
    assert.fail(`the browser does not know what to do on ${url} (HTTP ${status}): ${html}`);
  }

  /** Follows `start` until the client's redirect URI; its URL. */
  async signIn(start) {
    let next = { url: String(start) };
    for (let step = 0; step < MAX_BROWSER_STEPS; step += 1) {
      const method = next.form ? 'POST' : 'GET';
      const response = await this.request(next.url, { method, form: next.form, headers: next.headers });
      if ([301, 302, 303, 307].includes(response.status)) {
        await response.arrayBuffer();
        const location = new URL(response.headers.get('location'), next.url);
        if (!this.origins.has(location.origin)) return location;
        next = { url: location.href };
        continue;
      }
      next = this.answer(next.url, response.status, await response.text());
    }
    assert.fail(`the sign-in did not come back to the client within ${MAX_BROWSER_STEPS} steps`);
  }
}

// ---- the client's side ----------------------------------------------------------------------

/**
 * An `OAuthClientProvider` kept in memory, as a host keeps one per server: its client
 * information, tokens, code verifier, state and discovery state. The authorization URL the
 * SDK sends the person to is kept for the browser.
 */
class MemoryOAuthProvider {
  constructor({ redirectUrl, clientMetadata, clientMetadataUrl }) {
    this._redirectUrl = redirectUrl;
    this._clientMetadata = clientMetadata;
    if (clientMetadataUrl) this.clientMetadataUrl = clientMetadataUrl;
    this.authorizationUrl = undefined;
    this.sentState = undefined;
    this.saved = { client: undefined, tokens: undefined, verifier: undefined, discovery: undefined };
    this.tokenSaves = [];
    this.invalidated = [];
  }

  get redirectUrl() {
    return this._redirectUrl;
  }

  get clientMetadata() {
    return this._clientMetadata;
  }

  state() {
    this.sentState = randomBytes(16).toString('base64url');
    return this.sentState;
  }

  clientInformation() {
    return this.saved.client;
  }

  saveClientInformation(info) {
    this.saved.client = info;
  }

  tokens() {
    return this.saved.tokens;
  }

  saveTokens(tokens) {
    this.saved.tokens = tokens;
    this.tokenSaves.push(tokens);
  }

  redirectToAuthorization(url) {
    this.authorizationUrl = url;
  }

  saveCodeVerifier(verifier) {
    this.saved.verifier = verifier;
  }

  codeVerifier() {
    assert.ok(this.saved.verifier, 'no code verifier was saved');
    return this.saved.verifier;
  }

  saveDiscoveryState(state) {
    this.saved.discovery = state;
  }

  discoveryState() {
    return this.saved.discovery;
  }

  invalidateCredentials(scope) {
    this.invalidated.push(scope);
    if (scope === 'all' || scope === 'client') this.saved.client = undefined;
    if (scope === 'all' || scope === 'tokens') this.saved.tokens = undefined;
    if (scope === 'all' || scope === 'verifier') this.saved.verifier = undefined;
    if (scope === 'all' || scope === 'discovery') this.saved.discovery = undefined;
  }
}

/**
 * `fetch` that notes every request the SDK makes (method, path, and the grant type of a
 * token request) before passing it on.
 */
function recordingFetch() {
  const requests = [];
  const recorded = async (input, init = {}) => {
    const url = new URL(input instanceof Request ? input.url : String(input));
    const method = init.method ?? (input instanceof Request ? input.method : 'GET');
    const body = init.body instanceof URLSearchParams ? init.body : typeof init.body === 'string' ? init.body : undefined;
    const grant = url.pathname === '/oauth/token' && body !== undefined ? new URLSearchParams(body).get('grant_type') : undefined;
    requests.push({ method, path: url.pathname, grant });
    return fetch(input, init);
  };
  return { fetch: recorded, requests };
}

/** A connected SDK client on `server` with `provider`'s tokens, its requests recorded. */
async function connect(server, provider, recorder) {
  const transport = new StreamableHTTPClientTransport(new URL(server.url), { authProvider: provider, fetch: recorder.fetch });
  const client = new Client({ name: 'tollgate-ts-oauth', version: '0.0.0' });
  await client.connect(transport);
  return client;
}


/**
 * The whole flow for the person `login` with `provider`: the first request that needs a
 * credential is refused and the SDK sends the person to sign in (its REDIRECT), the browser
 * signs them in at the identity provider and consents at tollgate, `finishAuth` exchanges
 * the code, and a new connection lists and calls tools as that person; then the access
 * token expires and the SDK refreshes. Returns what the checks after it need.
 */
async function signInAndCall(ctx, provider, login) {
  const { server, idp, db, builtIn } = ctx;
  const recorder = recordingFetch();
  const held = PEOPLE[login].roles.flatMap((role) => ROLE_SCOPES[role]);

  // 1. Unauthorized. With the front door on, tollgate opens no session on /mcp without a
  // credential: the handshake itself is answered 401 with its challenge, and the SDK then
  // discovers tollgate, gets the client's identity (registered or its document) and sends
  // the person to the authorization URL with PKCE, state and resource.
  const first = new StreamableHTTPClientTransport(new URL(server.url), { authProvider: provider, fetch: recorder.fetch });
  const anonymous = new Client({ name: 'tollgate-ts-oauth', version: '0.0.0' });
  const refused = await rejection(anonymous.connect(first));
  assert.ok(refused instanceof UnauthorizedError, `expected UnauthorizedError, got ${refused?.constructor?.name}: ${refused}`);
  const authorize = provider.authorizationUrl;
  assert.ok(authorize, 'the SDK did not send the person to sign in');
  assert.equal(`${authorize.origin}${authorize.pathname}`, `${server.base}/oauth/authorize`);
  assert.equal(authorize.searchParams.get('code_challenge_method'), 'S256');
  assert.equal(authorize.searchParams.get('resource'), server.url);
  assert.equal(authorize.searchParams.get('client_id'), provider.clientInformation().client_id);
  assert.equal(authorize.searchParams.get('state'), provider.sentState);

  // 2. The person's browser: tollgate → the provider's login and consent → tollgate's
  // consent → the client's redirect URI with code, state and iss.
  const browser = new Browser({ login, tollgate: server.base, provider: idp.issuer });
  const back = await browser.signIn(authorize);
  assert.equal(`${back.origin}${back.pathname}`, provider.redirectUrl);
  assert.equal(back.searchParams.get('error'), null, back.href);
  assert.equal(back.searchParams.get('state'), provider.sentState);
  assert.equal(back.searchParams.get('iss'), server.base);
  // The consent page names the person, the application and its id, and what it gets.
  const consent = browser.pages.find((page) => page.html.includes('action="/oauth/consent"'));
  assert.ok(consent, 'tollgate showed no consent page');
  assert.equal(elementText(consent.html, 'person'), PEOPLE[login].name);
  assert.equal(elementText(consent.html, 'client'), provider.clientMetadata.client_name);
  assert.equal(elementText(consent.html, 'client-id'), provider.clientInformation().client_id);
  assert.deepEqual(listItems(consent.html, 'granted').sort(), [...held].sort());

  // 3. The code exchanged by the SDK (it checks iss against the issuer it discovered).
  await first.finishAuth(back.searchParams);
  await anonymous.close();
  const tokens = provider.tokens();
  assert.match(tokens.access_token, /^tg_at_/);
  assert.match(tokens.refresh_token, /^tg_rt_/);
  assert.equal(tokens.token_type.toLowerCase(), 'bearer');
  assert.deepEqual(tokens.scope.split(' ').sort(), [...held].sort());

  // 4. Tools as the person, with the person's scopes.
  const client = await connect(server, provider, recorder);
  try {
    const names = new Set((await client.listTools()).tools.map((t) => t.name));
    const listed = [...names].filter((name) => builtIn.has(name)).sort();
    const theirs = [...builtIn].filter(([, scope]) => held.includes(scope)).map(([name]) => name).sort();
    assert.deepEqual(listed, theirs);
    const result = await client.callTool({ name: 'search_invoices', arguments: {} });
    assert.equal(result.isError, false, JSON.stringify(result));

    const error = await rejection(client.callTool({ name: 'create_client', arguments: { name: 'Refused Co' } }));
    assert.ok(error instanceof ProtocolError, `expected ProtocolError, got ${error?.constructor?.name}: ${error}`);
    assert.equal(error.code, -32005);
    assert.equal(error.data.code, 'insufficient_scope');
    assert.equal(error.data.required_scope, 'clients:write');
    assert.deepEqual([...error.data.provided_scopes].sort(), [...held].sort());

    // 5. The access token expires; tollgate answers 401, the SDK refreshes (a rotated
    // pair) and the call goes through with the new access token.
    const before = provider.tokens();
    const expire = "UPDATE oauth_tokens SET expires_at = created_at WHERE token_hash = ? AND kind = 'access'";
    sqlite(db.path, expire, [sha256(before.access_token)], { write: true });
    const refreshesBefore = recorder.requests.filter((r) => r.grant === 'refresh_token').length;
    const again = await client.callTool({ name: 'search_invoices', arguments: {} });
    assert.equal(again.isError, false, JSON.stringify(again));
    const refreshed = provider.tokens();
    assert.equal(recorder.requests.filter((r) => r.grant === 'refresh_token').length, refreshesBefore + 1);
    assert.notEqual(refreshed.access_token, before.access_token);
    assert.notEqual(refreshed.refresh_token, before.refresh_token);
    assert.match(refreshed.access_token, /^tg_at_/);
    assert.deepEqual(refreshed.scope.split(' ').sort(), [...held].sort());
    const [row] = sqlite(db.path, "SELECT used_at FROM oauth_tokens WHERE token_hash = ? AND kind = 'refresh'", [
      sha256(before.refresh_token),
    ]);
    assert.ok(row?.used_at, 'the first refresh token was spent by the refresh');
  } finally {
    await client.close();
  }
  const log = readFileSync(server.log, 'utf8');
  for (const secret of provider.tokenSaves.flatMap((t) => [t.access_token, t.refresh_token])) {
    assert.ok(!log.includes(secret), 'a token reached the log');
  }
  assert.deepEqual(provider.invalidated, [], 'the SDK discarded credentials');
  return { recorder, browser, consent };
}

// ---- the tests ------------------------------------------------------------------------------

describe("TypeScript SDK 2.x's OAuth client provider through tollgate's front door", { timeout: 180_000 }, () => {
  const ctx = {};
  let document;
  before(async () => {
    const pki = makeCertificates();
    const port = await freePort();
    const base = `http://127.0.0.1:${port}`;
    ctx.idp = await startProvider([{ ...LOGIN_CLIENT, redirect_uris: [`${base}/oauth/callback`] }], PEOPLE);
    // What the client of the second test publishes about itself.
    ctx.documentRedirect = `http://127.0.0.1:${await freePort()}/callback`;
    document = await serveClientDocument(pki, (url) => ({
      client_id: url,
      client_name: 'Interop Agent (metadata document)',
      redirect_uris: [ctx.documentRedirect],
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      token_endpoint_auth_method: 'none',
    }));
    ctx.db = makeDb('tollgate-ts-oauth-');
    writeFileSync(join(ctx.db.dir, 'login.secret'), LOGIN_CLIENT.client_secret, { mode: 0o600 });
    const roles = Object.entries(ROLE_SCOPES).map(([role, scopes]) => `"${role}" = ${JSON.stringify(scopes)}`);
    const config = [
      '[oauth_server]',
      'enabled = true',
      '[oauth_server.client_documents]',
      `allow_hosts = ["${document.host}"]`,
      `ca_file = ${JSON.stringify(pki.caFile)}`,
      '',
      '[[auth.issuers]]',
      'name = "corp"',
      `issuer = "${ctx.idp.issuer}"`,
      `audience = "${base}/mcp"`,
      '[auth.issuers.roles]',
      ...roles,
      '[auth.issuers.login]',
      `client_id = "${LOGIN_CLIENT.client_id}"`,
      `client_secret_file = ${JSON.stringify(join(ctx.db.dir, 'login.secret'))}`,
      '',
    ].join('\n');
    ctx.server = await serve(ctx.db, port, config);
    // Each built-in tool's scope.
    ctx.builtIn = new Map(JSON.parse(tollgate(ctx.db, 'tools', '--json')).tools.map((t) => [t.name, t.scope]));
  });

  const registrations = () => sqlite(ctx.db.path, 'SELECT client_id, client_name FROM oauth_registrations ORDER BY created_at');

  test('registers itself (RFC 7591), signs Ana in at the provider, calls as Ana, refreshes', async () => {
    const redirectUrl = `http://127.0.0.1:${await freePort()}/callback`;
    const provider = new MemoryOAuthProvider({
      redirectUrl,
      clientMetadata: {
        client_name: 'Interop Agent (registered)',
        redirect_uris: [redirectUrl],
        token_endpoint_auth_method: 'none',
      },
    });
    const known = registrations().length;
    const { recorder } = await signInAndCall(ctx, provider, 'ana');

    assert.equal(recorder.requests.filter((r) => r.path === '/oauth/register').length, 1);
    const registered = registrations();
    assert.equal(registered.length, known + 1);
    const clientId = provider.clientInformation().client_id;
    assert.deepEqual(registered.at(-1), { client_id: clientId, client_name: 'Interop Agent (registered)' });
    // The consent is Ana's, a user of the identity provider, for this client and her scopes.
    const consents = 'SELECT principal_id, principal_label, scopes FROM oauth_grants WHERE client_id = ?';
    const grants = sqlite(ctx.db.path, consents, [clientId]);
    assert.equal(grants.length, 1);
    assert.match(grants[0].principal_id, /^u/);
    assert.equal(grants[0].principal_label, PEOPLE.ana.name);
    assert.deepEqual(JSON.parse(grants[0].scopes).sort(), ['clients:read', 'invoices:read']);
  });

  test('names its client metadata document (HTTPS), registers nothing, calls as Bo, refreshes', async () => {
    const provider = new MemoryOAuthProvider({
      redirectUrl: ctx.documentRedirect,
      clientMetadataUrl: document.url,
      clientMetadata: {
        client_name: 'Interop Agent (metadata document)',
        redirect_uris: [ctx.documentRedirect],
        token_endpoint_auth_method: 'none',
      },
    });
    const known = registrations();
    const { recorder } = await signInAndCall(ctx, provider, 'bo');

    assert.equal(provider.clientInformation().client_id, document.url);
    assert.equal(recorder.requests.filter((r) => r.path === '/oauth/register').length, 0);
    assert.deepEqual(registrations(), known, 'no client was registered');
    assert.ok(document.fetches.includes('GET /oauth/client.json'), `tollgate never fetched the document: ${document.fetches}`);
    const grants = sqlite(ctx.db.path, 'SELECT principal_label, scopes FROM oauth_grants WHERE client_id = ?', [document.url]);
    assert.deepEqual(grants.map((g) => [g.principal_label, JSON.parse(g.scopes).sort()]), [
      [PEOPLE.bo.name, ['invoices:read', 'invoices:write']],
    ]);
  });
});
