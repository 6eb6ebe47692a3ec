// The playground in a real browser: headless Chromium with SwiftShader's WebGPU trains the tiny
// transformer, RMT, MemoryFormer and hybrid, the loss shown on the page must fall, the cost
// table, the variance view and the bucket histograms must show what they mean, and the residual
// viewer must show the values the CPU backend computes for the same seed and step. Run by
// `cargo xtask test` after Trunk has built dist/; usage: node playground.mjs <dist dir> <screenshot dir>
import { chromium } from 'playwright-core';
import http from 'node:http';
import fs from 'node:fs';
import path from 'node:path';
import os from 'node:os';
import { execFileSync } from 'node:child_process';

const [dist, shots] = process.argv.slice(2);
// Measured on SwiftShader (about 3 s a step on 2 cores), the same as the CPU backend gives for
// the same seed: the transformer 5.55 → 2.79 by step 15, the RMT 5.55 → 2.83 by step 12.
const STEPS = 15;
const RMT_STEPS = 12;
// The MemoryFormer: 5.55 → 2.90 by step 12.
const MF_STEPS = 12;
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

// The resmem binary `cargo test` built: the page's residuals are checked against its CPU backend.
const RESMEM = path.join(path.dirname(path.resolve(dist)), 'target', 'debug', 'resmem');

/** What `resmem analyze residual` prints for the page's training (seed 0, batch 32, T 16). */
function cpuResidual(preset, step, depth, token) {
  const out = execFileSync(RESMEM, ['analyze', 'residual', '--preset', preset, '--batch', '32', '--seq-len', '16',
    '--seed', '0', '--step', String(step), '--seq', '0', '--depth', depth, '--token', String(token), '--backend', 'cpu', '--json']);
  return JSON.parse(out.toString());
}

/** The residual viewer's data after training: its step, depth, token and values. */
async function residualShown(page) {
  return page.$eval('#residual-heatmap', (e) => ({
    step: parseInt(e.dataset.step), depth: e.dataset.depth, token: parseInt(e.dataset.token),
    values: JSON.parse(e.dataset.values || '[]'),
  }));
}

const server = await serve(dist);
const url = `http://127.0.0.1:${server.address().port}/`;
fs.mkdirSync(shots, { recursive: true });

/// Picks `arch`, trains until step `steps`, stops; returns the first and last losses shown.
async function trainOnPage(page, errors, arch, steps, shot) {
  await page.waitForFunction(() => document.querySelector('#status')?.textContent.startsWith('Ready'), null, { timeout: 60_000 })
    .catch(async () => { throw new Error(`no adapter: status "${await page.textContent('#status')}", errors ${errors}`); });
  await page.selectOption('#arch', arch);
  await page.click('#start');
  await page.waitForFunction(() => document.querySelector('#step')?.textContent === '1', null, { timeout: 60_000 });
  const first = parseFloat(await page.textContent('#loss'));
  // Wait for the step count, but stop at once if the page reports a failure.
  await page.waitForFunction((n) => parseInt(document.querySelector('#step')?.textContent) >= n
    || /failed|Cannot/.test(document.querySelector('#status')?.textContent), steps, { timeout: 240_000 });
  const status = await page.textContent('#status');
  if (/failed|Cannot/.test(status)) throw new Error(`the page reports: ${status}`);
  const later = parseFloat(await page.textContent('#loss'));
  const step = await page.textContent('#step');
  await page.click('#stop');
  await page.waitForFunction(() => document.querySelector('#status')?.textContent.startsWith('Stopped'), null, { timeout: 60_000 });
  await page.screenshot({ path: path.join(shots, shot), fullPage: true });
  console.log(`     ${arch}: loss ${first} at step 1, ${later} at step ${step}`);
  if (!(Math.abs(first - Math.log(256)) < 1e-3)) throw new Error(`the first loss ${first} is not ln 256`);
  if (!(later < 0.6 * first)) throw new Error(`the loss did not fall: ${first} → ${later}`);
  // Time per step and throughput agree: 32 sequences of 16 tokens a step.
  const speed = await page.textContent('#speed');
  const sm = /^(\d+) ms\/step · ([\d,]+) tokens\/s$/.exec(speed);
  if (!sm) throw new Error(`no speed readout: "${speed}"`);
  const [ms, tps] = [parseInt(sm[1]), parseInt(sm[2].replace(/,/g, ''))];
  if (!(ms > 0 && Math.abs(tps * ms / 1000 / 512 - 1) < 0.02 + 1 / ms)) throw new Error(`"${speed}" is not 512 tokens a step`);
  console.log(`     ${speed}`);
  const curve = await page.$$('#chart svg polyline, #chart svg path');
  if (curve.length === 0) throw new Error('the loss chart has no curve');
  if (errors.length) throw new Error(`console errors: ${errors.join('\n')}`);
}

await test('the playground trains a transformer and its loss falls', async () => {
  const { browser, page, errors } = await open(url, true);
  try {
    await page.check('#residual-open');
    await trainOnPage(page, errors, 'transformer', STEPS, 'playground.png');
    // The transformer's residual is a vector of D = 64: a strip, with its norm.
    const shown = await residualShown(page);
    const cpu = cpuResidual('tiny-transformer', shown.step, shown.depth, shown.token);
    const worst = Math.max(...shown.values.map((v, i) => Math.abs(v - cpu.values[i])));
    if (shown.values.length !== 64 || !(worst < 2e-3 * Math.max(1, ...cpu.values.map(Math.abs))))
      throw new Error(`the transformer's residual: ${shown.values.length} values, worst difference ${worst}`);
    if (!/a vector of 64/.test(await page.textContent('#residual-facts'))) throw new Error('no vector facts');
    await page.screenshot({ path: path.join(shots, 'residual-transformer.png'), fullPage: true });
  } finally {
    await browser.close();
  }
});

await test('the playground trains an RMT and shows its cost and variance view', async () => {
  const { browser, page, errors } = await open(url, true);
  try {
    const counts = await page.$$eval('#counts tr', (rows) => rows.slice(1).map((r) => [...r.cells].map((c) => c.textContent)));
    console.log(`     counts: ${JSON.stringify(counts)}`);
    // One row per architecture the page trains, each with its parameters and FLOPs per token.
    const names = counts.map((r) => r[0].split(':')[0]);
    if (names.join() !== "RMT,Hybrid,Transformer of the RMT's dimensions,Transformer trained here"
      || !counts.every((r) => /^[\d,]+$/.test(r[1]) && /^[\d,]+$/.test(r[2])))
      throw new Error(`the cost table is not the RMT, the hybrid and the two transformers with numbers: ${JSON.stringify(counts)}`);
    // The transformer the page trains is tiny-transformer (D 64, 8×16): `resmem count --arch
    // transformer --preset tiny-transformer --vocab 256 --seq-len 16` prints 165,184 parameters.
    if (!counts[3][0].includes('D=64') || counts[3][1] !== '165,184')
      throw new Error(`the trained transformer's row is not tiny-transformer's: ${JSON.stringify(counts[3])}`);
    await page.check('#residual-open');
    await trainOnPage(page, errors, 'rmt', RMT_STEPS, 'playground-rmt.png');
    // The residual viewer: block 1's FF output, token 3 of sequence 0, as the CPU computes it.
    await page.fill('#residual-depth', '4');
    await page.fill('#residual-token', '3');
    await page.waitForFunction(() => document.querySelector('#residual-heatmap')?.dataset.depth === 'block1.ff'
      && document.querySelector('#residual-heatmap')?.dataset.token === '3');
    const shown = await residualShown(page);
    const cpu = cpuResidual('tiny-rmt', shown.step, 'block1.ff', 3);
    if (shown.values.length !== 8 * 16) throw new Error(`the heatmap holds ${shown.values.length} values, not D_k×D_v = 128`);
    const scale = Math.max(1, ...cpu.values.map(Math.abs));
    const worst = Math.max(...shown.values.map((v, i) => Math.abs(v - cpu.values[i])));
    console.log(`     residual at step ${shown.step}: worst difference from the CPU ${worst.toExponential(2)} (scale ${scale.toFixed(3)})`);
    if (!(worst < 2e-3 * scale)) throw new Error(`the page's residual differs from the CPU's by ${worst}`);
    // Red cells for positive values, blue for negative, and a legend from -max to +max.
    const cells = await page.$$eval('#residual-heatmap svg rect:not(.legend)', (rs) => rs.map((r) => r.getAttribute('fill')));
    const rgb = (h) => [1, 3, 5].map((i) => parseInt(h.slice(i, i + 2), 16));
    const reds = cells.filter((h) => { const [r, , b] = rgb(h); return r > b + 20; }).length;
    const blues = cells.filter((h) => { const [r, , b] = rgb(h); return b > r + 20; }).length;
    if (cells.length !== 128 || reds === 0 || blues === 0) throw new Error(`heatmap: ${cells.length} cells, ${reds} red, ${blues} blue`);
    const legend = await page.$$eval('#residual-heatmap svg text.legend', (ts) => ts.map((t) => t.textContent.trim()));
    if (legend.length !== 3 || !legend[0].startsWith('+') || !legend[2].startsWith('-')) throw new Error(`heatmap legend: ${legend}`);
    const facts = await page.textContent('#residual-facts');
    const m = /norm ([\d.]+) · effective rank ([\d.]+) of 8/.exec(facts);
    const cpuNorm = cpu.spectrum.norm;
    if (!m || Math.abs(parseFloat(m[1]) - cpuNorm) > 2e-3 * Math.max(1, cpuNorm)) throw new Error(`facts "${facts}", CPU norm ${cpuNorm}`);
    if (Math.abs(parseFloat(m[2]) - cpu.spectrum.effective_rank) > 0.02) throw new Error(`facts "${facts}", CPU rank ${cpu.spectrum.effective_rank}`);
    if ((await page.$$('#residual-spectrum svg rect')).length !== 8) throw new Error('the spectrum is not 8 singular values');
    const chosen = await page.textContent('#residual-text .tok.chosen');
    if (!chosen) throw new Error('the input text does not mark the chosen token');
    await page.screenshot({ path: path.join(shots, 'residual-rmt.png'), fullPage: true });
    // Measurements after steps 1 and 10: the step scrubber spans them, the bars are drawn.
    const measuredAt = await page.textContent('#vstep-value');
    if (measuredAt !== '10') throw new Error(`the variance view shows step ${measuredAt}, not 10`);
    // Blue forward bars and orange backward bars, each site named once, and a legend.
    const fills = await page.$$eval('#variance-chart svg rect', (rs) => rs.map((r) => (r.getAttribute('fill') || '').toUpperCase()));
    const blue = fills.filter((f) => f === '#1F77B4').length, orange = fills.filter((f) => f === '#FF7F0E').length;
    if (blue < 4 || orange < 4) throw new Error(`the variance chart has ${blue} blue and ${orange} orange bars, not 4 of each and a legend: ${fills}`);
    const texts = await page.$$eval('#variance-chart svg text', (ts) => ts.map((t) => t.textContent.trim()));
    for (const want of ['forward σ²out/σ²in', 'backward σ²gin/σ²gout', 'closed form at init', 'attn retrieval', 'ff storage'])
      if (!texts.includes(want)) throw new Error(`the variance chart lacks "${want}": ${JSON.stringify(texts)}`);
    if (texts.filter((t) => t === 'attn retrieval').length !== 1) throw new Error(`a site is labelled more than once: ${JSON.stringify(texts)}`);
    const before = await page.innerHTML('#variance-chart');
    await page.fill('#block', '1');
    await page.waitForFunction(() => document.querySelector('#block-value')?.textContent === '1');
    if ((await page.innerHTML('#variance-chart')) === before) throw new Error('block 1 draws the same chart as block 0');
  } finally {
    await browser.close();
  }
});

await test('the playground trains a MemoryFormer and shows live bucket histograms', async () => {
  const { browser, page, errors } = await open(url, true);
  try {
    await trainOnPage(page, errors, 'memoryformer', MF_STEPS, 'playground-memoryformer.png');
    const stats = await page.textContent('#bucket-stats');
    console.log(`     ${stats}`);
    const m = /entropy ([\d.]+) · dead buckets (\d+) of (\d+)/.exec(stats);
    if (!m || m[3] !== '16') throw new Error(`no bucket statistics of a 16-bucket table: ${stats}`);
    // Bucket numbers are whole: no axis label reads 2.0.
    const axis = await page.$$eval('#histogram svg text', (ts) => ts.map((t) => t.textContent.trim()).filter((t) => /^[\d.]+$/.test(t)));
    if (!axis.includes('0') || axis.some((t) => t.includes('.'))) throw new Error(`bucket axis labels: ${axis}`);
    const bars = async () => (await page.$$('#histogram svg rect')).length;
    if ((await bars()) < 16) throw new Error(`the histogram has ${await bars()} rects, not 16 bars`);
    // ML2 hashes τ + 2 = 6 bits: 64 buckets.
    const layers = await page.$$eval('#bucket-layer option', (o) => o.map((x) => x.textContent));
    if (layers.length !== 6 || layers[2] !== 'block0.ml2') throw new Error(`layers: ${layers}`);
    await page.selectOption('#bucket-layer', '2');
    await page.waitForFunction(() => /of 64$/.test(document.querySelector('#bucket-stats')?.textContent));
    if ((await bars()) < 64) throw new Error(`ML2's histogram has ${await bars()} rects, not 64 bars`);
  } finally {
    await browser.close();
  }
});

await test('the playground trains the hybrid and shows its variance view and bucket histograms', async () => {
  const { browser, page, errors } = await open(url, true);
  try {
    await trainOnPage(page, errors, 'hybrid', MF_STEPS, 'playground-hybrid.png');
    const stats = await page.textContent('#bucket-stats');
    console.log(`     ${stats}`);
    // The memory block's ML1 hashes τ = 4 bits: 16 buckets.
    const m = /entropy ([\d.]+) · dead buckets (\d+) of (\d+)/.exec(stats);
    if (!m || m[3] !== '16') throw new Error(`no bucket statistics of a 16-bucket table: ${stats}`);
    const rects = (await page.$$('#variance-chart svg rect')).length;
    if (rects < 8) throw new Error(`the hybrid's variance chart has ${rects} rects, not 8 bars`);
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
