// The web console end to end in headless Chromium, against the server run.sh started: sign-in
// and the session cookie, issuing and revoking a token through the forms, the audit page's
// live stream, a member refused an admin page, CSRF from another origin, session fixation,
// resending a failed delivery, sign-out. A screenshot of each page goes to $CONSOLE_SHOTS.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { randomUUID } from 'node:crypto';
import { env, api, apiOk, until, browser, signIn, consoleUrl } from './lib.mjs';

const SHOTS = process.env.CONSOLE_SHOTS || join(tmpdir(), `cp-console-shots-${process.pid}`);
mkdirSync(SHOTS, { recursive: true });

let operator; // the operator's browser, signed in by the first test
let member; // { id, email, token, tokenId }
const servers = [];

/** Collects a page's script errors and CSP violations (console errors) while it is open. */
function watchErrors(page) {
  const errors = [];
  page.on('pageerror', (e) => errors.push(`pageerror: ${e.message}`));
  page.on('console', (m) => {
    // The console serves no /favicon.ico, which Chromium asks for by itself: not the page's.
    if (m.type() === 'error' && !m.location()?.url?.endsWith('/favicon.ico')) errors.push(`console: ${m.text()} (${m.location()?.url})`);
  });
  return errors;
}

async function shot(page, name) {
  await page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true });
}

async function sessionCookie(context) {
  return (await context.cookies(env.url)).find((c) => c.name === env.cookieName);
}

/** The operator's page, signed in (again, if an earlier test did not get that far). */
async function operatorPage() {
  const page = await operator.page();
  if (!(await sessionCookie(operator.context))) {
    await signIn(page, env.token);
    await page.waitForURL(/\/console\/tokens/);
  }
  return page;
}

/** GET `path` with `cookie` as the session, no redirect followed: { status, location, text }. */
async function getWithCookie(path, cookie) {
  const response = await fetch(env.url + path, {
    headers: { cookie: `${env.cookieName}=${cookie}` },
    redirect: 'manual',
  });
  return { status: response.status, location: response.headers.get('location'), text: await response.text() };
}

/** A server on loopback answering every request with `html`: its origin. */
async function serve(html, host = '127.0.0.1') {
  const server = http.createServer((req, res) => {
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
    res.end(html);
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  servers.push(server);
  return `http://${host}:${server.address().port}`;
}

/** A token of the operator's user, issued over the API: { id, token, name }. */
async function issueViaApi(name, scopes = ['activity:read']) {
  const reply = await apiOk('POST', `/v1/organisations/${env.org}/users/${env.user}/tokens`, {
    name, scopes, workspaceIds: [env.ws],
  });
  return { id: reply.body.credential.id, token: reply.body.credential.token, name, correlationId: reply.correlationId };
}

before(async () => {
  const email = `member-${randomUUID().slice(0, 8)}@console.test`;
  const created = await apiOk('POST', `/v1/organisations/${env.org}/users`, { email });
  const id = created.body.user.id;
  const issued = await apiOk('POST', `/v1/organisations/${env.org}/users/${id}/tokens`, {
    name: 'member-console', scopes: ['activity:read'], workspaceIds: [env.ws],
  });
  member = { id, email, token: issued.body.credential.token, tokenId: issued.body.credential.id };
  operator = await browser();
});

after(async () => {
  await operator?.close();
  for (const server of servers) server.close();
  console.log(`screenshots: ${SHOTS}`);
});

test('a form on a console page is accepted: Chromium sends the page\'s own Origin on a same-origin POST', async () => {
  // The console's pages are served with Referrer-Policy: same-origin, under which Chromium names
  // the page's origin in the Origin of a form POST to the same origin, and the console accepts it.
  const b = await browser();
  try {
    const page = await b.page();
    const response = await signIn(page, env.token, { check: false });
    const origin = (await response.request().allHeaders()).origin;
    const policy = (await page.request.get(`${env.url}/console/sign-in`)).headers()['referrer-policy'];
    const said = (await page.locator('.failure').innerText().catch(() => '')).replace(/\s+/g, ' ');
    assert.equal(response.status(), 303,
      `the sign-in form, posted by Chromium from the console's own sign-in page, is accepted (a 303 to the tokens page); ` +
      `got HTTP ${response.status()} "${said}" (Chromium sent Origin: ${origin}; the page's Referrer-Policy is ${policy})`);
    assert.equal(origin, new URL(env.url).origin,
      'Chromium sends the sign-in page\'s own origin as the Origin of its form POST');
    assert.equal(policy, 'same-origin', 'the console\'s pages are served with Referrer-Policy: same-origin');
  } finally {
    await b.close();
  }
});

test(`sign-in sets the session cookie ${env.cookieName} (HttpOnly, SameSite=Strict${env.dev ? '' : ', Secure'}), which Chromium keeps over http://127.0.0.1`, async () => {
  const page = await operator.page();
  const errors = watchErrors(page);
  await page.goto(`${env.url}/console/sign-in`);
  await shot(page, 'sign-in');
  const response = await signIn(page, env.token);
  const setCookie = (await response.headerValue('set-cookie')) ?? '';
  assert.match(setCookie, new RegExp(`^${env.cookieName.replace(/[-]/g, '\\-')}=`), setCookie);
  assert.match(setCookie, /HttpOnly/);
  assert.match(setCookie, /SameSite=Strict/);
  if (!env.dev) assert.match(setCookie, /Secure/);

  await page.waitForURL(/\/console\/tokens/);
  await page.getByRole('heading', { name: 'Tokens', level: 1 }).waitFor();
  const cookie = await sessionCookie(operator.context);
  assert.ok(cookie, `Chromium kept ${env.cookieName}: ${JSON.stringify(await operator.context.cookies())}`);
  assert.equal(cookie.httpOnly, true);
  assert.equal(cookie.sameSite, 'Strict');
  assert.equal(cookie.secure, !env.dev);
  // It goes back with the next request (the page is signed in) and no script reads it.
  await page.goto(consoleUrl('/console/tokens'));
  await page.getByText(/signed in as .* \(operator\)/).waitFor();
  assert.equal(await page.evaluate(() => document.cookie.includes('cp_console')), false);
  assert.deepEqual(errors, []);
});

test('a token issued through the form shows its secret once and is listed; revoked through its row', async () => {
  const page = await operatorPage();
  const errors = watchErrors(page);
  const name = `console-${randomUUID().slice(0, 8)}`;
  await page.goto(consoleUrl('/console/tokens'));
  const form = page.getByRole('region', { name: 'Issue a token' });
  await form.getByLabel('User', { exact: true }).selectOption({ label: 'admin@console.test' });
  await form.getByLabel('Name', { exact: true }).fill(name);
  await form.getByRole('group', { name: 'Scopes' }).getByLabel('activity:read', { exact: true }).check();
  await form.getByRole('group', { name: 'Workspaces' }).getByLabel('main', { exact: true }).check();
  await form.getByLabel('Expires in days').fill('7');
  await Promise.all([
    page.waitForResponse((r) => r.url().endsWith('/console/tokens/issue')),
    form.getByRole('button', { name: 'Issue token' }).click(),
  ]);
  await page.getByRole('heading', { name: 'Token issued', level: 1 }).waitFor();
  assert.equal(await page.locator('.failure').count(), 0, await page.locator('main').innerText());
  const secret = (await page.locator('#secret-value').innerText()).trim();
  assert.match(await page.locator('#secret-heading').innerText(), new RegExp(`New token ${name} `));
  await shot(page, 'token-issued');

  // The secret works, once issued: it is this token.
  const me = await apiOk('GET', '/v1/me', undefined, secret);
  const tokenId = me.body.caller.tokenId;
  assert.deepEqual(me.body.caller.scopes, ['activity:read']);
  const issued = (await apiOk('GET', `/v1/organisations/${env.org}/tokens/${tokenId}`)).body.token;
  assert.equal(issued.name, name);
  assert.deepEqual(issued.workspaceIds, [env.ws], 'the workspace ticked in the form');
  assert.equal(issued.userId, env.user);

  // Listed on the tokens page, which never shows the secret again.
  await page.goto(consoleUrl('/console/tokens'));
  const row = page.getByRole('row').filter({ has: page.getByRole('cell', { name, exact: true }) });
  await row.waitFor();
  assert.equal((await page.content()).includes(secret), false, 'the tokens page shows the secret');
  assert.equal(await row.getByRole('cell').nth(7).innerText(), '—', 'not revoked yet');
  await shot(page, 'tokens');

  // Revoked through its row's form.
  const revoke = page.getByRole('form', { name: `Revoke ${name}` });
  await revoke.getByLabel('Reason').fill('console test');
  const [answer] = await Promise.all([
    page.waitForResponse((r) => r.url().endsWith('/console/tokens/revoke')),
    revoke.getByRole('button', { name: 'Revoke' }).click(),
  ]);
  assert.equal(answer.status(), 303, 'back to the tokens page');
  await page.waitForURL(/\/console\/tokens\?org=/);
  await until('the row to show the revocation', async () =>
    (await row.getByRole('cell').nth(7).innerText()) !== '—');
  assert.equal(await page.getByRole('form', { name: `Revoke ${name}` }).count(), 0);
  const after = await api('GET', '/v1/me', undefined, secret);
  assert.equal(after.status, 401, 'the revoked token no longer authenticates');
  const shown = await apiOk('GET', `/v1/organisations/${env.org}/tokens/${tokenId}`);
  assert.ok(shown.body.token.revokedAt, JSON.stringify(shown.body));
  assert.deepEqual(errors, []);
});

test('the audit page shows an event caused through the API within seconds', async (t) => {
  const page = await operatorPage();
  const errors = watchErrors(page);
  const streamed = page.waitForResponse((r) => r.url().includes('/console/audit/stream'));
  await page.goto(consoleUrl('/console/audit', { ws: env.ws }));
  // The page's script opened its EventSource and the stream answered (headers received).
  const stream = await streamed;
  assert.equal(stream.status(), 200);
  assert.match(stream.headers()['content-type'] ?? '', /^text\/event-stream/);
  // The script says so once its EventSource is open.
  await until('the page to say the stream is live', async () =>
    /^Live/.test(await page.locator('#stream-status').innerText()));
  const events = page.locator('#events');
  const before = await events.locator('tr').count();
  t.diagnostic(`rows in #events once the stream was open, before any new event: ${before}`);
  const started = Date.now();
  const issued = await issueViaApi(`audit-${randomUUID().slice(0, 8)}`);
  assert.ok(issued.correlationId, 'the API answered with a correlation id');
  const row = events.locator('tr').filter({ hasText: issued.correlationId });
  await until('the new event in #events', async () => (await row.count()) > 0, { timeout: 5_000 });
  const seconds = (Date.now() - started) / 1000;
  const cells = await row.first().locator('td').allInnerTexts();
  assert.equal(cells[2], 'token.issued', `the event's type: ${cells}`);
  assert.match(cells[3], new RegExp(`^user ${env.user}`), `the actor: ${cells}`);
  // Newest first: the new event is the top row.
  assert.equal(await events.locator('tr').first().locator('td').nth(4).innerText(), issued.correlationId);
  t.diagnostic(`the event was on the page ${seconds.toFixed(2)} s after the API call was sent`);
  await shot(page, 'audit');
  assert.deepEqual(errors, []);
});

test('a member signs in and is refused the users page: 403, "forbidden" and a correlation id', async () => {
  const b = await browser();
  try {
    const page = await b.page();
    await signIn(page, member.token);
    await page.waitForURL(/\/console\/tokens/);
    await page.getByText(/\(member\)/).waitFor();
    const response = await page.goto(consoleUrl('/console/users'));
    assert.equal(response.status(), 403);
    const failure = page.locator('.failure');
    await failure.waitFor();
    const text = await failure.innerText();
    assert.match(text, /forbidden/);
    const correlation = (await failure.locator('code').nth(1).innerText()).trim();
    assert.match(correlation, /^[0-9A-Za-z-]{8,}$/, `a correlation id: ${text}`);
    assert.equal(correlation, response.headers()['x-correlation-id'], 'the page names its own request');
    // The page lists no user.
    assert.equal(await page.getByRole('cell', { name: 'admin@console.test' }).count(), 0);
    await shot(page, 'users-refused-member');
  } finally {
    await b.close();
  }
});

test('a form posted from another origin changes nothing, even with the session\'s CSRF value', async () => {
  const victim = await issueViaApi(`victim-${randomUUID().slice(0, 8)}`);
  const page = await operatorPage();
  await page.goto(consoleUrl('/console/tokens'));
  // The worst case: the attacker somehow has this session's CSRF value.
  const csrf = await page.locator('input[name=csrf]').first().getAttribute('value');
  const attack = (withCsrf) => `<!doctype html><title>win a prize</title>
    <form method="post" action="${env.url}/console/tokens/revoke">
      <input type="hidden" name="csrf" value="${withCsrf}">
      <input type="hidden" name="key" value="${randomUUID()}">
      <input type="hidden" name="org" value="${env.org}">
      <input type="hidden" name="token" value="${victim.id}">
      <input type="hidden" name="reason" value="csrf">
    </form><script>document.forms[0].submit()</script>`;
  // Another port of the same loopback host: same site, so the SameSite=Strict cookie goes
  // along and only the server's own checks (Sec-Fetch-Site, Origin, CSRF) stand in the way.
  const sameSite = await serve(attack(csrf));
  // Another host name: another site, no cookie at all.
  const crossSite = await serve(attack('guess'), 'localhost');
  for (const [label, origin, expected] of [['same-site', sameSite, 403], ['cross-site', crossSite, 303]]) {
    const [answer] = await Promise.all([
      page.waitForResponse((r) => r.url() === `${env.url}/console/tokens/revoke`, { timeout: 10_000 }),
      page.goto(`${origin}/`),
    ]);
    assert.equal(answer.status(), expected, `${label}: the POST's answer`);
    await page.waitForLoadState('load');
    if (expected === 403) {
      await page.locator('.failure').waitFor();
      assert.match(await page.locator('.failure').innerText(), /nothing was changed/);
      await shot(page, 'csrf-refused');
    } else {
      // No cookie went with it: the console asks for a sign-in.
      await page.waitForURL(/\/console\/sign-in/);
    }
    const me = await api('GET', '/v1/me', undefined, victim.token);
    assert.equal(me.status, 200, `${label}: the token is still valid`);
  }
  const shown = await apiOk('GET', `/v1/organisations/${env.org}/tokens/${victim.id}`);
  const record = shown.body.token ?? shown.body;
  assert.equal(record.revokedAt ?? null, null, JSON.stringify(shown.body));
  // The operator's session is still signed in.
  await page.goto(consoleUrl('/console/tokens'));
  await page.getByText(/\(operator\)/).waitFor();
});

test('sign-in replaces a session cookie planted before it', async () => {
  // A member's valid session, as an attacker would plant their own.
  const attacker = await browser();
  let planted;
  try {
    const page = await attacker.page();
    await signIn(page, member.token);
    planted = (await sessionCookie(attacker.context))?.value;
    assert.ok(planted, 'the member has a session cookie');
  } finally {
    await attacker.close();
  }
  const b = await browser();
  try {
    const page = await b.page();
    for (const value of ['planted-garbage', planted]) {
      await b.context.clearCookies();
      await b.context.addCookies([{
        name: env.cookieName, value, domain: '127.0.0.1', path: '/',
        httpOnly: true, secure: !env.dev, sameSite: 'Strict',
      }]);
      assert.equal((await sessionCookie(b.context))?.value, value, 'the cookie is planted');
      await signIn(page, env.token);
      await page.waitForURL(/\/console\/tokens/);
      const now = (await sessionCookie(b.context))?.value;
      assert.ok(now && now !== value, 'the sign-in set a new session cookie');
      await page.getByText(/\(operator\)/).waitFor();
    }
    // The planted session is still only the member's: it gained nothing from the sign-in.
    const replay = await getWithCookie(`/console/users?org=${env.org}`, planted);
    assert.equal(replay.status, 403, 'the planted cookie still opens only the member\'s session');
  } finally {
    await b.close();
  }
});

test('a failed delivery is resent from its page', async () => {
  const page = await operatorPage();
  const errors = watchErrors(page);
  // A loopback port that nothing listens on: bound, then closed.
  const closed = http.createServer();
  await new Promise((resolve) => closed.listen(0, '127.0.0.1', resolve));
  const port = closed.address().port;
  await new Promise((resolve) => closed.close(resolve));

  const pool = (await apiOk('POST', `/v1/organisations/${env.org}/workspaces/${env.ws}/runner-pools`,
    { name: `console-${randomUUID().slice(0, 8)}` })).body.pool.id;
  const registration = (await apiOk('POST', `/v1/organisations/${env.org}/runner-pools/${pool}/runners`,
    { name: 'closed-port' })).body.registration;
  await apiOk('PUT', `/v1/organisations/${env.org}/runners/${registration.runnerId}/delivery-url`,
    { url: `http://127.0.0.1:${port}/hooks` });
  const submitted = await apiOk('POST', `/v1/workspaces/${env.ws}/runner-commands`,
    { poolId: pool, command: 'make', args: ['test'] });
  const delivery = submitted.body.command.deliveryId;
  await until('the delivery to fail', async () => {
    const shown = await apiOk('GET', `/v1/organisations/${env.org}/deliveries/${delivery}`);
    return shown.body.delivery.status === 'failed';
  }, { timeout: 15_000, every: 100 });

  await page.goto(consoleUrl('/console/runners', { ws: env.ws, pool }));
  await page.getByRole('cell', { name: 'closed-port', exact: true }).waitFor();
  await shot(page, 'runners');
  await page.goto(consoleUrl('/console/deliveries', { ws: env.ws, pool }));
  await page.getByRole('link', { name: delivery }).waitFor();
  await shot(page, 'deliveries');

  await page.getByRole('link', { name: delivery }).click();
  await page.waitForURL(/\/console\/delivery\?/);
  await page.getByRole('heading', { name: `Delivery ${delivery}` }).waitFor();
  const attempts = page.getByRole('region', { name: 'Attempts' }).locator('tbody tr');
  assert.ok((await attempts.count()) >= 1, 'the failed attempt is listed');
  await shot(page, 'delivery');
  const [answer] = await Promise.all([
    page.waitForResponse((r) => r.url().endsWith('/console/deliveries/resend')),
    page.getByRole('button', { name: 'Resend this delivery' }).click(),
  ]);
  assert.equal(answer.status(), 303, `the resend redirects back (got ${answer.status()})`);
  await page.waitForURL((u) => u.pathname === '/console/delivery' && u.searchParams.get('id') === delivery);
  await page.getByRole('heading', { name: `Delivery ${delivery}` }).waitFor();
  assert.equal(await page.locator('.failure').count(), 0, await page.locator('main').innerText());
  await shot(page, 'delivery-resent');
  // The API took it: the delivery is resent as a new command, and a second resend is refused.
  const again = await api('POST', `/v1/organisations/${env.org}/deliveries/${delivery}/resend`, {});
  assert.equal(again.status, 409, `already resent: ${JSON.stringify(again.body)}`);
  assert.deepEqual(errors, []);
});

test('the users and policies pages render for the operator', async () => {
  const page = await operatorPage();
  const errors = watchErrors(page);
  await page.goto(consoleUrl('/console/users'));
  await page.getByRole('cell', { name: 'admin@console.test', exact: true }).waitFor();
  await page.getByRole('cell', { name: member.email, exact: true }).waitFor();
  await shot(page, 'users');
  const response = await page.goto(consoleUrl('/console/policies'));
  assert.equal(response.status(), 200);
  await page.getByRole('heading', { name: 'Active' }).waitFor();
  await shot(page, 'policies');
  assert.deepEqual(errors, []);
});

test('sign-out ends the session: a copy of its cookie opens nothing', async () => {
  const page = await operatorPage();
  await page.goto(consoleUrl('/console/tokens'));
  const copy = (await sessionCookie(operator.context)).value;
  assert.equal((await getWithCookie(`/console/tokens?org=${env.org}`, copy)).status, 200);
  await page.getByRole('button', { name: 'Sign out' }).click();
  await page.waitForURL(/\/console\/sign-in\?signed-out/);
  await page.getByText('Signed out.').waitFor();
  assert.equal(await sessionCookie(operator.context), undefined, 'the browser dropped the cookie');
  const replay = await getWithCookie(`/console/tokens?org=${env.org}`, copy);
  assert.equal(replay.status, 303);
  assert.match(replay.location ?? '', /\/console\/sign-in/);
});
