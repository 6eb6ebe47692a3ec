// The playground in a real browser: headless Chromium with SwiftShader's WebGPU trains the tiny
// transformer, RMT, MemoryFormer and hybrid, the loss shown on the page must fall, the cost
// table, the variance grid and bars and the bucket histograms must show what they mean, the
// residual viewer must show the values the CPU backend computes for the same seed and step, the
// controls must change the count to what `resmem count` prints and refuse a config over the
// device's limits, and runs must overlay with a legend. Each page load exercises several views,
// since SwiftShader takes seconds a step. Run by `cargo xtask test` after Trunk has built dist/;
// usage: node playground.mjs <dist dir> <screenshot dir>
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
// While working on one view: RESMEM_BROWSER_ONLY=words runs only the tests whose names hold them.
const only = process.env.RESMEM_BROWSER_ONLY;
async function test(name, body) {
  if (only && !name.includes(only)) return console.log(`not run (RESMEM_BROWSER_ONLY): ${name}`);
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

/// Waits until Start may be pressed: the device is up, and no run holds it.
async function ready(page, errors) {
  await page.waitForFunction(() => document.querySelector('#start') && !document.querySelector('#start').disabled, null, { timeout: 60_000 })
    .catch(async () => { throw new Error(`no adapter: status "${await page.textContent('#status')}", errors ${errors}`); });
}

/// Picks `arch`, trains until step `steps`, calls `whileRunning` (if any), stops.
async function trainOnPage(page, errors, arch, steps, shot, whileRunning) {
  await ready(page, errors);
  await page.selectOption('#arch', arch);
  await page.click('#start');
  // The loss is read at step 1, then every 5 steps; the newest run's row holds the points read.
  const points = () => page.$eval('#run-list tr[data-run]:last-child', (r) => JSON.parse(r.dataset.losses || '[]'));
  await page.waitForFunction(() => JSON.parse(document.querySelector('#run-list tr[data-run]:last-child')?.dataset.losses || '[]').length > 0,
    null, { timeout: 60_000 });
  const [firstStep, first] = (await points())[0];
  if (firstStep !== 1) throw new Error(`the first loss read is at step ${firstStep}, not 1`);
  // Wait for the step count, but stop at once if the page reports a failure.
  await page.waitForFunction((n) => parseInt(document.querySelector('#step')?.textContent) >= n
    || /failed|Cannot/.test(document.querySelector('#status')?.textContent), steps, { timeout: 240_000 });
  const status = await page.textContent('#status');
  if (/failed|Cannot/.test(status)) throw new Error(`the page reports: ${status}`);
  if (whileRunning) await whileRunning();
  await page.click('#stop');
  await page.waitForFunction(() => document.querySelector('#status')?.textContent.startsWith('Stopped'), null, { timeout: 60_000 });
  const [step, later] = (await points()).at(-1);
  const shownLoss = parseFloat(await page.textContent('#loss'));
  if (!(Math.abs(shownLoss - later) <= 5.1e-5)) throw new Error(`the loss shown, ${shownLoss}, is not the last read, ${later}`);
  await page.screenshot({ path: path.join(shots, shot), fullPage: true });
  console.log(`     ${arch}: loss ${first} at step 1, ${later} by step ${step}`);
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

/** What `resmem count` prints for a preset with some flags. */
function cliCount(args) {
  return JSON.parse(execFileSync(RESMEM, ['count', ...args, '--vocab', '256', '--seq-len', '16', '--json']).toString());
}

/** The cost table's rows: [name, parameters, FLOPs per token]. */
async function costRows(page) {
  return page.$$eval('#counts tr', (rows) => rows.slice(1).map((r) => [...r.cells].map((c) => c.textContent)));
}

/** Sets a control's text as a person would, and lets the page react. */
async function setControl(page, key, value) {
  await page.fill(`#ctl-${key}`, String(value));
  await page.press(`#ctl-${key}`, 'Tab');
}

/** The loss chart: the distinct stroke colours of its curves and its legend's texts. */
async function chartLines(page) {
  // The curves' colours: the axes are black.
  const strokes = await page.$$eval('#chart svg polyline', (ps) => [...new Set(ps.map((p) => (p.getAttribute('stroke') || '').toUpperCase()))]
    .filter((c) => c !== '#000000'));
  const texts = await page.$$eval('#chart svg text', (ts) => ts.map((t) => t.textContent.trim()));
  return { strokes, legend: texts.filter((t) => t.startsWith('#')) };
}

await test('controls, the cost table, a refusal, two runs overlaid, the residual viewer and the variance grid', async () => {
  const { browser, page, errors } = await open(url, true);
  try {
    await ready(page, errors);
    // The chosen config's row is what `resmem count` prints, and follows D_k.
    let rows = await costRows(page);
    console.log(`     counts: ${JSON.stringify(rows)}`);
    const cli8 = cliCount(['--arch', 'rmt', '--preset', 'tiny-rmt']);
    if (!rows[0][0].startsWith('RMT D_k=8') || rows[0][1] !== cli8.params.toLocaleString('en-US'))
      throw new Error(`the RMT's row ${JSON.stringify(rows[0])} is not resmem count's ${cli8.params}`);
    if (!rows[1][0].startsWith('Transformer of matching dimensions: Transformer D=128 H=8 D_h=16'))
      throw new Error(`no transformer of matching dimensions: ${JSON.stringify(rows)}`);
    await setControl(page, 'd_k', 16);
    const cli16 = cliCount(['--arch', 'rmt', '--preset', 'tiny-rmt', '--d-k', '16']);
    await page.waitForFunction((want) => document.querySelector('#counts tr:nth-child(2) td:nth-child(2)')?.textContent === want,
      cli16.params.toLocaleString('en-US'), { timeout: 10_000 })
      .catch(async () => { throw new Error(`D_k 16 shows ${JSON.stringify(await costRows(page))}, resmem count prints ${cli16.params}`); });
    console.log(`     D_k 8 → 16: ${cli8.params} → ${cli16.params} parameters, as resmem count prints`);
    await page.screenshot({ path: path.join(shots, 'controls.png'), fullPage: false });
    await setControl(page, 'd_k', 8);
    // A config over the device's limits is refused before anything is built, and Start still works.
    // The logits and the flat buffers are bound in windows now, so the refusal needs a buffer an op
    // binds whole: a wide RMT (D_k 512, D_v 1, R 256) at T 64 has key-gradient partial sums of
    // 3 MiB a sequence, so a batch of a third of the limit in MiB outgrows the largest binding
    // (1 GiB on SwiftShader) while the whole (about 2 GiB) stays inside wasm32's 4 GiB.
    const limitMiB = parseInt(/buffers up to ([\d,]+) MiB/.exec(await page.textContent('#status'))[1].replace(/,/g, ''));
    const batch = Math.ceil(limitMiB / 3) + 10;
    const wide = { d_k: 512, d_v: 1, rank: 256, d_ff: 4, seq_len: 64, batch };
    for (const [k, v] of Object.entries(wide)) await setControl(page, k, v);
    await page.click('#start');
    await page.waitForFunction(() => /Refused/.test(document.querySelector('#status')?.textContent), null, { timeout: 10_000 });
    const refusal = await page.textContent('#status');
    console.log(`     ${refusal}`);
    if (!/this config needs [\d.]+ MiB for the key-gradient partial sums .* in one buffer, but this GPU binds at most [\d.]+ MiB; lower batch, seq_len, rank, d_k/.test(refusal))
      throw new Error(`the refusal does not say what to shrink: ${refusal}`);
    if (await page.isDisabled('#start')) throw new Error('Start is disabled after the refusal');
    for (const [k, v] of Object.entries({ d_k: 8, d_v: 16, rank: 8, d_ff: 256, seq_len: 16, batch: 32 })) await setControl(page, k, v);

    // Run 1: the transformer, with its residual vector checked against the CPU.
    await page.check('#residual-open');
    await trainOnPage(page, errors, 'transformer', STEPS, 'playground.png');
    let shown = await residualShown(page);
    let cpu = cpuResidual('tiny-transformer', shown.step, shown.depth, shown.token);
    let worst = Math.max(...shown.values.map((v, i) => Math.abs(v - cpu.values[i])));
    if (shown.values.length !== 64 || !(worst < 2e-3 * Math.max(1, ...cpu.values.map(Math.abs))))
      throw new Error(`the transformer's residual: ${shown.values.length} values, worst difference ${worst}`);
    if (!/a vector of 64/.test(await page.textContent('#residual-facts'))) throw new Error('no vector facts');
    await page.screenshot({ path: path.join(shots, 'residual-transformer.png'), fullPage: true });

    // Run 2: the RMT. The variance grid is captured mid-training.
    const midTraining = async () => {
      await page.waitForFunction(() => document.querySelector('#vstep-value')?.textContent === '10', null, { timeout: 60_000 });
      const grid = await page.$('#variance');
      await grid.screenshot({ path: path.join(shots, 'variance-grid.png') });
    };
    await trainOnPage(page, errors, 'rmt', RMT_STEPS, 'playground-rmt.png', midTraining);
    // The residual viewer: block 1's FF output, token 3 of sequence 0, as the CPU computes it.
    await page.fill('#residual-depth', '4');
    await page.fill('#residual-token', '3');
    await page.waitForFunction(() => document.querySelector('#residual-heatmap')?.dataset.depth === 'block1.ff'
      && document.querySelector('#residual-heatmap')?.dataset.token === '3');
    shown = await residualShown(page);
    cpu = cpuResidual('tiny-rmt', shown.step, 'block1.ff', 3);
    if (shown.values.length !== 8 * 16) throw new Error(`the heatmap holds ${shown.values.length} values, not D_k×D_v = 128`);
    const scale = Math.max(1, ...cpu.values.map(Math.abs));
    worst = Math.max(...shown.values.map((v, i) => Math.abs(v - cpu.values[i])));
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
    // Each depth's effective rank for the token, the CPU's at block1.ff among them.
    const depths = await page.textContent('#residual-depths');
    console.log(`     ${depths}`);
    const ff1 = /block1\.ff ([\d.]+)/.exec(depths);
    if (!depths.startsWith('effective rank by depth: embedding') || !ff1 || Math.abs(parseFloat(ff1[1]) - cpu.spectrum.effective_rank) > 0.01)
      throw new Error(`the ranks by depth "${depths}" lack block1.ff's ${cpu.spectrum.effective_rank}`);
    const chosen = await page.textContent('#residual-text .tok.chosen');
    if (!chosen) throw new Error('the input text does not mark the chosen token');
    await page.screenshot({ path: path.join(shots, 'residual-rmt.png'), fullPage: true });

    // The variance grid: measurements after steps 1 and 10; every cell's colour says its ratio.
    const measuredAt = await page.textContent('#vstep-value');
    if (measuredAt !== '10') throw new Error(`the variance view shows step ${measuredAt}, not 10`);
    const gridCells = await page.$$eval('#variance-grid rect.vcell', (rs) => rs.map((r) => ({
      block: r.dataset.block, site: r.dataset.site, dir: r.dataset.dir, ratio: parseFloat(r.dataset.ratio),
      closed: parseFloat(r.dataset.closed), fill: r.getAttribute('fill') })));
    if (gridCells.length !== 2 * 4 * 2) throw new Error(`the grid has ${gridCells.length} cells, not 2 blocks × 4 sites × 2`);
    for (const c of gridCells) {
      const [r, , b] = rgb(c.fill);
      const ok = !(c.ratio > 0) ? c.dir === 'backward' || c.fill === '#dddddd'
        : c.ratio > 1.05 ? r > b : c.ratio < 0.95 ? b > r : Math.abs(r - b) < 40;
      if (!ok) throw new Error(`cell ${JSON.stringify(c)}: its colour does not say its ratio`);
      if (!(c.closed > 0)) throw new Error(`cell ${JSON.stringify(c)} has no closed form beside it`);
    }
    const forward = gridCells.filter((c) => c.dir === 'forward' && c.ratio > 0).length;
    const backward = gridCells.filter((c) => c.dir === 'backward' && c.ratio > 0).length;
    if (forward !== 8 || backward !== 8) throw new Error(`measured ${forward} forward and ${backward} backward cells, not 8 and 8`);
    const summary = await page.textContent('#variance-summary');
    console.log(`     ${summary}`);
    if (!/^step 10: on average the ratios sit [\d.]+× \(forward\) and [\d.]+× \(backward\) from 1/.test(summary))
      throw new Error(`variance summary: ${summary}`);
    // The step scrubber goes back to step 1; play walks forward to 10.
    await page.fill('#vstep', '0');
    await page.waitForFunction(() => document.querySelector('#vstep-value')?.textContent === '1');
    const atOne = await page.$eval('#variance-grid rect.vcell', (r) => r.dataset.ratio);
    await page.click('#vplay');
    await page.waitForFunction(() => document.querySelector('#vstep-value')?.textContent === '10', null, { timeout: 10_000 });
    if ((await page.$eval('#variance-grid rect.vcell', (r) => r.dataset.ratio)) === atOne) throw new Error('play shows the same grid at step 10 as at 1');
    // The bars of one block: blue forward, orange backward, each site named once, a legend.
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

    // Two runs: two curves in two colours, a legend entry each, labelled against the first run.
    let lines = await chartLines(page);
    console.log(`     curves ${JSON.stringify(lines)}`);
    if (lines.strokes.length !== 2 || lines.legend.length !== 2 || lines.legend[0] !== '#1 transformer' || !lines.legend[1].startsWith('#2 rmt: D_k=8'))
      throw new Error(`two runs should give two curves and two legend entries: ${JSON.stringify(lines)}`);
    const variances = await page.$$eval('#run-list .run-variance', (cs) => cs.map((c) => c.textContent));
    console.log(`     variance distance from 1 (forward / backward): ${JSON.stringify(variances)}`);
    if (variances.length !== 2 || !variances.every((v) => /^[\d.]+× \/ [\d.]+×$/.test(v))) throw new Error(`run variances: ${variances}`);
    // Hide the first run, then delete it: one curve, one row.
    await page.uncheck('#run-list tr[data-run="1"] .run-visible');
    await page.waitForFunction(() => document.querySelectorAll('#chart svg text').length > 0
      && ![...document.querySelectorAll('#chart svg text')].some((t) => t.textContent.trim() === '#1 transformer'));
    lines = await chartLines(page);
    if (lines.strokes.length !== 1 || lines.legend.length !== 1) throw new Error(`after hiding run 1: ${JSON.stringify(lines)}`);
    await page.click('#run-list tr[data-run="1"] .run-delete');
    await page.waitForFunction(() => !document.querySelector('#run-list tr[data-run="1"]'));
    if ((await page.$$('#run-list tr[data-run]')).length !== 1) throw new Error('deleting run 1 left another count of rows');
  } finally {
    await browser.close();
  }
});

await test('one click trains the RMT, the transformer of its dimensions and a MemoryFormer, overlaid', async () => {
  const { browser, page, errors } = await open(url, true);
  try {
    await ready(page, errors);
    await setControl(page, 'steps', 4);
    await page.click('#compare');
    await page.waitForFunction(() => [...document.querySelectorAll('#run-list .run-state')].filter((c) => c.textContent === 'done').length === 3
      || /failed|Cannot|Refused/.test(document.querySelector('#status')?.textContent), null, { timeout: 240_000 });
    const status = await page.textContent('#status');
    if (/failed|Cannot|Refused/.test(status)) throw new Error(`the page reports: ${status}`);
    const models = await page.$$eval('#run-list .run-model', (cs) => cs.map((c) => c.textContent));
    console.log(`     ${JSON.stringify(models)}`);
    if (!models[0].startsWith('RMT D_k=8 D_v=16 R=8 D_FF=256 L=2') || models[1] !== 'Transformer D=128 H=8 D_h=16 D_FF=256 L=2'
      || models[2] !== 'MemoryFormer d=128 H=8 τ=4 L=2')
      throw new Error(`not the RMT, the transformer of its dimensions and a MemoryFormer of its width: ${JSON.stringify(models)}`);
    const steps = await page.$$eval('#run-list tr[data-run] td:nth-child(5)', (cs) => cs.map((c) => c.textContent));
    if (steps.join() !== '4,4,4') throw new Error(`steps per run: ${steps}`);
    const lines = await chartLines(page);
    console.log(`     curves ${JSON.stringify(lines)}`);
    if (lines.strokes.length !== 3 || lines.legend.length !== 3 || lines.legend[0] !== '#1 rmt'
      || !lines.legend[1].startsWith('#2 transformer: D=128') || !lines.legend[2].startsWith('#3 memoryformer: d=128'))
      throw new Error(`three runs should give three labelled curves: ${JSON.stringify(lines)}`);
    await page.screenshot({ path: path.join(shots, 'three-runs.png'), fullPage: true });
    if (errors.length) throw new Error(`console errors: ${errors.join('\n')}`);
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
