// html-check.js — open rperf HTML flame graphs (format: :html) from disk in
// Debian's chromium, headless, driven by puppeteer-core, and report what a
// user would see: the page's read-only window.__rperf state after load and
// after each interaction (click-to-zoom on a frame, Escape back up, search,
// thread and label filters, sorting the top table), every console error or
// page error, and every request the page makes (all are refused; only the
// file itself may be loaded). Assertions live in
// tests/ruby/test_interop_html.rb.
// usage: NODE_PATH=$RPERF_CACHE/npm/node_modules node html-check.js SPEC.json
//   SPEC: [{"file": path | "url": http URL (a page served live, e.g. the
//           flamegraph route; "headers"?: extra request headers),
//           "screenshot"?: png path, "zoom"?: frame name,
//           "search"?: text, "regex"?: text, "thread"?: seq, "label"?: option text}, …]
// Prints one JSON line per file; exit 0 unless the browser could not run.
const fs = require('fs');
const path = require('path');
const puppeteer = require('puppeteer-core');

const STATE = `(() => { const r = window.__rperf; return r && {
  rects: r.rects, zoom: r.zoom, total: r.total, allTotal: r.allTotal, nodes: r.nodes,
  stacks: r.stacks, matched: r.matched, matchedShare: r.matchedShare,
  highlighted: r.highlighted, updateMs: r.lastUpdateMs, visible: r.visible(), table: r.tableRows(),
  matchedText: document.getElementById('matched').textContent }; })()`;

async function run(browser, spec) {
  const url = spec.url || 'file://' + path.resolve(spec.file);
  const out = { file: spec.url || path.basename(spec.file), problems: [], requests: [], steps: {} };
  const page = await browser.newPage();
  try {
    if (spec.headers) await page.setExtraHTTPHeaders(spec.headers);
    page.on('pageerror', (err) => out.problems.push('pageerror: ' + err.message));
    page.on('console', (msg) => { if (msg.type() === 'error' || msg.type() === 'warning') out.problems.push('console ' + msg.type() + ': ' + msg.text()); });
    page.on('dialog', async (d) => { out.problems.push('dialog: ' + d.message()); await d.dismiss(); });
    await page.setRequestInterception(true);
    page.on('request', (req) => {
      if (req.url() === url) { req.continue(); return; }
      out.requests.push(req.url());
      req.abort();
    });
    await page.setViewport({ width: 1200, height: 800 });
    const t0 = Date.now();
    await page.goto(url, { waitUntil: 'load', timeout: 60000 });
    await page.waitForFunction('window.__rperf && window.__rperf.ready', { timeout: 60000 });
    out.wallLoadMs = Date.now() - t0;
    out.loadMs = await page.evaluate('window.__rperf.loadMs');
    out.title = await page.title();
    out.header = await page.evaluate(`Array.from(document.querySelectorAll('#meta div')).map(d => d.textContent)`);
    out.threads = await page.evaluate(`Array.from(document.getElementById('thread').options).map(o => [o.value, o.textContent])`);
    out.labels = await page.evaluate(`Array.from(document.getElementById('label').options).map(o => [o.value, o.textContent])`);
    out.steps.initial = await page.evaluate(STATE);
    if (spec.zoom) {
      const r = await page.evaluate((n) => window.__rperf.rectOf(n), spec.zoom);
      if (!r) out.problems.push('no rectangle named ' + spec.zoom);
      else {
        await page.mouse.move(r.x, r.y);
        out.tooltip = await page.evaluate(`document.getElementById('tip').textContent`);
        await page.mouse.click(r.x, r.y);
        out.steps.zoomed = await page.evaluate(STATE);
        out.crumbs = await page.evaluate(`document.getElementById('crumbs').textContent`);
        await page.keyboard.press('Escape');
        out.steps.escaped = await page.evaluate(STATE);
        await page.mouse.click(r.x, r.y);
        await page.click('#reset');
        out.steps.reset = await page.evaluate(STATE);
      }
    }
    if (spec.search) {
      await page.type('#search', spec.search);
      out.steps.search = await page.evaluate(STATE);
      await page.evaluate(`document.getElementById('search').value = ''; document.getElementById('search').dispatchEvent(new Event('input'))`);
    }
    if (spec.regex) {
      await page.click('#regex');
      await page.type('#search', spec.regex);
      out.steps.regex = await page.evaluate(STATE);
    }
    if (spec.thread !== undefined) {
      await page.select('#thread', String(spec.thread));
      out.steps.thread = await page.evaluate(STATE);
      await page.select('#thread', '');
    }
    if (spec.label !== undefined) {
      const v = await page.evaluate((t) => {
        const o = Array.from(document.getElementById('label').options).find((x) => x.textContent === t);
        return o ? o.value : null;
      }, spec.label);
      if (v === null) out.problems.push('no label option ' + spec.label);
      else {
        await page.select('#label', v);
        out.steps.label = await page.evaluate(STATE);
        await page.select('#label', '');
      }
    }
    if (spec.sort) {
      await page.click(`th[data-k="${spec.sort}"]`);
      out.steps.sorted = await page.evaluate(STATE);
    }
    if (spec.screenshot) await page.screenshot({ path: spec.screenshot, fullPage: !spec.viewportOnly });
  } catch (e) {
    out.problems.push('check: ' + e.message);
  } finally {
    await page.close();
  }
  return out;
}

async function main() {
  const specs = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
  const browser = await puppeteer.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
  });
  try {
    for (const spec of specs) console.log(JSON.stringify(await run(browser, spec)));
  } finally {
    await browser.close();
  }
}
main().catch((e) => { console.error(e); process.exit(2); });
