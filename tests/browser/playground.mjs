// The playground in a real browser: headless Chromium with SwiftShader's WebGPU trains the tiny
// transformer, and the loss shown on the page must fall. Run by `cargo xtask test` after Trunk
// has built dist/; usage: node playground.mjs <dist dir> <screenshot dir>
import { chromium } from 'playwright-core';
import http from 'node:http';
import fs from 'node:fs';
import path from 'node:path';
import os from 'node:os';

const [dist, shots] = process.argv.slice(2);
// Measured on SwiftShader (about 3 s a step on 2 cores): 5.55 at step 1, 3.13 at step 10.
const STEPS = 15;
const TYPES = { '.html': 'text/html', '.js': 'text/javascript', '.wasm': 'application/wasm', '.css': 'text/css' };

function serve(dir) {
  const server = http.createServer((req, res) => {
    const file = path.join(dir, decodeURIComponent(new URL(req.url, 'http://x').pathname));
    const target = fs.existsSync(file) && fs.statSync(file).isFile() ? file : path.join(dir, 'index.html');
    res.writeHead(200, { 'content-type': TYPES[path.extname(target)] ?? 'application/octet-stream' });
    fs.createReadStream(target).pipe(res);
  });
  return new Promise((ok) => server.listen(0, '127.0.0.1', () => ok(server)));
}

async function open(url, webgpu) {
  const args = ['--no-sandbox', '--no-first-run', '--disable-background-networking', '--disable-component-update',
    '--disable-sync', '--disable-quic', '--disable-gpu-sandbox'];
  if (webgpu) args.push('--enable-unsafe-webgpu');
  const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', headless: true, args });
  const page = await browser.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  await page.goto(url);
  return { browser, page, errors };
}

let passed = 0, failed = 0;
async function test(name, body) {
  const t0 = Date.now();
  try {
    await body();
    passed++;
    console.log(`ok   ${name} (${((Date.now() - t0) / 1000).toFixed(1)} s)`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}: ${e.stack ?? e}`);
  }
}

const server = await serve(dist);
const url = `http://127.0.0.1:${server.address().port}/`;
fs.mkdirSync(shots, { recursive: true });

await test('the playground trains a transformer and its loss falls', async () => {
  const { browser, page, errors } = await open(url, true);
  try {
    await page.waitForFunction(() => document.querySelector('#status')?.textContent.startsWith('Ready'), null, { timeout: 60_000 })
      .catch(async () => { throw new Error(`no adapter: status "${await page.textContent('#status')}", errors ${errors}`); });
    await page.click('#start');
    await page.waitForFunction(() => document.querySelector('#step')?.textContent === '1', null, { timeout: 60_000 });
    const first = parseFloat(await page.textContent('#loss'));
    // Wait for the step count, but stop at once if the page reports a failure.
    await page.waitForFunction((n) => parseInt(document.querySelector('#step')?.textContent) >= n
      || /failed|Cannot/.test(document.querySelector('#status')?.textContent), STEPS, { timeout: 240_000 });
    const status = await page.textContent('#status');
    if (/failed|Cannot/.test(status)) throw new Error(`the page reports: ${status}`);
    const later = parseFloat(await page.textContent('#loss'));
    const step = await page.textContent('#step');
    await page.click('#stop');
    await page.waitForFunction(() => document.querySelector('#status')?.textContent.startsWith('Stopped'), null, { timeout: 60_000 });
    await page.screenshot({ path: path.join(shots, 'playground.png'), fullPage: true });
    console.log(`     loss ${first} at step 1, ${later} at step ${step}`);
    if (!(Math.abs(first - Math.log(256)) < 1e-3)) throw new Error(`the first loss ${first} is not ln 256`);
    if (!(later < 0.6 * first)) throw new Error(`the loss did not fall: ${first} → ${later}`);
    const curve = await page.$$('#chart svg polyline, #chart svg path');
    if (curve.length === 0) throw new Error('the loss chart has no curve');
    if (errors.length) throw new Error(`console errors: ${errors.join('\n')}`);
  } finally {
    await browser.close();
  }
});

await test('without WebGPU the page says so in plain words', async () => {
  const { browser, page } = await open(url, false);
  try {
    await page.waitForFunction(() => !document.querySelector('#status')?.textContent.startsWith('Checking'), null, { timeout: 60_000 });
    const status = await page.textContent('#status');
    console.log(`     status: ${status}`);
    if (!/WebGPU/.test(status) || /Ready/.test(status)) throw new Error(`unexpected status: ${status}`);
    if (!(await page.isDisabled('#start'))) throw new Error('Start is enabled without WebGPU');
  } finally {
    await browser.close();
  }
});

server.close();
console.log(`browser: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
