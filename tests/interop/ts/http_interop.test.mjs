// Interop over Streamable HTTP with two clients nobody here wrote:
//
//   - the official TypeScript SDK 1.32.2 (`Client` + `StreamableHTTPClientTransport`, the
//     bearer token in `requestInit.headers`), and
//   - the MCP Inspector CLI 0.15.0 (the last release that runs on Node 20).
//
// Each lists tools, calls a conformance fixture tool, and meets -32001 invalid_token,
// -32005 insufficient_scope and -32006 rate_limited. The tests pin exactly what each client
// hands its caller, which is what the README's client table says:
//
//   - In the default `compatible` mode guard errors travel with HTTP 200, so the SDK raises
//     `McpError` with `.code` and `.data` intact. -32001 travels with 401 (the MCP
//     authorization spec requires it); SDK 1.x turns every non-2xx answer into a
//     `StreamableHTTPError` whose `.code` is the HTTP status and whose `.message` holds the
//     raw JSON-RPC body as text — the JSON-RPC code and `data.code` are readable only by
//     parsing that text.
//   - In `semantic` mode (-32005 → 403, -32006 → 429) the SDK loses the structure the same
//     way; that is why `compatible` is the default.
//   - Inspector 0.15.0 prints `error.message` only: "MCP error -32005: insufficient_scope"
//     (code and `data.code`, since `message` equals `data.code`, but no other `data`).
//     It has no `--header` option (an unknown option becomes a positional argument and it
//     exits with "Arguments cannot be passed to a URL-based MCP server."), so it cannot
//     send a bearer token: these tests run it against tollgate's development mode
//     (`serve --dev-credential <public id>`), where tokenless requests run as that
//     credential — charged, scoped and audited like any other.
//
// Run: `TG_BIN=target/debug/tollgate node --test tests/interop/ts/` after `npm ci` in
// tests/interop/ts (TG_BIN defaults to target/debug/tollgate under the repository root).

import assert from 'node:assert/strict';
import { execFile, execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { after, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import {
  StreamableHTTPClientTransport,
  StreamableHTTPError,
} from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { McpError } from '@modelcontextprotocol/sdk/types.js';

const HERE = dirname(fileURLToPath(import.meta.url));
const REPO = resolve(HERE, '..', '..', '..');
const TOLLGATE = resolve(REPO, process.env.TG_BIN ?? 'target/debug/tollgate');
const INSPECTOR = join(HERE, 'node_modules', '@modelcontextprotocol', 'inspector', 'cli', 'build', 'cli.js');
const SIMPLE_TEXT = 'This is a simple text response for testing.';
const POST_ERROR_PREFIX = 'Streamable HTTP error: Error POSTing to endpoint: ';

// ---- harness ------------------------------------------------------------------------------

/** This process's environment without TOLLGATE_* (the server refuses unknown ones). */
function cleanEnv() {
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('TOLLGATE_')));
  env.RUST_LOG ??= 'warn';
  return env;
}

const scratch = [];
const servers = [];
after(async () => {
  for (const server of servers) await server.stop();
  for (const dir of scratch) rmSync(dir, { recursive: true, force: true });
});

/** Runs `tollgate --database DB ARGS…` and returns stdout (throws on failure). */
function tollgate(db, ...args) {
  return execFileSync(TOLLGATE, ['--database', db.path, ...args], { env: cleanEnv(), encoding: 'utf8' });
}

/** A fresh database made by `tollgate init --json`. */
function makeDb() {
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-ts-'));
  scratch.push(dir);
  const db = { dir, path: join(dir, 'tollgate.db') };
  const printed = JSON.parse(tollgate(db, 'init', '--json', '--company', 'Interop Co'));
  return { ...db, adminKey: printed.admin_key, adminId: printed.admin_key_id };
}

/** `tollgate key create --json` → `{ id, token }`. */
function createKey(db, scopes) {
  return JSON.parse(tollgate(db, 'key', 'create', '--name', 'ts interop', '--scopes', scopes, '--json'));
}

/** A key allowed one `read` call per minute, with `scopes`. */
function oneReadPerMinuteKey(db, scopes = 'conformance:use') {
  const key = createKey(db, scopes);
  tollgate(db, 'limits', 'set', '--credential', key.id, '--category', 'read', '--per-minute', '1');
  return key;
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

/**
 * Starts `tollgate serve --listen 127.0.0.1:<free port> --conformance-pack EXTRA…`
 * (optionally with a TOML config file) and resolves once /healthz answers.
 */
async function serve(db, { extra = [], config } = {}) {
  const port = await freePort();
  const args = ['--database', db.path];
  if (config !== undefined) {
    const file = join(db.dir, `serve-${port}.toml`);
    writeFileSync(file, config);
    args.push('--config', file);
  }
  args.push('serve', '--listen', `127.0.0.1:${port}`, '--conformance-pack', ...extra);
  const log = join(db.dir, `serve-${port}.log`);
  const child = spawn(TOLLGATE, args, { env: cleanEnv(), stdio: ['ignore', 'ignore', openSync(log, 'w')] });
  let exited = null;
  child.on('exit', (code) => { exited = code; });
  const base = `http://127.0.0.1:${port}`;
  const server = {
    url: `${base}/mcp`,
    stop: async () => {
      if (exited === null) {
        child.kill('SIGTERM');
        await new Promise((ok) => child.once('exit', ok));
      }
    },
  };
  servers.push(server);
  for (const deadline = Date.now() + 20_000; ; await sleep(50)) {
    assert.equal(exited, null, `tollgate serve exited with ${exited}: ${readFileSync(log, 'utf8')}`);
    assert.ok(Date.now() < deadline, `tollgate serve did not become healthy: ${readFileSync(log, 'utf8')}`);
    try {
      if ((await fetch(`${base}/healthz`)).ok) return server;
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
  const client = new Client({ name: 'tollgate-ts-interop', version: '0.0.0' });
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

/** The structured error of an `McpError` (HTTP 200 JSON-RPC error). */
function assertMcpError(error, rpcCode, code, httpStatus) {
  assert.ok(error instanceof McpError, `expected McpError, got ${error?.constructor?.name}: ${error}`);
  assert.equal(error.code, rpcCode);
  assert.equal(error.message, `MCP error ${rpcCode}: ${code}`);
  assert.equal(error.data.code, code);
  assert.equal(error.data.http_status, httpStatus);
  assert.equal(typeof error.data.hint, 'string');
}

/**
 * A non-2xx answer: SDK 1.x throws `StreamableHTTPError` with the HTTP status as `.code`
 * and the body as text in `.message`; the JSON-RPC error is recovered by parsing that text.
 */
function assertTransportError(error, httpStatus, rpcCode, code) {
  assert.ok(error instanceof StreamableHTTPError, `expected StreamableHTTPError, got ${error?.constructor?.name}: ${error}`);
  assert.ok(!(error instanceof McpError));
  assert.equal(error.code, httpStatus);
  assert.equal(error.data, undefined);
  assert.ok(error.message.startsWith(POST_ERROR_PREFIX), error.message);
  const body = JSON.parse(error.message.slice(POST_ERROR_PREFIX.length));
  assert.equal(body.error.code, rpcCode);
  assert.equal(body.error.data.code, code);
  return body;
}

// ---- TypeScript SDK -----------------------------------------------------------------------------

describe('TypeScript SDK 1.32.2 over HTTP with a bearer token', () => {
  test('lists tools and calls one', async () => {
    const db = makeDb();
    const server = await serve(db);
    const client = await connect(server, db.adminKey);
    try {
      const { tools } = await client.listTools();
      assert.ok(tools.some((t) => t.name === 'test_simple_text'));
      const result = await client.callTool({ name: 'test_simple_text', arguments: {} });
      assert.equal(result.isError, false);
      assert.deepEqual(result.content, [{ type: 'text', text: SIMPLE_TEXT }]);
    } finally {
      await client.close();
    }
  });

  test('-32001 invalid_token arrives with 401: a transport error carrying the body as text', async () => {
    const db = makeDb();
    const server = await serve(db);
    // initialize needs no credential, so the connection opens; the first guarded request fails.
    const client = await connect(server, 'tg_live_0000000000000000_not-a-secret');
    try {
      const error = await rejection(client.listTools());
      const body = assertTransportError(error, 401, -32001, 'invalid_token');
      assert.equal(body.error.message, 'invalid_token');
      // The session survives the failed request.
      const again = await rejection(client.callTool({ name: 'test_simple_text', arguments: {} }));
      assertTransportError(again, 401, -32001, 'invalid_token');
    } finally {
      await client.close();
    }
  });

  test('-32005 insufficient_scope arrives with 200: McpError with code and data', async () => {
    const db = makeDb();
    const server = await serve(db);
    const reader = createKey(db, 'invoices:read');
    const client = await connect(server, reader.token);
    try {
      const { tools } = await client.listTools();
      assert.ok(!tools.some((t) => t.name === 'test_simple_text'));
      const error = await rejection(client.callTool({ name: 'test_simple_text', arguments: {} }));
      assertMcpError(error, -32005, 'insufficient_scope', 403);
      assert.equal(error.data.required_scope, 'conformance:use');
      assert.deepEqual(error.data.provided_scopes, ['invoices:read']);
    } finally {
      await client.close();
    }
  });

  test('-32006 rate_limited arrives with 200: McpError with retry_after in data', async () => {
    const db = makeDb();
    const server = await serve(db);
    const key = oneReadPerMinuteKey(db);
    const client = await connect(server, key.token);
    try {
      const first = await client.callTool({ name: 'test_simple_text', arguments: {} });
      assert.equal(first.content[0].text, SIMPLE_TEXT);
      const error = await rejection(client.callTool({ name: 'test_simple_text', arguments: {} }));
      assertMcpError(error, -32006, 'rate_limited', 429);
      assert.equal(error.data.retryable, true);
      assert.equal(error.data.bucket, 'read');
      assert.equal(error.data.limit, 1);
      assert.ok(Number.isInteger(error.data.retry_after) && error.data.retry_after >= 1, JSON.stringify(error.data));
    } finally {
      await client.close();
    }
  });

  test('semantic mode (403/429) loses the structure in this client', async () => {
    const db = makeDb();
    const server = await serve(db, { config: '[http]\nerror_status = "semantic"\n' });
    const reader = createKey(db, 'invoices:read');
    const limited = oneReadPerMinuteKey(db);
    const scoped = await connect(server, reader.token);
    try {
      const error = await rejection(scoped.callTool({ name: 'test_simple_text', arguments: {} }));
      assertTransportError(error, 403, -32005, 'insufficient_scope');
    } finally {
      await scoped.close();
    }
    const throttled = await connect(server, limited.token);
    try {
      await throttled.callTool({ name: 'test_simple_text', arguments: {} });
      const error = await rejection(throttled.callTool({ name: 'test_simple_text', arguments: {} }));
      const body = assertTransportError(error, 429, -32006, 'rate_limited');
      assert.ok(body.error.data.retry_after >= 1);
    } finally {
      await throttled.close();
    }
  });
});

// ---- MCP Inspector CLI ----------------------------------------------------------------------------

/** Runs the Inspector CLI against `server`; resolves with `{ code, out }` (stdout + stderr). */
function inspector(server, ...args) {
  const argv = [INSPECTOR, '--cli', server.url, '--transport', 'http', ...args];
  return new Promise((ok) => {
    execFile(process.execPath, argv, { env: cleanEnv(), timeout: 60_000 }, (error, stdout, stderr) => {
      ok({ code: error ? error.code : 0, out: `${stdout}${stderr}` });
    });
  });
}

describe('MCP Inspector CLI 0.15.0 over HTTP', () => {
  test('has no --header option, so it cannot send a bearer token', async () => {
    const db = makeDb();
    const server = await serve(db);
    const run = await inspector(server, '--method', 'tools/list', '--header', `Authorization: Bearer ${db.adminKey}`);
    assert.equal(run.code, 1);
    assert.match(run.out, /Arguments cannot be passed to a URL-based MCP server\./);
  });

  test('lists tools and calls one (development mode credential)', async () => {
    const db = makeDb();
    const server = await serve(db, { extra: ['--dev-credential', db.adminId] });
    const listed = await inspector(server, '--method', 'tools/list');
    assert.equal(listed.code, 0, listed.out);
    assert.ok(JSON.parse(listed.out).tools.some((t) => t.name === 'test_simple_text'), listed.out);
    const called = await inspector(server, '--method', 'tools/call', '--tool-name', 'test_simple_text');
    assert.equal(called.code, 0, called.out);
    assert.deepEqual(JSON.parse(called.out).content, [{ type: 'text', text: SIMPLE_TEXT }]);
  });

  test('-32001 (no credential, 401): prints the raw JSON-RPC body as text', async () => {
    const db = makeDb();
    const server = await serve(db);
    const run = await inspector(server, '--method', 'tools/list');
    assert.equal(run.code, 1);
    assert.ok(run.out.includes(`Failed to list tools: ${POST_ERROR_PREFIX}{`), run.out);
    assert.ok(run.out.includes('"code":-32001,"message":"invalid_token"'), run.out);
    assert.ok(run.out.includes('"data":{"code":"invalid_token"'), run.out);
  });

  test('-32005 and -32006 (200): prints "MCP error <code>: <data.code>"', async () => {
    const db = makeDb();
    // A key without `conformance:use` and one `read` call a minute: the first call is
    // charged and then refused for its scope (quota is taken before the scope check),
    // the second is refused by the rate limit.
    const key = oneReadPerMinuteKey(db, 'invoices:read');
    const server = await serve(db, { extra: ['--dev-credential', key.id] });
    const scope = await inspector(server, '--method', 'tools/call', '--tool-name', 'test_simple_text');
    assert.equal(scope.code, 1, scope.out);
    assert.ok(scope.out.includes('Failed to call tool test_simple_text: MCP error -32005: insufficient_scope'), scope.out);
    const limited = await inspector(server, '--method', 'tools/call', '--tool-name', 'test_simple_text');
    assert.equal(limited.code, 1, limited.out);
    assert.ok(limited.out.includes('Failed to call tool test_simple_text: MCP error -32006: rate_limited'), limited.out);
  });
});
