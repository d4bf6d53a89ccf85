// What the TypeScript interop tests share: the binary under test, scratch directories and
// child processes cleaned up after the file's tests, `tollgate` runs with a clean
// environment, a free loopback port, a fresh database, the test OpenID Provider
// (tests/idp/provider.mjs), and a promise's rejection.

import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { copyFileSync, existsSync, mkdtempSync, openSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { after } from 'node:test';
import { fileURLToPath } from 'node:url';

const HERE = dirname(fileURLToPath(import.meta.url));
export const REPO = resolve(HERE, '..', '..', '..');
export const TOLLGATE = resolve(REPO, process.env.TG_BIN ?? 'target/debug/tollgate');
export const NODE = process.env.TG_NODE ?? 'node';
export const IDP_MODULES = resolve(process.env.TG_IDP_MODULES ?? join(REPO, 'tests', 'idp', 'node_modules'));
/** How long a process may take to start. */
export const START_MS = 30_000;

/** This process's environment without TOLLGATE_* (the server refuses unknown ones). */
export function cleanEnv() {
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

/** A scratch directory removed after the file's tests. */
export function scratchDir(prefix) {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  scratch.push(dir);
  return dir;
}

/** Runs `stop` (which may return a promise) after the file's tests, last first. */
export function onStop(stop) {
  stops.push(stop);
}

/** Waits for `child` to exit, killing it when it has not within `ms`. */
export function stopChild(child, ms = 10_000) {
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
export function tollgate(db, ...args) {
  return execFileSync(TOLLGATE, ['--database', db.path, ...args], { env: cleanEnv(), encoding: 'utf8' });
}

/** A loopback port that was free a moment ago. */
export function freePort() {
  return new Promise((ok, fail) => {
    const probe = createServer();
    probe.on('error', fail);
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address();
      probe.close(() => ok(port));
    });
  });
}

/** A fresh database made by `tollgate init --json`, in a scratch directory named `prefix…`. */
export function makeDb(prefix) {
  const dir = scratchDir(prefix);
  const db = { dir, path: join(dir, 'tollgate.db') };
  tollgate(db, 'init', '--json', '--company', 'Interop Co');
  return db;
}

/**
 * The test provider (`provider.mjs serve`) on a free loopback port with a fresh RS256 key,
 * its `clients` and `accounts` (the people who sign in and the claims of their ID tokens),
 * resolving with its ready line; it exits when its standard input closes, at the end.
 */
export async function startProvider(clients, accounts = {}) {
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
  writeFileSync(join(dir, 'config.json'), JSON.stringify({ keys: 'keys.json', port: 0, clients, accounts }));
  const log = join(dir, 'provider.log');
  const child = spawn(NODE, ['provider.mjs', 'serve', 'config.json'], {
    cwd: dir,
    stdio: ['pipe', 'pipe', openSync(log, 'w')],
  });
  // Closing its input stops it; a provider already gone must not fail the run with EPIPE.
  child.stdin.on('error', () => {});
  onStop(() => {
    child.stdin.end();
    return stopChild(child);
  });
  const lines = createInterface({ input: child.stdout });
  return new Promise((ok, fail) => {
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
}

/** What `promise` rejects with (the test fails if it resolves). */
export async function rejection(promise) {
  try {
    const value = await promise;
    assert.fail(`expected a rejection, got ${JSON.stringify(value)}`);
  } catch (error) {
    if (error instanceof assert.AssertionError) throw error;
    return error;
  }
}
