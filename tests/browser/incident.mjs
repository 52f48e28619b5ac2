// An incident worked through the dashboard alone (Debian's Chromium through
// playwright-core). Run by tests/web.rs, which fails 500 `charge_card` jobs of queue
// `payments` for good (a gateway outage; each message names its invoice), fixes the
// cause, serves the dashboard and checks the database after:
//   SK_URL      the dashboard
//   SK_RO_URL   the same database behind `--read-only`
//   SK_SHOTS    where to write the screenshots
// The operator finds the failing task type on the overview, opens its one error group,
// pauses the queue, retries all 500 from the group with one confirmation, resumes, and
// sees them succeed; the audit page then lists the three actions.
import { check, launch, waitFor as waitUntil } from './lib.mjs';

const { SK_URL: url, SK_RO_URL: roUrl, SK_SHOTS: shots, SK_WORKFLOW: workflow } = process.env;
const WAIT = 30000;
const waitFor = (page, what, read, want) => waitUntil(page, what, read, want, WAIT);

const browser = await launch();
let page;
try {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  context.setDefaultTimeout(WAIT);
  page = await context.newPage();
  const text = (selector) => page.locator(selector).innerText();

  // The overview: the failing task type, worst failure rate first.
  await page.goto(url + '/');
  const first = await page.locator('#types tr[data-type]').first().getAttribute('data-type');
  check('the overview lists the failing task type first', first === 'charge_card', first);
  const fatal = await text('#types tr[data-type="charge_card"] td[data-state="fatal"]');
  check('it shows 500 jobs failed for good', fatal === '500', fatal);
  const succeededQueue = await page.locator('#counts tr[data-queue="default"]').count();
  check('the queue whose jobs succeeded is listed too', succeededQueue === 1, succeededQueue);
  await page.screenshot({ path: `${shots}/incident-overview.png`, fullPage: true });

  // Its page: one error group for 500 messages that differ by an invoice number.
  await page.click('#types tr[data-type="charge_card"] a');
  const groups = await page.locator('#errors tr[data-group]').count();
  check('the task type has one error group', groups === 1, groups);
  const count = await text('#errors tr[data-group] td.count');
  check('the group holds the 500 jobs', count === '500', count);
  const pattern = await text('#errors tr[data-group] td.message');
  check('the group masks the invoice number', pattern === 'gateway timeout charging invoice INV-{n}', pattern);
  check('the chart has axes and a legend',
    (await page.locator('svg.chart line.axis').count()) === 1 && (await page.locator('svg.chart text', { hasText: 'failed' }).count()) === 1, '');
  await page.screenshot({ path: `${shots}/incident-task-type.png`, fullPage: true });

  // Pause the queue from the Queues page, where it is listed though none of its jobs is live.
  await page.goto(url + '/queues');
  const queueFatal = await text('#queues tr[data-queue="payments"] td[data-state="fatal"]');
  check('the Queues page lists payments with its 500 fatal jobs', queueFatal === '500', queueFatal);
  await page.click('#queues tr[data-queue="payments"] button[value="pause"]');
  const state = await text('#queues tr[data-queue="payments"] td.state');
  check('payments shows paused', state.startsWith('paused'), state);

  // Retry all 500 from the error group, with one confirmation that names the count.
  await page.goto(url + '/errors');
  await page.screenshot({ path: `${shots}/incident-errors.png`, fullPage: true });
  const asked = [];
  page.once('dialog', (d) => { asked.push(d.message()); d.accept(); });
  await page.click('#errors tr[data-group] button[value="filter"]');
  check('one confirmation, with the count', asked.length === 1 && asked[0].includes('500'), asked);
  await page.waitForURL(/\/jobs\?/);
  const done = await text('#done');
  check('the job list says 500 were retried', done === 'retry: 500 jobs', done);
  await page.screenshot({ path: `${shots}/incident-jobs.png` });

  // Paused, they wait: the same count under the same name on every page.
  await page.goto(url + '/queues');
  const waiting = await text('#queues tr[data-queue="payments"] td[data-state="waiting"]');
  check('the Queues page counts them waiting', waiting === '500', waiting);
  await page.goto(url + '/');
  const overviewWaiting = await text('#counts tr[data-queue="payments"] td[data-state="waiting"]');
  const overviewRetrying = await text('#counts tr[data-queue="payments"] td[data-state="retrying"]');
  check('the overview counts them waiting, not retrying', overviewWaiting === '500' && overviewRetrying === '0', [overviewWaiting, overviewRetrying]);

  // Resume; the page refreshes itself until all have run.
  await page.goto(url + '/queues');
  await page.click('#queues tr[data-queue="payments"] button[value="resume"]');
  await waitFor(page, 'all 500 ran: none waiting',
    () => document.querySelector('#queues tr[data-queue="payments"] td[data-state="waiting"]')?.textContent, '0');
  await waitFor(page, 'none failed for good',
    () => document.querySelector('#queues tr[data-queue="payments"] td[data-state="fatal"]')?.textContent, '0');
  await page.screenshot({ path: `${shots}/incident-queues.png`, fullPage: true });

  // The audit trail: the pause, the retry of 500 and the resume, newest first.
  await page.goto(url + '/audit');
  const actions = await page.locator('#audit tr[data-action] td.action').allInnerTexts();
  check('the audit lists resume, retry, pause', actions.slice(0, 3).join(',') === 'resume,retry,pause', actions);
  const jobs = await text('#audit tr[data-action="retry"] td.jobs');
  check('the retry changed 500 jobs', jobs === '500', jobs);
  const filter = await text('#audit tr[data-action="retry"] td.message');
  check('the retry names its filter', filter.includes('type=charge_card') && filter.includes('INV-{n}'), filter);
  const who = await page.locator('#audit tr[data-action="pause"] td').nth(1).innerText();
  check('the audit names who', who.startsWith('web:'), who);
  await page.screenshot({ path: `${shots}/incident-audit.png`, fullPage: true });

  // The workflow the outage broke: its graph, and a retry of what failed from its page.
  await page.goto(url + '/workflows');
  await page.click(`#workflows a[href="/workflows/${workflow}"]`);
  const nodes = await page.locator('#graph rect.node').count();
  check('the workflow page draws a node per job', nodes === 4, nodes);
  const fatalNodes = await page.locator('#graph rect.node.fatal').count();
  check('the failed pack and nothing else shows failed', fatalNodes === 1, fatalNodes);
  await page.screenshot({ path: `${shots}/incident-workflow.png`, fullPage: true });
  page.once('dialog', (d) => d.accept());
  await page.click('button[value="retry what failed"]');
  await waitFor(page, 'the retried pack succeeds, the page shows it',
    () => document.querySelectorAll('#graph rect.node.processed').length, 4);

  // Rows picked by hand: two of the succeeded payments deleted, after a confirmation.
  await page.goto(url + '/jobs?queue=payments&state=processed');
  await page.locator('#jobs input[name="id"]').nth(0).check();
  await page.locator('#jobs input[name="id"]').nth(1).check();
  await page.selectOption('select[name="do"]', 'delete');
  const picked = [];
  page.once('dialog', (d) => { picked.push(d.message()); d.accept(); });
  await page.click('#apply-selected');
  check('the confirmation counts the rows checked', picked[0] === 'delete: the 2 selected jobs?', picked);
  await page.waitForURL(/done=/);
  const deleted = await text('#done');
  check('two were deleted', deleted === 'delete: 2 jobs', deleted);

  // The new pages' guards: a forged bulk POST is refused; read-only shows no bulk form.
  const forged = await page.evaluate(async () => {
    const body = new URLSearchParams({ csrf: 'forged', do: 'delete', scope: 'filter' });
    return (await fetch('/jobs/bulk', { method: 'POST', body })).status;
  });
  check('a bulk POST with a forged CSRF token is refused', forged === 403, forged);
  for (const path of ['/jobs?queue=payments', '/errors', '/types/charge_card', '/audit', `/workflows/${workflow}`]) {
    await page.goto(roUrl + path);
    const forms = await page.locator('form[method="post"]').count();
    check(`read-only ${path}: no action form`, forms === 0, forms);
  }
  const ro = await page.evaluate(async () => {
    const r = await fetch('/jobs/bulk', { method: 'POST', body: new URLSearchParams({ csrf: '', do: 'retry', scope: 'filter' }) });
    return r.status;
  });
  check('read-only: a bulk POST is refused', ro === 403, ro);
} catch (e) {
  console.error(`browser test failed: ${e.message}`);
  if (page) await page.screenshot({ path: `${shots}/failure.png`, fullPage: true }).catch(() => {});
  await browser.close();
  process.exit(1);
}
await browser.close();
