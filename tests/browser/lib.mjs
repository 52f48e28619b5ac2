// What the browser tests share: Debian's Chromium, a check that prints what it saw, and
// a wait on the page's own refresh.
import { chromium } from 'playwright-core';

/** Debian's Chromium, headless (nothing downloads a browser). */
export function launch() {
  return chromium.launch({
    executablePath: '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu'],
  });
}

/** Passes when `ok`, printing `what`; else throws with what was seen. */
export function check(what, ok, seen) {
  if (!ok) throw new Error(`${what}: saw ${JSON.stringify(seen)}`);
  console.log(`ok: ${what}`);
}

/** Waits up to `wait` ms until `read()` (run in the page) returns `want`, through the page's own refresh. */
export async function waitFor(page, what, read, want, wait) {
  const start = Date.now();
  let seen;
  for (;;) {
    seen = await page.evaluate(read).catch(() => undefined);
    if (seen === want) return check(what, true, seen);
    if (Date.now() - start > wait) return check(what, false, seen);
    await page.waitForTimeout(100);
  }
}
