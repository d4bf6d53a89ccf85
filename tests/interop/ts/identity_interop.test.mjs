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
import { spawn } from 'node:child_process';
import { openSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { McpError } from '@modelcontextprotocol/sdk/types.js';
import {
  TOLLGATE,
  START_MS,
  cleanEnv,
  onStop,
  stopChild,
  tollgate,
  freePort,
  makeDb,
  startProvider,
  rejection,
} from './harness.mjs';

const SIMPLE_TEXT = 'This is a simple text response for testing.';
// The resource the token is asked for, hence its audience; never dialled.
const AUDIENCE = 'https://tollgate.interop.test/mcp';
// How long the provider and tollgate may take to be ready.

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

const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));


/** `tollgate serve --conformance-pack` with `config`, resolving once /healthz answers. */
async function serve(db, config) {
  const port = await freePort();
  const file = join(db.dir, 'tollgate.toml');
  writeFileSync(file, config);
  const args = ['--database', db.path, '--config', file, 'serve', '--listen', `127.0.0.1:${port}`, '--conformance-pack'];
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


// ---- the test ------------------------------------------------------------------------------

describe("TypeScript SDK 1.32.2 over HTTP with the identity provider's token", { timeout: 120_000 }, () => {
  let provider;
  let server;
  let builtIn;
  before(async () => {
    provider = await startProvider([AGENT]);
    const db = makeDb('tollgate-ts-identity-');
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
