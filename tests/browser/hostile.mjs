// Outside text in the dashboard, in a real browser (Debian's Chromium through
// playwright-core). Run by tests/web.rs, which seeds one job whose queue, tenant,
// metadata, payload and error message all hold HTML, script and ANSI escapes:
//   SK_URL     the dashboard
//   SK_JOB     that job's id
//   SK_TEXT    the text it holds
// Every page that shows the job must show the text as text: no script runs, no element
// of it is made, and the text itself is on the page. Filter values are data.
// Exits 0 when every check holds; otherwise prints the first that failed and exits 1.
import { check, launch } from './lib.mjs';

const { SK_URL: url, SK_JOB: job, SK_TEXT: text } = process.env;


const browser = await launch();
let failed = false;
try {
  const page = await browser.newPage();
  page.setDefaultTimeout(15000);
  const dialogs = [];
  page.on('dialog', (d) => { dialogs.push(d.message()); d.dismiss(); });
  const q = encodeURIComponent(text);
  for (const path of ['/', '/queues', `/queues/${q}/tenants`, '/errors', '/jobs', `/jobs?queue=${q}`, `/jobs?tenant=${q}`,
    `/jobs?error_kind=${q}&error=${q}`, `/types/${q}`, '/audit', `/jobs/${job}`]) {
    const response = await page.goto(url + path);
    check(`${path} answers`, response.status() === 200, response.status());
    const seen = await page.evaluate(() => ({
      pwned: window.__pwned ?? null,
      injected: document.querySelectorAll('img[src="x"], [onerror]').length,
      scripts: [...document.scripts].map((s) => s.textContent.slice(0, 40)),
      body: document.body.innerText,
    }));
    check(`${path}: no script of the job's ran`, seen.pwned === null, seen.pwned);
    check(`${path}: no element of the job's was made`, seen.injected === 0, seen.injected);
    check(`${path}: no script element holds the job's script`, seen.scripts.every((s) => !s.includes('__pwned')), seen.scripts);
    // The queues page lists queues with controls set (none here).
    if (path !== '/queues') {
      check(`${path}: the text is shown as text`, seen.body.includes('<script>window.__pwned=1</script>'), seen.body.slice(0, 400));
    }
  }
  check('no dialog opened', dialogs.length === 0, dialogs);

  // Defence in depth: the Content-Security-Policy allows the page's own script only, so a
  // script that got into the page would not run, and no element carries an inline handler.
  const response = await page.goto(`${url}/jobs/${job}`);
  const policy = response.headers()['content-security-policy'] ?? '';
  check('the page sends its script policy', policy.includes("script-src 'sha256-") && policy.includes("frame-ancestors 'none'"), policy);
  const blocked = await page.evaluate(() => {
    const script = document.createElement('script');
    script.textContent = 'window.__inline = 1';
    document.body.append(script); // an allowed inline script runs here, synchronously
    return { ran: window.__inline ?? null, handlers: document.querySelectorAll('[onsubmit],[onclick],[onerror],[onload]').length };
  });
  check('a script put into the page does not run', blocked.ran === null, blocked);
  check('no element has an inline handler', blocked.handlers === 0, blocked);

  // The job page shows each field whole, as text.
  await page.goto(`${url}/jobs/${job}`);
  const payload = await page.locator('#payload').innerText();
  check('the payload shows the text', payload.includes('<img src=x onerror=window.__pwned=2>'), payload);
  const metadata = await page.locator('#metadata').innerText();
  check('the metadata shows the text', metadata.includes('<script>window.__pwned=1</script>'), metadata);

  // Filter values are data: SQL in them matches nothing; the text matches its one job.
  for (const [key, value] of [['queue', "x' OR '1'='1"], ['tenant', "' OR 1=1 --"], ['type', "hostile' OR '1'='1"]]) {
    await page.goto(`${url}/jobs?${key}=${encodeURIComponent(value)}`);
    const ids = await page.locator('#jobs a.id').allInnerTexts();
    check(`?${key}=${value} lists nothing`, ids.length === 0, ids);
  }
  await page.goto(`${url}/jobs?queue=${q}`);
  const ids = await page.locator('#jobs a.id').allInnerTexts();
  check('?queue=<the text> lists its job', ids.length === 1 && ids[0] === job, ids);
} catch (e) {
  console.error(`browser test failed: ${e.message}`);
  failed = true;
}
await browser.close();
process.exit(failed ? 1 : 0);
