// speedscope-check.js — load profile files into speedscope's own importer,
// running headless in Debian's chromium (validators reference §4), and fail
// on any import error, page error or alert(). Several files share one
// browser launch (each in a fresh page) to keep the test fast.
// usage: NODE_PATH=$RPERF_CACHE/npm/node_modules node speedscope-check.js FILE…
// Prints one JSON line per file; exit 0 iff every file imported cleanly.
const fs = require('fs');
const os = require('os');
const path = require('path');
const puppeteer = require('puppeteer-core');

async function check(browser, viewer, input) {
  const loader = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'ssc-')), 'load.js');
  const b64 = fs.readFileSync(input).toString('base64');
  fs.writeFileSync(loader,
    `speedscope.loadFileFromBase64(${JSON.stringify(path.basename(input))}, ${JSON.stringify(b64)});\n`);
  const problems = [];
  const importer = [];
  const page = await browser.newPage();
  try {
    page.on('pageerror', (err) => problems.push('pageerror: ' + err.message));
    page.on('dialog', async (d) => { problems.push('alert: ' + d.message()); await d.dismiss(); });
    page.on('console', (msg) => {
      if (msg.type() === 'error') problems.push('console: ' + msg.text());
      else if (msg.text().startsWith('Importing')) importer.push(msg.text());
    });
    await page.setViewport({ width: 1200, height: 500 });
    await page.goto(`file://${viewer}#localProfilePath=${loader}`, { waitUntil: 'networkidle0' });
    // The import is asynchronous: wait for the title change (success) or give up.
    const deadline = Date.now() + 15000;
    let title = await page.title();
    while (!title.endsWith(' - speedscope') && problems.length === 0 && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 100));
      title = await page.title();
    }
    if (!title.endsWith(' - speedscope')) problems.push(`not imported (title "${title}")`);
    return { file: path.basename(input), title, importer, problems };
  } finally {
    await page.close();
    fs.rmSync(path.dirname(loader), { recursive: true, force: true });
  }
}

async function main() {
  const viewer = require.resolve('speedscope/dist/release/index.html');
  const browser = await puppeteer.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox', '--allow-file-access-from-files', '--disable-gpu'],
  });
  let failed = 0;
  try {
    for (const f of process.argv.slice(2)) {
      const r = await check(browser, viewer, path.resolve(f));
      if (r.problems.length) failed++;
      console.log(JSON.stringify(r));
    }
  } finally {
    await browser.close();
  }
  process.exit(failed ? 1 : 0);
}
main().catch((e) => { console.error(e); process.exit(2); });
