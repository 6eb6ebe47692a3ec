// The page's two engines in one headless Chromium: the tiny RMT (copy, B 32, T 16, 30 steps; ARCH=
// another model) on SwiftShader's WebGPU and on the CPU fallback in WebAssembly: the time from
// Start to the first loss point, tokens/s, and the main thread's event-loop lag while each trains
// (how long a click would wait). Numbers go to bench/RESULTS.md, never into tests.
// usage: trunk build --release && node bench/browser.mjs dist
//        node bench/browser.mjs --cpu DIST_A DIST_B   (the CPU fallback only, A B A B: two builds compared)
import { createRequire } from 'node:module';
const require = createRequire(new URL('../tests/browser/package.json', import.meta.url));
const { chromium } = require('playwright-core');
import http from 'node:http'; import fs from 'node:fs'; import path from 'node:path';
const cpuOnly = process.argv.includes('--cpu');
const dists = process.argv.slice(2).filter((a) => a !== '--cpu');
if (!dists.length) dists.push('dist');
const TYPES = { '.html': 'text/html', '.js': 'text/javascript', '.wasm': 'application/wasm', '.css': 'text/css' };
const serve = async (dist) => {
  const server = http.createServer((req, res) => { const file = path.join(dist, decodeURIComponent(new URL(req.url, 'http://x').pathname));
    const t = fs.existsSync(file) && fs.statSync(file).isFile() ? file : path.join(dist, 'index.html');
    res.writeHead(200, { 'content-type': TYPES[path.extname(t)] ?? 'application/octet-stream' }); fs.createReadStream(t).pipe(res); });
  await new Promise((ok) => server.listen(0, '127.0.0.1', ok));
  return server;
};
const runs = cpuOnly ? [0, 1].flatMap(() => dists.map((dist) => [dist, false])) : dists.flatMap((dist) => [[dist, true], [dist, false]]);
for (const [dist, webgpu] of runs) {
  const server = await serve(dist);
  const args = ['--no-sandbox', '--disable-gpu-sandbox']; if (webgpu) args.push('--enable-unsafe-webgpu');
  const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', headless: true, args });
  const page = await browser.newPage();
  await page.goto(`http://127.0.0.1:${server.address().port}/?v=1&arch=${process.env.ARCH ?? "rmt"}&steps=30`);
  await page.waitForFunction(() => !document.querySelector('#status')?.textContent.startsWith('Checking'), null, { timeout: 60000 });
  if (!webgpu) await page.click('#use-cpu');
  await page.waitForFunction(() => document.querySelector('#start')?.disabled === false, null, { timeout: 60000 });
  // Event-loop lag: the largest delay of a 10 ms timer while training (an input event waits as long).
  await page.evaluate(() => { window.gaps = []; let last = performance.now(); setInterval(() => { const now = performance.now(); window.gaps.push(now - last - 10); last = now; }, 10); });
  // The first loss point after Start: what a new user waits for.
  const pressed = Date.now();
  await page.click('#start');
  await page.waitForFunction(() => (document.querySelector('#loss')?.textContent ?? '–') !== '–', null, { timeout: 600000, polling: 20 });
  const firstLoss = (Date.now() - pressed) / 1000;
  await page.waitForFunction(() => document.querySelector('#run-list tr[data-run="1"] .run-state')?.textContent === 'done', null, { timeout: 600000 });
  const gaps = await page.evaluate(() => window.gaps.slice().sort((a, b) => a - b));
  const q = (f) => gaps[Math.floor(f * (gaps.length - 1))].toFixed(0);
  console.log(`${dist}: ${webgpu ? 'SwiftShader WebGPU' : 'CPU fallback (wasm)'}: first loss ${firstLoss.toFixed(2)} s after Start; ${await page.textContent('#speed')}; event-loop lag over ${gaps.length} ticks: median ${q(0.5)} ms, p95 ${q(0.95)} ms, max ${q(1)} ms; ticks over 100 ms: ${gaps.filter((g) => g > 100).length}`);
  await browser.close();
  server.close();
}
