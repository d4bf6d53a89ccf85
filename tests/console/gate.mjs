// What the self-contained console tests share: each makes its own database and runs its
// own `tollgate serve` (the binary run.sh tests) on a free loopback port, with headless
// Chromium to drive the pages (launched by browser.mjs).

import { spawn } from 'node:child_process';
import { createServer } from 'node:net';

import { submit } from './browser.mjs';

/** A free loopback port. */
export function freePort() {
  return new Promise((done, fail) => {
    const server = createServer();
    server.once('error', fail);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => done(port));
    });
  });
}

/** Polls `check` every 100 ms until it resolves truthy, for at most `ms`. */
export async function until(what, check, ms = 20_000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await check().catch(() => undefined);
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`${what}: not within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** `tollgate --database DB serve --config CONFIG` on a free loopback port (no TOLLGATE_*
 * variables passed on): the process and its base URL. */
export async function serve(bin, db, config) {
  const port = await freePort();
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('TOLLGATE_')));
  const server = spawn(bin, ['--database', db, 'serve', '--listen', `127.0.0.1:${port}`, '--config', config],
    { env: { ...env, RUST_LOG: 'warn' }, stdio: ['ignore', 'ignore', 'inherit'] });
  return { server, base: `http://127.0.0.1:${port}` };
}

/** Stops a server `serve` started, waiting for it to exit. */
export async function stop(server) {
  if (!server) return;
  server.kill('SIGTERM');
  await new Promise((r) => server.once('exit', r));
}

/** Signs `page` in to the console at `base` with `key`. */
export async function signIn(page, base, key) {
  await page.goto(`${base}/console/sign-in`);
  await page.fill('#sign-in #key', key);
  await submit(page, '#sign-in [type=submit]');
}
