// Page weight and first render of the console (run by tests/bench/console-weight.sh, which
// starts the server and exports CONSOLE_*): seeds TOKENS tokens for one user through the API
// (concurrently, as the operator), then in headless Chromium, signed in, loads each measured
// page LOADS times with the cache off (a first visit: every asset comes over the wire) and
// takes the median of
//   bytes on the wire (headers and body, from the DevTools protocol) of the HTML, the CSS,
//   the JS and in all; time to first byte, DOMContentLoaded and first contentful paint (the
//   page's performance API, from the navigation's start).
// /console/sign-in is the baseline, measured in the same run, loads interleaved, so the
// figures read as ratios. Prints a Markdown table.
//
// The browser signs in through the console's sign-in form, as the tests do.
//
//   node tests/bench/console-weight.mjs [loads] [tokens]      (default 10 loads, 1000 tokens)
import { randomUUID } from 'node:crypto';
import { gzipSync } from 'node:zlib';
import { env, apiOk, browser, signIn, consoleUrl, until } from '../console/lib.mjs';

const LOADS = Number(process.argv[2] ?? 10);
const TOKENS = Number(process.argv[3] ?? 1000);
const CONCURRENCY = 32;
/** Every Content-Encoding the measured responses came with ('none' for none). */
const encodings = new Set();

/** TOKENS tokens of a new user of the organisation, issued CONCURRENCY at a time. */
async function seed() {
  const started = Date.now();
  const user = (await apiOk('POST', `/v1/organisations/${env.org}/users`,
    { email: `seeded-${randomUUID().slice(0, 8)}@console.test` })).body.user.id;
  let next = 0;
  const worker = async () => {
    while (next < TOKENS) {
      const n = next++;
      await apiOk('POST', `/v1/organisations/${env.org}/users/${user}/tokens`, {
        name: `seed-${String(n).padStart(4, '0')}`, scopes: ['activity:read'], workspaceIds: [env.ws],
      });
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  return (Date.now() - started) / 1000;
}

const median = (values) => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
};

/** One cold load of `url` in `page`: bytes by kind and timings. */
async function measure(page, cdp, url) {
  const requests = new Map();
  // The browser's own /favicon.ico (the console has none: a 404) is not the page's.
  const onResponse = (e) => {
    if (e.response.url.endsWith('/favicon.ico')) return;
    const headers = Object.fromEntries(Object.entries(e.response.headers).map(([k, v]) => [k.toLowerCase(), v]));
    encodings.add(headers['content-encoding'] || 'none');
    requests.set(e.requestId, { type: e.type, url: e.response.url, status: e.response.status });
  };
  const onFinished = (e) => { const r = requests.get(e.requestId); if (r) { r.bytes = e.encodedDataLength; r.id = e.requestId; } };
  cdp.on('Network.responseReceived', onResponse);
  cdp.on('Network.loadingFinished', onFinished);
  try {
    const response = await page.goto(url, { waitUntil: 'load' });
    if (response.status() !== 200) throw new Error(`${url}: HTTP ${response.status()}`);
    const timing = await until('first contentful paint', () => page.evaluate(() => {
      const nav = performance.getEntriesByType('navigation')[0];
      const fcp = performance.getEntriesByName('first-contentful-paint')[0];
      if (!nav || !fcp || !nav.loadEventEnd) return null;
      return {
        ttfb: nav.responseStart - nav.startTime,
        dcl: nav.domContentLoadedEventEnd - nav.startTime,
        fcp: fcp.startTime,
        htmlBody: nav.decodedBodySize,
        rows: document.querySelectorAll('main tbody tr').length,
      };
    }), { timeout: 10_000, every: 20 });
    // Every response finished (loadingFinished follows the load event at most by a tick).
    await until('every response to finish', () => [...requests.values()].every((r) => r.bytes !== undefined),
      { timeout: 5_000, every: 10 });
    const bytes = { html: 0, css: 0, js: 0, other: 0, htmlGzip: 0 };
    for (const r of requests.values()) {
      if (r.status < 200 || r.status > 299) throw new Error(`${r.url}: HTTP ${r.status}`);
      const kind = { Document: 'html', Stylesheet: 'css', Script: 'js' }[r.type] ?? 'other';
      bytes[kind] += r.bytes;
      if (kind === 'html') {
        // What the HTML would weigh gzipped (the server sends it uncompressed).
        const { body, base64Encoded } = await cdp.send('Network.getResponseBody', { requestId: r.id });
        bytes.htmlGzip += gzipSync(Buffer.from(body, base64Encoded ? 'base64' : 'utf8'), { level: 6 }).length;
      }
    }
    bytes.total = bytes.html + bytes.css + bytes.js + bytes.other;
    return { ...bytes, ...timing };
  } finally {
    cdp.off('Network.responseReceived', onResponse);
    cdp.off('Network.loadingFinished', onFinished);
  }
}

const seconds = await seed();
console.error(`seeded ${TOKENS} tokens in ${seconds.toFixed(1)} s (${CONCURRENCY} at a time)`);

const b = await browser();
try {
  const page = await b.page();
  // Signed in through the form (before the measuring starts; an error if it is refused).
  await signIn(page, env.token);
  const cdp = await b.context.newCDPSession(page);
  await cdp.send('Network.enable');
  await cdp.send('Network.setCacheDisabled', { cacheDisabled: true });
  const pages = [
    [`/console/tokens (${TOKENS} tokens)`, consoleUrl('/console/tokens')],
    ['/console/sign-in (baseline)', `${env.url}/console/sign-in`],
  ];
  // One warm-up load of each (the server's and the browser's first-use costs), not counted.
  for (const [, url] of pages) await measure(page, cdp, url);
  const runs = pages.map(() => []);
  for (let i = 0; i < LOADS; i++) {
    // Interleaved, alternating which goes first.
    const order = i % 2 ? [1, 0] : [0, 1];
    for (const k of order) runs[k].push(await measure(page, cdp, pages[k][1]));
  }
  const keys = ['html', 'css', 'js', 'total', 'htmlBody', 'htmlGzip', 'ttfb', 'dcl', 'fcp', 'rows'];
  const med = runs.map((r) => Object.fromEntries(keys.map((k) => [k, median(r.map((m) => m[k]))])));
  const kb = (n) => (n / 1024).toFixed(1);
  const ms = (n) => n.toFixed(1);
  console.log(`Console page weight and first render: headless Chromium ${b.context.browser()?.version() ?? ''}, ` +
    `cache off, median of ${LOADS} loads each (interleaved); ${TOKENS} tokens seeded for one user; ` +
    `${(await import('node:os')).cpus().length} cores, load average ${(await import('node:os')).loadavg().map((x) => x.toFixed(2)).join(' ')}`);
  console.log();
  console.log('| page | HTML KiB | CSS KiB | JS KiB | total KiB | HTML if gzipped KiB | table rows | TTFB ms | DOMContentLoaded ms | first contentful paint ms |');
  console.log('|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
  pages.forEach(([label], k) => {
    const m = med[k];
    console.log(`| ${label} | ${kb(m.html)} | ${kb(m.css)} | ${kb(m.js)} | ${kb(m.total)} | ${kb(m.htmlGzip)} | ${m.rows} | ${ms(m.ttfb)} | ${ms(m.dcl)} | ${ms(m.fcp)} |`);
  });
  const ratio = (k) => (med[0][k] / med[1][k]).toFixed(2);
  console.log(`| ratio tokens / sign-in | ${ratio('html')} | ${ratio('css')} | – | ${ratio('total')} | ${ratio('htmlGzip')} | – | ${ratio('ttfb')} | ${ratio('dcl')} | ${ratio('fcp')} |`);
  console.log();
  console.log(`bytes: on the wire, headers included (DevTools Network.loadingFinished; Content-Encoding of the responses: ${[...encodings].join(', ')}; ` +
    `HTML body ${kb(med[0].htmlBody)} KiB on the tokens page); "if gzipped": the HTML body through gzip -6, for comparison; ` +
    'times from the navigation start (performance API); table rows: <tbody> rows on the page (the tokens page shows 50 a page)');
} finally {
  await b.close();
}
