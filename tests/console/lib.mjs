// Helpers of the console's browser tests and of tests/bench/console-weight.mjs: the server
// run.sh (or console-weight.sh) started, its API as the operator, Debian's Chromium through
// playwright-core, and polls with a deadline.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { chromium } from 'playwright-core';

function need(name) {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set: run this through tests/console/run.sh`);
  return value;
}

/** The server and the bootstrap's operator, from the environment run.sh exports. */
export const env = {
  /** Where the browser and the API calls go. */
  get url() { return need('CONSOLE_URL'); },
  get org() { return need('CONSOLE_ORG'); },
  get ws() { return need('CONSOLE_WS'); },
  get user() { return need('CONSOLE_USER'); },
  get token() { return need('CONSOLE_TOKEN'); },
  get chromium() { return process.env.CONSOLE_CHROMIUM || '/usr/bin/chromium'; },
  get dev() { return Boolean(process.env.CONSOLE_DEV); },
  get cookieName() { return this.dev ? 'cp_console' : '__Host-cp_console'; },
};

export const CHROMIUM_ARGS = [
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

/**
 * A headless Chromium with a fresh profile of its own (launchPersistentContext), so no cookie
 * or cache is shared with another; `close()` ends it and deletes the profile.
 */
export async function browser(options = {}) {
  const profile = mkdtempSync(join(tmpdir(), 'cp-console-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: env.chromium,
    headless: true,
    args: CHROMIUM_ARGS,
    viewport: { width: 1280, height: 900 },
    ...options,
  });
  context.setDefaultTimeout(10_000);
  context.setDefaultNavigationTimeout(15_000);
  return {
    context,
    async page() {
      return context.pages()[0] ?? context.newPage();
    },
    async close() {
      await context.close().catch(() => {});
      rmSync(profile, { recursive: true, force: true });
    },
  };
}

/**
 * One API call with `token` as bearer: { status, body, correlationId }. A body is sent as JSON
 * with a fresh Idempotency-Key.
 */
export async function api(method, path, body, token = env.token) {
  const headers = { authorization: `Bearer ${token}`, accept: 'application/json' };
  if (body !== undefined) {
    headers['content-type'] = 'application/json';
    headers['idempotency-key'] = randomUUID();
  }
  const response = await fetch(env.url + path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  let parsed = null;
  try { parsed = text ? JSON.parse(text) : null; } catch { parsed = text; }
  return { status: response.status, body: parsed, correlationId: response.headers.get('x-correlation-id') };
}

/** As `api`, but anything outside 2xx is an error naming the call and its answer. */
export async function apiOk(method, path, body, token) {
  const reply = await api(method, path, body, token);
  if (reply.status < 200 || reply.status > 299) {
    throw new Error(`${method} ${path}: HTTP ${reply.status} ${JSON.stringify(reply.body)}`);
  }
  return reply;
}

/**
 * Polls `check` (every `every` ms) until it returns a truthy value, which is returned; throws,
 * naming `what` and the last value or error, after `timeout` ms.
 */
export async function until(what, check, { timeout = 5_000, every = 50 } = {}) {
  const deadline = Date.now() + timeout;
  let last;
  for (;;) {
    try {
      last = await check();
      if (last) return last;
    } catch (error) {
      last = error;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeout} ms waiting for ${what} (last: ${last instanceof Error ? last.message : JSON.stringify(last)})`);
    }
    await new Promise((resolve) => setTimeout(resolve, every));
  }
}

/**
 * Signs `page` in with `token` through the sign-in form; returns the response to the POST.
 * Unless `check` is false, anything but the redirect to the tokens page is an error naming what
 * the page said and the Origin Chromium sent.
 */
export async function signIn(page, token, { check = true } = {}) {
  await page.goto(`${env.url}/console/sign-in`);
  await page.getByLabel('Access token').fill(token);
  const [response] = await Promise.all([
    page.waitForResponse((r) => r.url().endsWith('/console/sign-in') && r.request().method() === 'POST'),
    page.getByRole('button', { name: 'Sign in' }).click(),
  ]);
  await page.waitForLoadState('load');
  if (check && response.status() !== 303) {
    const origin = (await response.request().allHeaders()).origin;
    const said = await page.locator('.failure').innerText().catch(() => '');
    throw new Error(`the sign-in form was refused: HTTP ${response.status()}, Chromium sent Origin: ${origin}; the page said: ${said.replace(/\s+/g, ' ')}`);
  }
  return response;
}

/** A console URL of the operator's organisation. */
export function consoleUrl(path, params = {}) {
  const query = new URLSearchParams({ org: env.org, ...params });
  return `${env.url}${path}?${query}`;
}
