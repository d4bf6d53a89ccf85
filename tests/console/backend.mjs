// The REST backend of the console's browser tests: the API of shop.openapi.json on the
// loopback port given as the only argument. `GET /things` and `GET /things/ok` answer 200;
// any other request is 404 in the API's own error shape. run.sh starts it before
// `tollgate serve` and stops it afterwards.

import { createServer } from 'node:http';

const port = Number(process.argv[2]);
if (!Number.isInteger(port) || port <= 0) {
  process.stderr.write('usage: node backend.mjs PORT\n');
  process.exit(2);
}

createServer((request, response) => {
  const found = request.method === 'GET' && ['/things', '/things/ok'].includes(request.url);
  const body = found
    ? { things: [{ id: 1, name: 'ok' }] }
    : { error: { code: 'E404', message: 'no such thing' } };
  response.writeHead(found ? 200 : 404, { 'Content-Type': 'application/json' });
  response.end(JSON.stringify(body));
}).listen(port, '127.0.0.1');
