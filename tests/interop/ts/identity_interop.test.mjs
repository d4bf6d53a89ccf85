// The official TypeScript SDK 1.32.2 (`Client` + `StreamableHTTPClientTransport`) calling
// tools with an access token from the company's identity provider, not one tollgate issued.
//
// The provider is a real OpenID Provider nobody here wrote: tests/idp/provider.mjs runs the
// npm package `oidc-provider` on 127.0.0.1 (Node from TG_NODE, else `node`; its packages
// from TG_IDP_MODULES, else tests/idp/node_modules, installed by `npm ci --prefix tests/idp`).
// The test asks its token endpoint for a client-credentials JWT with a resource indicator
// (RFC 8707: the token's `aud` is the resource), starts `tollgate serve` with one
// `[[auth.issuers]]` table trusting the provider for that audience, and with the token in
// `requestInit.headers` the SDK lists the tools the token's role and scope map to (and no
// other), calls one (its real result), and is refused one outside them: -32005
// insufficient_scope travels with HTTP 200, so the SDK raises `McpError` with `.code` and
// `.data` intact.
//
// Run: `TG_BIN=target/debug/tollgate node --test tests/interop/ts/` after `npm ci` in
// tests/interop/ts and `npm ci --prefix tests/idp`.

import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { copyFileSync, existsSync, mkdtempSync, openSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { McpError } from '@modelcontextprotocol/sdk/types.js';

const HERE = dirname(fileURLToPath(import.meta.url));
const REPO = resolve(HERE, '..', '..', '..');
const TOLLGATE = resolve(REPO, process.env.TG_BIN ?? 'target/debug/tollgate');
const NODE = process.env.TG_NODE ?? 'node';
const IDP_MODULES = resolve(process.env.TG_IDP_MODULES ?? join(REPO, 'tests', 'idp', 'node_modules'));
const SIMPLE_TEXT = 'This is a simple text response for testing.';
// The resource the token is asked for, hence its audience; never dialled.
const AUDIENCE = 'https://tollgate.interop.test/mcp';
// How long the provider and tollgate may take to be ready.
const START_MS = 30_000;

// `agent` gets JWTs carrying the role `interop-testers` (mapped to `conformance:use` below)
// and may be granted `invoices:read`, a tollgate scope taken as it is.
const AGENT = {
  client_id: 'agent',
  client_secret: 'agent-secret-8c2b44',
  format: 'jwt',
  scopes: ['invoices:read'],
  roles: ['interop-testers'],
};

// ---- harness ------------------------------------------------------------------------------

/** This process's environment without TOLLGATE_* (the server refuses unknown ones). */
function cleanEnv() {
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('TOLLGATE_')));
  env.RUST_LOG ??= 'warn';
  return env;
}

const scratch = [];
const stops = [];
after(async () => {
  for (const stop of stops.reverse()) await stop();
  for (const dir of scratch) rmSync(dir, { recursive: true, force: true });
});

function scratchDir(prefix) {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  scratch.push(dir);
  return dir;
}

/** Waits for `child` to exit, killing it when it has not within `ms`. */
function stopChild(child, ms = 10_000) {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((ok) => {
    const killer = setTimeout(() => child.kill('SIGKILL'), ms);
    child.once('exit', () => {
      clearTimeout(killer);
      ok();
    });
  });
}

/** Runs `tollgate --database DB ARGS…` and returns stdout (throws on failure). */
function tollgate(db, ...args) {
  return execFileSync(TOLLGATE, ['--database', db.path, ...args], { env: cleanEnv(), encoding: 'utf8' });
}

/**
 * The test provider (`provider.mjs serve`) on a free loopback port with a fresh RS256 key,
 * resolving with its ready line; it exits when its standard input closes, at the end.
 */
async function startProvider(clients) {
  for (const pkg of ['oidc-provider', 'jose']) {
    assert.ok(
      existsSync(join(IDP_MODULES, pkg, 'package.json')),
      `the test OpenID Provider's npm packages are not in ${IDP_MODULES}: run \`npm ci --prefix tests/idp\``,
    );
  }
  const dir = scratchDir('tollgate-ts-idp-');
  copyFileSync(join(REPO, 'tests', 'idp', 'provider.mjs'), join(dir, 'provider.mjs'));
  symlinkSync(IDP_MODULES, join(dir, 'node_modules'));
  execFileSync(NODE, ['provider.mjs', 'newkeys', 'keys.json', 'RS256'], { cwd: dir, timeout: START_MS });
  writeFileSync(join(dir, 'config.json'), JSON.stringify({ keys: 'keys.json', port: 0, clients }));
  const log = join(dir, 'provider.log');
  const child = spawn(NODE, ['provider.mjs', 'serve', 'config.json'], {
    cwd: dir,
    stdio: ['pipe', 'pipe', openSync(log, 'w')],
  });
  // Closing its input stops it; a provider already gone must not fail the run with EPIPE.
  child.stdin.on('error', () => {});
  stops.push(() => {
    child.stdin.end();
    return stopChild(child);
  });
  const lines = createInterface({ input: child.stdout });
  const ready = await new Promise((ok, fail) => {
    const timer = setTimeout(() => fail(new Error(`the provider did not start: ${readFileSync(log, 'utf8')}`)), START_MS);
    lines.once('line', (line) => {
      clearTimeout(timer);
      ok(JSON.parse(line));
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      fail(new Error(`the provider exited with ${code}: ${readFileSync(log, 'utf8')}`));
    });
  });
  return ready;
}

/** A client-credentials access token for `client` with `scope`, on `AUDIENCE`. */
async function clientCredentialsToken(provider, client, scope) {
  const basic = Buffer.from(`${client.client_id}:${client.client_secret}`).toString('base64');
  const response = await fetch(provider.token_endpoint, {
    method: 'POST',
    headers: { Authorization: `Basic ${basic}`, 'Content-Type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ grant_type: 'client_credentials', scope, resource: AUDIENCE }),
  });
  const body = await response.json();
  assert.equal(response.status, 200, JSON.stringify(body));
  assert.equal(body.token_type.toLowerCase(), 'bearer');
  return body.access_token;
}

function freePort() {
  return new Promise((ok, fail) => {
    const probe = createServer();
    probe.on('error', fail);
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address();
      probe.close(() => ok(port));
    });
  });
}

const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));

/** A fresh database made by `tollgate init --json`. */
function makeDb() {
  const dir = scratchDir('tollgate-ts-identity-');
  const db = { dir, path: join(dir, 'tollgate.db') };
  tollgate(db, 'init', '--json', '--company', 'Interop Co');
  return db;
}

/** `tollgate serve --conformance-pack` with `config`, resolving once /healthz answers. */
async function serve(db, config) {
  const port = await freePort();
  const file = join(db.dir, 'tollgate.toml');
  writeFileSync(file, config);
  const args = ['--database', db.path, '--config', file, 'serve', '--listen', `127.0.0.1:${port}`, '--conformance-pack'];
  const log = join(db.dir, 'serve.log');
  const child = spawn(TOLLGATE, args, { env: cleanEnv(), stdio: ['ignore', 'ignore', openSync(log, 'w')] });
  stops.push(() => {
    child.kill('SIGTERM');
    return stopChild(child);
  });
  const base = `http://127.0.0.1:${port}`;
  for (const deadline = Date.now() + START_MS; ; await sleep(50)) {
    assert.equal(child.exitCode, null, `tollgate serve exited: ${readFileSync(log, 'utf8')}`);
    assert.ok(Date.now() < deadline, `tollgate serve did not become healthy: ${readFileSync(log, 'utf8')}`);
    try {
      if ((await fetch(`${base}/healthz`)).ok) return { url: `${base}/mcp`, log };
    } catch {
      // not listening yet
    }
  }
}

/** A connected SDK client sending `Authorization: Bearer <token>` on every request. */
async function connect(server, token) {
  const transport = new StreamableHTTPClientTransport(new URL(server.url), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  const client = new Client({ name: 'tollgate-ts-identity', version: '0.0.0' });
  await client.connect(transport);
  return client;
}

/** Resolves with whatever `promise` rejects with (fails if it resolves). */
async function rejection(promise) {
  try {
    const value = await promise;
    assert.fail(`expected a rejection, got ${JSON.stringify(value)}`);
  } catch (error) {
    if (error instanceof assert.AssertionError) throw error;
    return error;
  }
}

// ---- the test ------------------------------------------------------------------------------

describe("TypeScript SDK 1.32.2 over HTTP with the identity provider's token", { timeout: 120_000 }, () => {
  let provider;
  let server;
  let builtIn;
  before(async () => {
    provider = await startProvider([AGENT]);
    const db = makeDb();
    const config = [
      '[[auth.issuers]]',
      'name = "corp"',
      `issuer = "${provider.issuer}"`,
      `audience = "${AUDIENCE}"`,
      '[auth.issuers.roles]',
      '"interop-testers" = ["conformance:use"]',
      '',
    ].join('\n');
    server = await serve(db, config);
    // Each built-in tool's scope; the conformance fixtures are not among them.
    builtIn = new Map(JSON.parse(tollgate(db, 'tools', '--json')).tools.map((t) => [t.name, t.scope]));
  });

  test('lists the tools its role and scope map to, calls one, and is refused one outside them', async () => {
    const token = await clientCredentialsToken(provider, AGENT, 'invoices:read');
    assert.equal(token.split('.').length, 3, 'not a JWT');
    const client = await connect(server, token);
    try {
      const names = new Set((await client.listTools()).tools.map((t) => t.name));
      const listedBuiltIn = [...names].filter((name) => builtIn.has(name)).sort();
      const invoiceReaders = [...builtIn].filter(([, scope]) => scope === 'invoices:read').map(([name]) => name).sort();
      assert.deepEqual(listedBuiltIn, invoiceReaders);
      assert.ok(names.has('test_simple_text'), [...names].join(', '));

      const result = await client.callTool({ name: 'test_simple_text', arguments: {} });
      assert.equal(result.isError, false);
      assert.deepEqual(result.content, [{ type: 'text', text: SIMPLE_TEXT }]);

      const error = await rejection(client.callTool({ name: 'create_client', arguments: { name: 'Refused Co' } }));
      assert.ok(error instanceof McpError, `expected McpError, got ${error?.constructor?.name}: ${error}`);
      assert.equal(error.code, -32005);
      assert.equal(error.message, 'MCP error -32005: insufficient_scope');
      assert.equal(error.data.code, 'insufficient_scope');
      assert.equal(error.data.http_status, 403);
      assert.equal(error.data.required_scope, 'clients:write');
      assert.deepEqual([...error.data.provided_scopes].sort(), ['conformance:use', 'invoices:read']);
      assert.equal(typeof error.data.hint, 'string');
    } finally {
      await client.close();
    }
    assert.ok(!readFileSync(server.log, 'utf8').includes(token), 'the token reached the log');
  });
});
