// A real OpenID Provider (the `oidc-provider` package) on 127.0.0.1 for the black-box tests
// of tollgate as a resource server. tests/idp.rs starts it; README.md beside this file says
// how to run it by hand.
//
//   node provider.mjs serve CONFIG.json          run the provider CONFIG.json describes
//   node provider.mjs newkeys FILE [RS256|ES256] write a fresh private signing key set (JWKS)
//
// `serve` prints one JSON line on stdout once it listens (the issuer, its port, its endpoints
// and the key ids it signs with) and exits when its standard input closes, so a test that dies
// leaves nothing running. Its state (tokens, grants) lives in memory: a restart forgets it.

import { randomBytes, randomUUID } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';

import * as jose from 'jose';

const SIGNING_ALGS = ['RS256', 'ES256'];

async function main(argv) {
  const [mode, ...args] = argv;
  if (mode === 'newkeys' && args.length >= 1 && args.length <= 2) {
    await writeNewKeys(args[0], args[1] ?? 'RS256');
  } else if (mode === 'serve' && args.length === 1) {
    await serve(JSON.parse(readFileSync(args[0], 'utf8')));
  } else {
    process.stderr.write(
      'usage: node provider.mjs serve CONFIG.json | newkeys FILE [RS256|ES256]\n',
    );
    process.exit(2);
  }
}

// A JWKS of one private signing key for `alg`, with a fresh random `kid`.
async function writeNewKeys(file, alg) {
  if (!SIGNING_ALGS.includes(alg)) {
    throw new Error(`unsupported signing algorithm ${alg} (one of ${SIGNING_ALGS.join(', ')})`);
  }
  const { privateKey } = await jose.generateKeyPair(alg, { extractable: true });
  const jwk = await jose.exportJWK(privateKey);
  const key = { ...jwk, kid: randomUUID(), alg, use: 'sig' };
  writeFileSync(file, `${JSON.stringify({ keys: [key] }, null, 2)}\n`, { mode: 0o600 });
}

async function serve(config) {
  const jwks = JSON.parse(readFileSync(config.keys, 'utf8'));
  const server = createServer();
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(config.port ?? 0, '127.0.0.1', resolve);
  });
  const { port } = server.address();
  const issuer = `http://127.0.0.1:${port}`;
  // Loaded here only: the package warns on import (about the Node version), which the
  // `newkeys` mode has no use for.
  const { default: Provider } = await import('oidc-provider');
  const provider = new Provider(issuer, providerConfiguration(config, jwks));
  server.on('request', provider.callback());

  process.stdin.on('end', () => process.exit(0));
  process.stdin.on('close', () => process.exit(0));
  process.stdin.resume();

  const discovery = `${issuer}/.well-known/openid-configuration`;
  const metadata = await (await fetch(discovery)).json();
  process.stdout.write(`${JSON.stringify({
    issuer,
    port,
    discovery,
    jwks_uri: metadata.jwks_uri,
    token_endpoint: metadata.token_endpoint,
    introspection_endpoint: metadata.introspection_endpoint,
    revocation_endpoint: metadata.revocation_endpoint,
    kids: jwks.keys.map((key) => key.kid),
  })}\n`);
}

// The clients of the configuration by id, each with its token settings.
function clientsById(config) {
  return new Map(config.clients.map((client) => [client.client_id, client]));
}

function providerConfiguration(config, jwks) {
  const clients = clientsById(config);
  const signingAlg = jwks.keys[0].alg ?? 'RS256';
  return {
    jwks,
    clients: config.clients.map(clientMetadata),
    clientDefaults: { id_token_signed_response_alg: signingAlg },
    cookies: { keys: [randomBytes(32).toString('base64url')] },
    scopes: ['openid', 'offline_access', 'profile', 'email'],
    // The people who sign in (devInteractions takes any login): their claims come from the
    // configuration's `accounts` (login -> claims such as name and roles), and go into the
    // ID token of the code flow too (not only the userinfo endpoint).
    findAccount: async (_ctx, id) => ({
      accountId: id,
      claims: async () => ({ sub: id, ...(config.accounts?.[id] ?? {}) }),
    }),
    claims: { openid: ['sub'], profile: ['name', 'roles', 'groups'], email: ['email'] },
    conformIdTokenClaims: false,
    ttl: {
      AccessToken: (_ctx, token) => token.resourceServer?.accessTokenTTL ?? 600,
      AuthorizationCode: 60,
      ClientCredentials: (_ctx, token) => token.resourceServer?.accessTokenTTL ?? 600,
      Grant: 3600,
      IdToken: 600,
      Interaction: 600,
      RefreshToken: 3600,
      Session: 3600,
    },
    features: {
      clientCredentials: { enabled: true },
      introspection: { enabled: true },
      revocation: {
        enabled: true,
        // The introspecting client may revoke any token, so a test need not know which
        // client a token belongs to.
        allowedPolicy: async () => true,
      },
      devInteractions: { enabled: true },
      resourceIndicators: {
        enabled: true,
        defaultResource: async () => undefined,
        useGrantedResource: async () => true,
        getResourceServerInfo: async (_ctx, resource, client) =>
          resourceServerInfo(clients.get(client.clientId), resource),
      },
    },
    extraTokenClaims: async (_ctx, token) => extraClaims(clients.get(token.clientId)),
    formats: {
      customizers: {
        jwt: async (_ctx, token, jwt) => customizeJwt(clients.get(token.clientId), jwt),
      },
    },
  };
}

// oidc-provider's metadata for one configured client: client credentials always, the
// authorization code flow (with PKCE) as well when it has redirect URIs.
function clientMetadata(client) {
  const interactive = (client.redirect_uris ?? []).length > 0;
  return {
    client_id: client.client_id,
    client_secret: client.client_secret,
    token_endpoint_auth_method: client.auth_method ?? 'client_secret_basic',
    grant_types: interactive
      ? ['client_credentials', 'authorization_code', 'refresh_token']
      : ['client_credentials'],
    response_types: interactive ? ['code'] : [],
    redirect_uris: client.redirect_uris ?? [],
  };
}

// What a token for `resource` looks like: its audience is the resource, its scopes those
// of the client that were requested, its format the client's.
function resourceServerInfo(client, resource) {
  return {
    audience: resource,
    scope: (client?.scopes ?? []).join(' '),
    accessTokenFormat: client?.format ?? 'jwt',
    ...(client?.ttl_secs ? { accessTokenTTL: client.ttl_secs } : {}),
  };
}

// The claims a client's tokens carry beside the standard ones (for an opaque token, what
// introspection answers): its roles, groups and any extra claims, and its subject (a client
// credentials token has no user; oidc-provider's JWTs name the client, its introspection
// names nobody).
function extraClaims(client) {
  if (!client) return undefined;
  return {
    ...(client.claims ?? {}),
    ...(client.roles ? { roles: client.roles } : {}),
    ...(client.groups ? { groups: client.groups } : {}),
    sub: client.subject ?? client.client_id,
  };
}

// A JWT's subject is the client's configured one, and its times are shifted into the past
// (positive `time_shift_secs`: an expired token when past its lifetime) or the future
// (negative: a token not valid yet, with `nbf`).
function customizeJwt(client, jwt) {
  if (!client) return;
  jwt.payload.sub = client.subject ?? client.client_id;
  const shift = client.time_shift_secs ?? 0;
  if (shift !== 0) {
    jwt.payload.iat -= shift;
    jwt.payload.exp -= shift;
    jwt.payload.nbf = jwt.payload.iat;
  }
}

main(process.argv.slice(2)).catch((error) => {
  process.stderr.write(`${error.stack ?? error}\n`);
  process.exit(1);
});
