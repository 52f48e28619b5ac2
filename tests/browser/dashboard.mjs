// The dashboard in a real browser (Debian's Chromium through playwright-core). Run by
// tests/web.rs, which seeds the jobs, serves the dashboard and checks the database after:
//   SK_URL      the dashboard
//   SK_RO_URL   the same database behind `--read-only`
//   SK_FATAL    the id of a fatal job whose cause is fixed (its retry succeeds)
//   SK_SHOTS    where to write the screenshots
// Exits 0 when every check holds; otherwise prints the first that failed and exits 1.
import { check, launch, waitFor as waitUntil } from './lib.mjs';

const { SK_URL: url, SK_RO_URL: roUrl, SK_FATAL: fatal, SK_SHOTS: shots } = process.env;
const WAIT = 15000;
const waitFor = (page, what, read, want) => waitUntil(page, what, read, want, WAIT);

const cell = (queue, state) =>
  page.locator(`#counts tr[data-queue="${queue}"] td[data-state="${state}"]`).innerText();

const browser = await launch();
let page;
try {
  const context = await browser.newContext({ viewport: { width: 1200, height: 900 } });
  context.setDefaultTimeout(WAIT);
  page = await context.newPage();

  // The overview: counts by queue and state, the last hour, workers.
  await page.goto(url + '/');
  check('default has 1 fatal job', (await cell('default', 'fatal')) === '1', await cell('default', 'fatal'));
  check('mail has 2 scheduled jobs', (await cell('mail', 'scheduled')) === '2', await cell('mail', 'scheduled'));
  check('mail has 1 cancelled job', (await cell('mail', 'cancelled')) === '1', await cell('mail', 'cancelled'));
  const succeeded = Number(await page.locator('#succeeded').innerText());
  check('the last hour shows the 4 jobs that succeeded', succeeded === 4, succeeded);
  const failed = Number(await page.locator('#failed').innerText());
  check('the last hour shows the failed run', failed === 1, failed);
  check('the chart has bars', (await page.locator('svg.chart rect').count()) > 0, 0);
  check('a live worker is listed', (await page.locator('#workers td', { hasText: 'yes' }).count()) === 1, 0);
  await page.screenshot({ path: `${shots}/dashboard-overview.png`, fullPage: true });

  // The errors page groups the failure and links a sample job.
  await page.goto(url + '/errors');
  const sample = await page.locator('#errors a.sample').first().getAttribute('href');
  check('the error group links its sample job', sample === `/jobs/${fatal}`, sample);

  // The fatal job, found through the list, retried from its page.
  await page.goto(url + '/');
  await page.click('#counts tr[data-queue="default"] td[data-state="fatal"] a');
  const listed = await page.locator('#jobs a.id').allInnerTexts();
  check('the fatal filter lists the fatal job', listed.length === 1 && listed[0] === fatal, listed);
  await page.click(`#jobs a.id`);
  check('the job page shows it fatal', (await page.locator('#state').innerText()) === 'fatal', await page.locator('#state').innerText());
  const attempt = await page.locator('#attempts li').first().innerText();
  check('its attempt shows the error', attempt.includes('the mirror is down'), attempt);
  await page.screenshot({ path: `${shots}/dashboard-job.png`, fullPage: true });
  await page.click('button[value="retry"]');
  // No reload from here: the page refreshes itself until the worker has run the job.
  await waitFor(page, 'the retried job runs and the page shows it processed',
    () => document.querySelector('#state')?.textContent, 'processed');
  await waitFor(page, 'the page shows its second attempt',
    () => document.querySelectorAll('#attempts li').length, 2);

  // A cross-site POST, and one without the CSRF token, are refused.
  const refused = await page.evaluate(async () => {
    const r = await fetch('/queues/mail/pause', { method: 'POST', body: new URLSearchParams({ csrf: 'forged' }) });
    return r.status;
  });
  check('a POST with a forged CSRF token is refused', refused === 403, refused);

  // Cancelling asks first (the page's script; no inline handler); dismissed, nothing changes.
  await page.goto(`${url}/jobs?queue=mail&state=waiting`);
  await page.locator('#jobs a.id').first().click();
  const asked = [];
  page.once('dialog', (d) => { asked.push(d.message()); d.dismiss(); });
  await page.click('button[value="cancel"]');
  check('cancel asks first', asked.length === 1 && asked[0] === 'Sure?', asked);
  const kept = await page.locator('#state').innerText();
  check('dismissed, the job is still waiting', kept === 'waiting', kept);

  // Pause a queue from the queues page.
  await page.goto(url + '/queues');
  await page.click('#queues tr[data-queue="mail"] button[value="pause"]');
  const state = await page.locator('#queues tr[data-queue="mail"] td.state').innerText();
  check('the queue shows paused', state.startsWith('paused'), state);
  await page.goto(url + '/');
  check('the overview lists the paused queue', (await page.locator('#paused li').innerText()).startsWith('mail'), '');

  // A phone-width screen: nothing wider than the screen but tables that scroll in place.
  const phone = await browser.newContext({ viewport: { width: 390, height: 844 }, isMobile: true });
  phone.setDefaultTimeout(WAIT);
  const small = await phone.newPage();
  for (const path of ['/', '/queues', '/jobs', `/jobs/${fatal}`, '/errors', '/types/deploy', '/workflows', '/audit']) {
    await small.goto(url + path);
    const width = await small.evaluate(() => document.documentElement.scrollWidth);
    check(`${path} fits a 390 px screen`, width <= 390, width);
  }
  await small.goto(url + '/');
  await small.screenshot({ path: `${shots}/dashboard-phone.png`, fullPage: true });

  // The read-only dashboard shows no action and refuses every POST.
  await page.goto(`${roUrl}/jobs/${fatal}`);
  check('read-only: no action buttons', (await page.locator('form[method="post"]').count()) === 0, 'forms');
  await page.goto(`${roUrl}/queues`);
  check('read-only: no pause buttons', (await page.locator('button').count()) === 0, 'buttons');
  const ro = await page.evaluate(async () => {
    const r = await fetch('/queues/mail/resume', { method: 'POST', body: new URLSearchParams({ csrf: '' }) });
    return [r.status, await r.text()];
  });
  check('read-only: a POST is refused', ro[0] === 403 && ro[1].includes('read-only'), ro);

  // /metrics serves the queues' gauges.
  const metrics = await (await fetch(url + '/metrics')).text();
  check('/metrics has the queue depth gauge', metrics.includes('sk_queue_jobs{queue="mail",state="scheduled"} 2'), metrics);
  check('/metrics has the paused gauge', metrics.includes('sk_queue_paused{queue="mail"} 1'), metrics);
} catch (e) {
  console.error(`browser test failed: ${e.message}`);
  if (page) await page.screenshot({ path: `${shots}/failure.png`, fullPage: true }).catch(() => {});
  await browser.close();
  process.exit(1);
}
await browser.close();
