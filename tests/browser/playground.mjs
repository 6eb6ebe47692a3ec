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
const ROOT = path.dirname(path.resolve(dist));
const RESMEM = path.join(ROOT, 'target', 'debug', 'resmem');
// The JAX side's interpreter, which `cargo xtask test` sets up: a JAX run is imported too.
const PYTHON = path.join(ROOT, '.venv-jax', 'bin', 'python');

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
  // A run's end also keeps a checkpoint and draws a sample.
  await page.waitForFunction(() => document.querySelector('#status')?.textContent.startsWith('Stopped'), null, { timeout: 120_000 });
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

/**
 * The one-screen layout at a window size: the loss chart, the residual heatmap and the variance
 * grid are in view together without scrolling, the page is no wider or taller than the window,
 * every visible text is at least 11 px, the heatmap's cells span at least 320 px on their longer
 * side, and every control has a name a screen reader says and can be reached with Tab.
 */
async function checkLayout(page, width, height) {
  await page.setViewportSize({ width, height });
  const r = await page.evaluate(() => {
    // As a new visitor sees them: each view scrolled to its top.
    document.querySelectorAll('.pane').forEach((p) => { p.scrollTop = 0; });
    const box = (sel) => { const e = document.querySelector(sel); if (!e) return null; const b = e.getBoundingClientRect();
      const pane = e.closest('.pane')?.getBoundingClientRect() ?? { top: 0, bottom: innerHeight };
      return { x: Math.round(b.x), y: Math.round(b.y), w: Math.round(b.width), h: Math.round(b.height),
        top: Math.round(pane.top), bottom: Math.round(pane.bottom) }; };
    const shown = (e) => e.getClientRects().length > 0 && getComputedStyle(e).visibility !== 'hidden';
    const small = [...document.querySelectorAll('body *')]
      .filter((e) => shown(e) && [...e.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim()))
      .map((e) => [e.tagName, parseFloat(getComputedStyle(e).fontSize), e.textContent.trim().slice(0, 24)])
      .filter(([, size]) => size < 11);
    const cells = [...document.querySelectorAll('#residual-heatmap svg rect:not(.legend)')];
    const span = (a, b) => Math.max(0, ...cells.map((c) => parseFloat(c.getAttribute(a)) + parseFloat(c.getAttribute(b))));
    const unnamed = [...document.querySelectorAll('button, input, select, textarea, summary')].filter(shown)
      .filter((e) => !(e.labels?.length || e.getAttribute('aria-label') || e.textContent.trim() || e.title) || e.tabIndex < 0)
      .map((e) => e.id || e.outerHTML.slice(0, 60));
    return { page: [document.documentElement.scrollWidth, document.documentElement.scrollHeight],
      chart: box('#chart svg'), heat: box('#residual-heatmap svg'), grid: box('#variance-grid svg'),
      heatSide: Math.max(span('x', 'width'), span('y', 'height')), small, unnamed };
  });
  console.log(`     ${width}×${height}: page ${r.page.join('×')}; loss chart ${JSON.stringify(r.chart)}, heatmap ${JSON.stringify(r.heat)} `
    + `(cells ${r.heatSide} px), variance grid ${JSON.stringify(r.grid)}`);
  if (r.page[0] > width || r.page[1] > height) throw new Error(`at ${width}×${height} the page scrolls: it is ${r.page.join('×')}`);
  for (const [name, b] of [['loss chart', r.chart], ['residual heatmap', r.heat], ['variance grid', r.grid]]) {
    // Whole across, and its top (or all of it, when shorter) on screen, inside its view's pane.
    if (!b || b.x < 0 || b.x + b.w > width || b.y < b.top || b.y + Math.min(b.h, 150) > Math.min(height, b.bottom))
      throw new Error(`at ${width}×${height} the ${name} is not in view: ${JSON.stringify(b)}`);
  }
  if (r.heatSide < 320) throw new Error(`the residual heatmap spans ${r.heatSide} px, under 320`);
  if (r.small.length) throw new Error(`text under 11 px: ${JSON.stringify(r.small.slice(0, 8))}`);
  if (r.unnamed.length) throw new Error(`controls without a name, or out of the Tab order: ${JSON.stringify(r.unnamed)}`);
  await page.screenshot({ path: path.join(shots, `layout-${width}x${height}.png`) });
}

await test('controls, the cost table, a refusal, two runs overlaid, the residual viewer and the variance grid', async () => {
  const { browser, page, errors } = await open(url, true);
  try {
    await ready(page, errors);
    // A first visit, with no link, shows the product: the RMT chosen and the residual view on.
    if ((await page.inputValue('#arch')) !== 'rmt' || !(await page.isChecked('#residual-open')))
      throw new Error(`first open: model ${await page.inputValue('#arch')}, residual view ${await page.isChecked('#residual-open')}`);
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
    const readyStatus = await page.textContent('#status');
    // SwiftShader is a CPU emulating a GPU: the page says so, and offers its faster CPU engine.
    if (!/CPU emulating a GPU/.test(readyStatus) || !/faster here/.test((await page.textContent('#use-cpu')) ?? ''))
      throw new Error(`on SwiftShader the page should offer the CPU engine: status "${readyStatus}"`);
    const limitMiB = parseInt(/buffers up to ([\d,]+) MiB/.exec(readyStatus)[1].replace(/,/g, ''));
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

    // "Check this GPU": every kernel family on SwiftShader against the CPU twin, each passing.
    await page.click('#more-actions > summary');
    await page.click('#check-gpu');
    await page.waitForSelector('#selftest', { timeout: 240_000 });
    const families = await page.$$eval('#selftest tbody tr', (rows) => rows.map((r) => [r.dataset.family, r.dataset.result]));
    const wanted = ['matmul', 'elementwise', 'embedding', 'norm', 'attention', 'cross_entropy', 'optim', 'residual_matrix', 'memory', 'hyper', 'depth'];
    if (JSON.stringify(families.map(([f]) => f)) !== JSON.stringify(wanted) || families.some(([, r]) => r !== 'pass'))
      throw new Error(`selftest rows: ${JSON.stringify(families)}; status "${await page.textContent('#status')}"`);
    if (!/Every kernel on .* matches the CPU/.test(await page.textContent('#status')))
      throw new Error(`selftest status: ${await page.textContent('#status')}`);
    await ready(page, errors);

    // Run 1: the transformer, with its residual vector checked against the CPU.
    await page.check('#residual-open');
    await trainOnPage(page, errors, 'transformer', STEPS, 'playground.png');
    let shown = await residualShown(page);
    let cpu = cpuResidual('tiny-transformer', shown.step, shown.depth, shown.token);
    let worst = Math.max(...shown.values.map((v, i) => Math.abs(v - cpu.values[i])));
    if (shown.values.length !== 64 || !(worst < 2e-3 * Math.max(1, ...cpu.values.map(Math.abs))))
      throw new Error(`the transformer's residual: ${shown.values.length} values, worst difference ${worst}`);
    if (!/a vector of 64/.test(await page.textContent('#residual-facts'))) throw new Error('no vector facts');
    // What each block writes, against the residual it lands in: the page's numbers are the CLI's.
    const pageWrites = JSON.parse(await page.$eval('#residual-writes', (e) => e.dataset.writes));
    const cliWrites = JSON.parse(execFileSync(RESMEM, ['analyze', 'residual', '--preset', 'tiny-transformer', '--batch', '32',
      '--seq-len', '16', '--seed', '0', '--step', String(shown.step), '--seq', '0', '--backend', 'cpu', '--json']).toString())
      .slice(1).map((r) => [r.depth, r.write_relative]);
    if (pageWrites.length !== 4 || pageWrites.length !== cliWrites.length || pageWrites.some((w, i) => w.depth !== cliWrites[i][0]
      || !(Math.abs(w.relative - cliWrites[i][1]) <= 1e-3 * Math.max(1, cliWrites[i][1]))))
      throw new Error(`block writes: page ${JSON.stringify(pageWrites)}, CLI ${JSON.stringify(cliWrites)}`);
    console.log(`     block writes ${pageWrites.map((w) => `${w.depth} ${w.relative.toFixed(3)}×`).join(' · ')}`);
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
    await page.click('#one-block > summary');
    await page.fill('#block', '1');
    await page.waitForFunction(() => document.querySelector('#block-value')?.textContent === '1');
    if ((await page.innerHTML('#variance-chart')) === before) throw new Error('block 1 draws the same chart as block 0');

    // One screen at both common window sizes, in light and dark; the keyboard reaches Start
    // and every setting.
    await checkLayout(page, 1280, 800);
    // From the top, as a person starts: a click on the title, then Tab after Tab.
    await page.click('header.top h1');
    const reached = [];
    for (let i = 0; i < 300 && !(reached.length > 1 && reached[reached.length - 1] === reached[0]); i++) {
      await page.keyboard.press('Tab');
      reached.push(await page.evaluate(() => document.activeElement?.id || document.activeElement?.tagName));
    }
    const settings = await page.$$eval('.panel input, .panel select', (es) => es.filter((e) => e.getClientRects().length && !e.disabled).map((e) => e.id));
    const missed = ['start', ...settings].filter((id) => !reached.includes(id));
    console.log(`     Tab reaches ${new Set(reached).size} controls, Start among them`);
    if (missed.length) throw new Error(`the keyboard does not reach ${JSON.stringify(missed)}`);
    await checkLayout(page, 1920, 1080);
    await page.emulateMedia({ colorScheme: 'dark' });
    const dark = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
    await page.screenshot({ path: path.join(shots, 'layout-dark-1280x800.png') });
    await page.emulateMedia({ colorScheme: 'light' });
    const light = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
    const luminance = (c) => { const [r, g, b] = c.match(/\d+/g).map(Number); return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255; };
    if (!(luminance(dark) < 0.2 && luminance(light) > 0.9)) throw new Error(`the page ignores the colour scheme: dark ${dark}, light ${light}`);
    await page.setViewportSize({ width: 1280, height: 720 });

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
      || /failed|Cannot|Refused/.test(document.querySelector('#status')?.textContent), null, { timeout: 480_000 });
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
    // One bar a bucket, labelled with its bucket and hits, in bucket order; its bars at 0 hits
    // are the statistics' dead buckets.
    const bars = async (n) => {
      const shown = await page.$$eval('#histogram svg rect.bar', (rs) => rs.map((r) => ({ bucket: +r.dataset.bucket, hits: +r.dataset.hits })));
      if (shown.length !== n || shown.some((b, i) => b.bucket !== i)) throw new Error(`bars ${JSON.stringify(shown)} are not buckets 0 to ${n - 1}`);
      const dead = +/dead buckets (\d+) of/.exec(await page.textContent('#bucket-stats'))[1];
      const zero = shown.filter((b) => b.hits === 0).length;
      if (zero !== dead) throw new Error(`${zero} bars at 0 hits, but the statistics say ${dead} dead buckets`);
      if (!shown.some((b) => b.hits > 0)) throw new Error('every bar is at 0 hits');
    };
    await bars(16);
    // ML2 hashes τ + 2 = 6 bits: 64 buckets.
    const layers = await page.$$eval('#bucket-layer option', (o) => o.map((x) => x.textContent));
    if (layers.length !== 6 || layers[2] !== 'block0.ml2') throw new Error(`layers: ${layers}`);
    await page.selectOption('#bucket-layer', '2');
    await page.waitForFunction(() => /of 64$/.test(document.querySelector('#bucket-stats')?.textContent));
    await bars(64);
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
    // The variance grid: one cell per site and direction, each labelled, each a measured ratio.
    const cells = await page.$$eval('#variance-grid rect.vcell', (rs) => rs.map((r) => ({
      at: `${r.dataset.block} ${r.dataset.site}`, dir: r.dataset.dir, ratio: parseFloat(r.dataset.ratio) })));
    const sites = [...new Set(cells.map((c) => c.at))];
    console.log(`     variance grid: ${sites.length} sites, ${cells.length} cells (${sites.join(', ')})`);
    if (sites.length < 4 || cells.length !== 2 * sites.length
      || sites.some((at) => cells.filter((c) => c.at === at).map((c) => c.dir).sort().join() !== 'backward,forward')
      || cells.some((c) => !(c.ratio > 0 && Number.isFinite(c.ratio))))
      throw new Error(`the hybrid's variance grid: ${JSON.stringify(cells)}`);
  } finally {
    await browser.close();
  }
});

/** Rows of a run's metrics.jsonl, by step. */
function metricsByStep(run) {
  const rows = fs.readFileSync(path.join(run, 'metrics.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l));
  return new Map(rows.filter((r) => r.loss !== undefined).map((r) => [r.step, r.loss]));
}

/** The losses the page read for run `id`, as [step, loss] pairs. */
async function pageLosses(page, id) {
  return page.$eval(`#run-list tr[data-run="${id}"]`, (r) => JSON.parse(r.dataset.losses || '[]'));
}

/** Every point the page read agrees with the CLI's loss at that step. */
function sameLosses(pagePoints, cli, tolerance, what) {
  for (const [step, loss] of pagePoints) {
    const want = cli.get(step);
    if (want === undefined || !(Math.abs(loss - want) <= tolerance * Math.max(1, Math.abs(want))))
      throw new Error(`${what}: the page's loss at step ${step} is ${loss}, the CLI's ${want}`);
  }
  console.log(`     ${what}: ${pagePoints.map(([s, l]) => `step ${s} ${l.toFixed(5)} (CLI ${cli.get(s).toFixed(5)})`).join(', ')}`);
}

/** Clicks the button `selector` and saves the file it offers; returns its path. */
async function downloadFrom(page, selector, dir) {
  const [download] = await Promise.all([page.waitForEvent('download'), page.click(selector)]);
  const file = path.join(dir, download.suggestedFilename());
  await download.saveAs(file);
  return file;
}

function cli(args) {
  return execFileSync(RESMEM, args, { env: { ...process.env, XDG_RUNTIME_DIR: process.env.XDG_RUNTIME_DIR || os.tmpdir() } }).toString();
}

await test('a link restores its settings and trains the CLI\'s losses; checkpoints go from page to CLI and back, and from JAX to the page; runs survive a reload', async () => {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'resmem-link-'));
  const query = 'v=1&d_k=4&seed=7&lr=0.003&steps=10';
  const { browser, page, errors } = await open(`${url}?${query}`, true);
  try {
    await ready(page, errors);
    const shownValues = async () => ({ d_k: await page.inputValue('#ctl-d_k'), seed: await page.inputValue('#ctl-seed'),
      lr: await page.inputValue('#ctl-lr'), steps: await page.inputValue('#ctl-steps'), arch: await page.inputValue('#arch') });
    const restored = await shownValues();
    if (JSON.stringify(restored) !== JSON.stringify({ d_k: '4', seed: '7', lr: '0.003', steps: '10', arch: 'rmt' }))
      throw new Error(`the link's settings were not restored: ${JSON.stringify(restored)}`);
    // "Copy link" gives a link that restores the same settings in a fresh page.
    await page.click('#more-actions > summary');
    await page.click('#copy-link');
    await page.waitForFunction(() => /link.*http/.test(document.querySelector('#status')?.textContent));
    const copied = /(http\S+)$/.exec(await page.textContent('#status'))[1];
    console.log(`     copied: ${copied}`);
    const again = await browser.newPage();
    await again.goto(copied);
    await again.waitForSelector('#ctl-d_k');
    const second = { d_k: await again.inputValue('#ctl-d_k'), seed: await again.inputValue('#ctl-seed'), lr: await again.inputValue('#ctl-lr'),
      steps: await again.inputValue('#ctl-steps'), arch: await again.inputValue('#arch') };
    if (JSON.stringify(second) !== JSON.stringify(restored)) throw new Error(`the copied link restores ${JSON.stringify(second)}`);
    await again.close();

    // The whole 10-step run, and the same config, seed and backend kind on the CLI (lavapipe).
    await page.click('#start');
    await page.waitForFunction(() => document.querySelector('#run-list tr[data-run="1"] .run-state')?.textContent === 'done'
      || /failed|Cannot|Refused/.test(document.querySelector('#status')?.textContent), null, { timeout: 240_000 });
    if (/failed|Cannot|Refused/.test(await page.textContent('#status'))) throw new Error(await page.textContent('#status'));
    const cliRun = path.join(tmp, 'cli');
    cli(['train', '--preset', 'tiny-rmt', '--d-k', '4', '--seed', '7', '--lr', '0.003', '--steps', '10', '--log-every', '1',
      '--backend', 'gpu', '--out', cliRun]);
    sameLosses(await pageLosses(page, 1), metricsByStep(cliRun), 1e-4, 'page (SwiftShader) against CLI (lavapipe)');

    // The page's checkpoint is a run for the CLI: its held-out loss is the CLI run's.
    const ckpt = await downloadFrom(page, '#run-list tr[data-run="1"] .run-checkpoint', tmp);
    const fromPage = JSON.parse(cli(['eval', '--run', ckpt, '--backend', 'cpu', '--json']));
    const fromCli = JSON.parse(cli(['eval', '--run', cliRun, '--backend', 'cpu', '--json']));
    console.log(`     resmem eval of ${path.basename(ckpt)}: val_loss ${fromPage.val_loss}; of the CLI's run: ${fromCli.val_loss}`);
    if (!(Math.abs(fromPage.val_loss - fromCli.val_loss) < 1e-3)) throw new Error('the page\'s checkpoint is not the CLI\'s model');
    // Metrics and charts download too.
    const jsonl = fs.readFileSync(await downloadFrom(page, '#run-list tr[data-run="1"] .run-jsonl', tmp), 'utf8').trim().split('\n').map((l) => JSON.parse(l));
    // The export widens each f32 loss to f64 as the CLI does; the run list holds the f32's shortest form: equal as f32s.
    const asF32 = (points) => JSON.stringify(points.map(([s, l]) => [s, Math.fround(l)]));
    if (asF32(jsonl.map((r) => [r.step, r.loss])) !== asF32(await pageLosses(page, 1))) throw new Error(`metrics.jsonl: ${JSON.stringify(jsonl)}`);
    const csv = fs.readFileSync(await downloadFrom(page, '#run-list tr[data-run="1"] .run-csv', tmp), 'utf8');
    if (!csv.startsWith('step,loss\n1,')) throw new Error(`csv: ${csv.slice(0, 40)}`);
    const svg = fs.readFileSync(await downloadFrom(page, '.save-svg[data-target="chart"]', tmp), 'utf8');
    if (!svg.startsWith('<svg') || !svg.includes('#1 rmt')) throw new Error(`the chart's SVG: ${svg.slice(0, 80)}`);
    const png = fs.readFileSync(await downloadFrom(page, '.save-png[data-target="chart"]', tmp));
    if (png.subarray(1, 4).toString() !== 'PNG' || png.length < 2000) throw new Error(`the chart's PNG is ${png.length} bytes`);

    // Bad files are refused with a reason.
    await page.setInputFiles('#import', { name: 'notes.txt', mimeType: 'text/plain', buffer: Buffer.from('not a checkpoint') });
    await page.waitForFunction(() => /Cannot import notes.txt/.test(document.querySelector('#status')?.textContent));
    console.log(`     ${await page.textContent('#status')}`);
    if (!/not a safetensors file/.test(await page.textContent('#status'))) throw new Error(await page.textContent('#status'));
    await page.setInputFiles('#import', path.join(cliRun, 'model.safetensors'));
    await page.waitForFunction(() => /Cannot import model.safetensors/.test(document.querySelector('#status')?.textContent));
    if (!/model file, not a checkpoint/.test(await page.textContent('#status'))) throw new Error(await page.textContent('#status'));

    // The CLI's checkpoint in the page: its residuals are what `resmem analyze residual` computes.
    await page.check('#residual-open');
    await ready(page, errors);  // opening the view on an idle page reads run 1's checkpoint again
    const cliCkpt = fs.readdirSync(path.join(cliRun, 'checkpoints')).sort().at(-1);
    const t0 = Date.now();
    await page.setInputFiles('#import', path.join(cliRun, 'checkpoints', cliCkpt));
    await page.waitForFunction((name) => /^Imported/.test(document.querySelector('#status')?.textContent)
      || document.querySelector('#status')?.textContent.includes(`Cannot import ${name}`), cliCkpt, { timeout: 120_000 });
    console.log(`     ${await page.textContent('#status')} (${(Date.now() - t0) / 1000} s)`);
    if (!/^Imported/.test(await page.textContent('#status'))) throw new Error(await page.textContent('#status'));
    // Another token is read from the residuals shown; no new read.
    await page.fill('#residual-depth', '4');
    await page.fill('#residual-token', '3');
    await page.waitForFunction(() => document.querySelector('#residual-heatmap')?.dataset.depth === 'block1.ff'
      && document.querySelector('#residual-heatmap')?.dataset.token === '3');
    const shown = await residualShown(page);
    const want = JSON.parse(cli(['analyze', 'residual', '--run', cliRun, '--depth', 'block1.ff', '--token', '3', '--backend', 'cpu', '--json']));
    const worst = Math.max(...shown.values.map((v, i) => Math.abs(v - want.values[i])));
    console.log(`     imported residual at step ${shown.step}: ${shown.values.length} values, worst difference from the CLI ${worst.toExponential(2)}`);
    if (shown.step !== 10 || shown.values.length !== 4 * 16 || !(worst < 2e-3 * Math.max(1, ...want.values.map(Math.abs))))
      throw new Error('the imported run\'s residuals are not the CLI\'s');
    // Every head's attention weights are `resmem analyze attention`'s on the same checkpoint and
    // sequence, each row a distribution over the tokens up to it, the chosen token's outlined.
    const pagePatterns = JSON.parse(await page.$eval('#residual-attention', (e) => e.dataset.patterns || '[]'));
    const cliPatterns = JSON.parse(cli(['analyze', 'attention', '--run', cliRun, '--backend', 'cpu', '--json']));
    if (pagePatterns.length === 0 || pagePatterns.length !== cliPatterns.length)
      throw new Error(`attention: ${pagePatterns.length} heads in the page, ${cliPatterns.length} from the CLI`);
    const tt = Math.round(Math.sqrt(pagePatterns[0].weights.length));
    let attWorst = 0;
    pagePatterns.forEach((p, k) => {
      const q = cliPatterns[k];
      if (p.block !== q.block || p.head !== q.head) throw new Error(`attention: ${p.block} head ${p.head} against ${q.block} head ${q.head}`);
      for (let i = 0; i < tt; i++) {
        const row = p.weights.slice(i * tt, (i + 1) * tt);
        if (Math.abs(row.reduce((a, b) => a + b, 0) - 1) > 1e-9 || row.slice(i + 1).some((w) => w !== 0))
          throw new Error(`attention ${p.block} head ${p.head}: row ${i} is ${JSON.stringify(row)}`);
      }
      attWorst = Math.max(attWorst, ...p.weights.map((w, i) => Math.abs(w - q.weights[i])));
    });
    const outlined = await page.$$eval('#residual-attention rect.chosen-row', (rs) => rs.map((r) => r.getAttribute('y')));
    console.log(`     imported attention: ${pagePatterns.length} heads of ${tt}×${tt}, worst difference from the CLI ${attWorst.toExponential(2)}`);
    if (!(attWorst < 2e-3)) throw new Error('the imported run\'s attention is not the CLI\'s');
    if (outlined.length !== pagePatterns.length) throw new Error(`${outlined.length} outlined rows for ${pagePatterns.length} heads`);
    // The RMT's key slots are `resmem analyze keys`'s, each block's stored shares adding to 1.
    const pageKeys = JSON.parse(await page.$eval('#residual-keys', (e) => e.dataset.keys || '[]'));
    const cliKeys = JSON.parse(cli(['analyze', 'keys', '--run', cliRun, '--backend', 'cpu', '--json']));
    if (pageKeys.length === 0 || pageKeys.length !== cliKeys.length) throw new Error(`key slots: ${pageKeys.length} in the page, ${cliKeys.length} from the CLI`);
    const numbers = (k) => [...k.retrieval, ...k.storage, k.stored_share];
    const keysWorst = Math.max(...pageKeys.flatMap((k, i) => numbers(k).map((x, j) => Math.abs(x - numbers(cliKeys[i])[j]) / Math.max(1, Math.abs(x)))));
    const shareSums = {};
    pageKeys.forEach((k) => { shareSums[k.block] = (shareSums[k.block] ?? 0) + k.stored_share; });
    console.log(`     imported key slots: ${pageKeys.length}, worst difference from the CLI ${keysWorst.toExponential(2)}, shares by block ${JSON.stringify(shareSums)}`);
    if (!(keysWorst < 2e-3)) throw new Error('the imported run\'s key slots are not the CLI\'s');
    if (Object.values(shareSums).some((x) => Math.abs(x - 1) > 1e-9)) throw new Error(`stored shares: ${JSON.stringify(shareSums)}`);
    // The logit lens of the token the page read: `resmem analyze lens`'s top tokens, their
    // probabilities and the KL to the output at every depth, 0 at the last.
    const lensToken = await page.$eval('#residual-lens', (e) => e.dataset.token);
    const pageLens = JSON.parse(await page.$eval('#residual-lens', (e) => e.dataset.lens || '[]'));
    const cliLens = JSON.parse(cli(['analyze', 'lens', '--run', cliRun, '--token', lensToken, '--backend', 'cpu', '--json']));
    if (pageLens.length === 0 || pageLens.length !== cliLens.length) throw new Error(`lens: ${pageLens.length} depths in the page, ${cliLens.length} from the CLI`);
    let lensWorst = 0;
    pageLens.forEach((r, i) => {
      const q = cliLens[i];
      if (r.depth !== q.depth || r.top.length !== 5 || r.top.some(([tok], j) => tok !== q.top[j][0]))
        throw new Error(`lens at ${r.depth}: page ${JSON.stringify(r.top)}, CLI ${JSON.stringify(q.top)}`);
      lensWorst = Math.max(lensWorst, Math.abs(r.kl_to_final - q.kl_to_final), ...r.top.map(([, p], j) => Math.abs(p - q.top[j][1])));
    });
    console.log(`     imported logit lens of token ${lensToken}: ${pageLens.map((r) => `${r.depth} KL ${r.kl_to_final.toFixed(3)}`).join(' · ')}; worst difference from the CLI ${lensWorst.toExponential(2)}`);
    if (!(lensWorst < 2e-3) || pageLens[pageLens.length - 1].kl_to_final !== 0) throw new Error('the imported run\'s logit lens is not the CLI\'s');
    // Direct logit attribution of the lens token's top prediction: `resmem analyze attribute`'s
    // shares, adding up to the logit; the ablation asked for: `resmem analyze ablate`'s changes.
    const dlaToken = await page.$eval('#residual-dla', (e) => e.dataset.token);
    const target = await page.$eval('#residual-dla', (e) => e.dataset.target);
    const pageDla = JSON.parse(await page.$eval('#residual-dla', (e) => e.dataset.attribution || 'null'));
    const cliDla = JSON.parse(cli(['analyze', 'attribute', '--run', cliRun, '--token', dlaToken, '--target', `#${target}`, '--backend', 'cpu', '--json']));
    if (!pageDla) throw new Error('the imported run shows no attribution');
    const shares = (a) => [a.logit, ...a.writes.map((s) => s.logit), ...a.heads.map((s) => s.logit), ...a.groups.map((s) => s.logit)];
    const names = (a) => [...a.writes, ...a.heads, ...a.groups].map((s) => s.site).join(',');
    if (names(pageDla) !== names(cliDla)) throw new Error(`attribution sites: page ${names(pageDla)}, CLI ${names(cliDla)}`);
    const dlaWorst = Math.max(...shares(pageDla).map((x, i) => Math.abs(x - shares(cliDla)[i]) / Math.max(1, Math.abs(x))));
    const writeSum = pageDla.writes.reduce((a, s) => a + s.logit, 0);
    console.log(`     imported attribution of token ${dlaToken}'s logit of #${target}: ${pageDla.logit.toFixed(4)}, writes sum ${writeSum.toFixed(4)}, `
      + `${pageDla.heads.length} heads, ${pageDla.groups.length} slots; worst difference from the CLI ${dlaWorst.toExponential(2)}`);
    if (!(dlaWorst < 2e-3) || !(Math.abs(writeSum - pageDla.logit) < 1e-3 * Math.max(1, Math.abs(pageDla.logit))))
      throw new Error('the imported run\'s attribution is not the CLI\'s');
    // Ablations asked for now read the checkpoint again.
    await page.fill('#residual-ablate', 'block0.attn, slot1');
    await page.locator('#residual-ablate').blur();
    await page.selectOption('#residual-how', 'mean');
    await page.waitForFunction(() => {
      const a = JSON.parse(document.querySelector('#residual-ablation')?.dataset.ablation || 'null');
      return a?.Err || (a?.Ok?.sites?.join() === 'block0.attn,slot1' && a.Ok.how === 'mean');
    }, null, { timeout: 120_000 });
    await ready(page, errors);
    const pageAbl = JSON.parse(await page.$eval('#residual-ablation', (e) => e.dataset.ablation || 'null'));
    if (!pageAbl?.Ok) throw new Error(`the imported run's ablation: ${JSON.stringify(pageAbl)} (${await page.textContent('#residual-ablation')})`);
    // The read that answered reads the viewer's token now (3), and its top prediction.
    const ablToken = await page.$eval('#residual-dla', (e) => e.dataset.token);
    const ablTarget = await page.$eval('#residual-dla', (e) => e.dataset.target);
    const cliAbl = JSON.parse(cli(['analyze', 'ablate', '--run', cliRun, '--sites', 'block0.attn,slot1', '--how', 'mean', '--token', ablToken,
      '--target', `#${ablTarget}`, '--backend', 'cpu', '--json']));
    const both = cliAbl.ablations.at(-1);
    const ablWorst = Math.max(Math.abs(pageAbl.Ok.loss_change - both.loss_change), Math.abs(pageAbl.Ok.logit_change - both.logit_change));
    console.log(`     imported mean-ablation of block0.attn and slot1 at token ${ablToken}: loss ${pageAbl.Ok.loss_change.toFixed(4)}, logit ${pageAbl.Ok.logit_change.toFixed(4)}; `
      + `worst difference from the CLI ${ablWorst.toExponential(2)}`);
    if (!(ablWorst < 2e-3) || pageAbl.Ok.loss_change === 0) throw new Error('the imported run\'s ablation is not the CLI\'s');
    // Two prompts to patch between, and two sites: each costs (positions + 1) forwards of the
    // batch, about 2 s each on SwiftShader.
    await page.fill('#patch-sites', 'block0.attn, block1.ff.resid');
    await page.locator('#patch-sites').blur();
    await page.fill('#patch-clean', 'abcab');
    await page.locator('#patch-clean').blur();
    await page.fill('#patch-corrupt', 'abdab');
    await page.locator('#patch-corrupt').blur();
    await page.waitForFunction(() => {
      const p = JSON.parse(document.querySelector('#residual-patching')?.dataset.patching || 'null');
      return p?.Err || p?.Ok?.ask?.sites?.length === 2;
    }, null, { timeout: 240_000 });
    await ready(page, errors);
    // The patching table: every site's fraction recovered at each position and at all of them,
    // and attribution patching's estimates, are `resmem analyze patch`'s on the same prompts.
    const pagePatch = JSON.parse(await page.$eval('#residual-patching', (e) => e.dataset.patching || 'null'));
    if (!pagePatch?.Ok) throw new Error(`the imported run's patching: ${JSON.stringify(pagePatch)} (${await page.textContent('#residual-patching-readout')})`);
    const patchSites = pagePatch.Ok.rows.map((r) => r.site);
    const cliPatch = JSON.parse(cli(['analyze', 'patch', '--run', cliRun, '--prompt', 'abcab', '--corrupt', 'abdab', '--sites', patchSites.join(','),
      '--backend', 'cpu', '--json']));
    const cells = (rows) => rows.flatMap((r) => [r.all, ...r.positions, r.estimated_all, ...r.estimated_positions]);
    const patchWorst = Math.max(...cells(pagePatch.Ok.rows).map((x, i) => Math.abs(x - cells(cliPatch.patches)[i])),
      Math.abs(pagePatch.Ok.clean - cliPatch.clean), Math.abs(pagePatch.Ok.corrupt - cliPatch.corrupt));
    const last = pagePatch.Ok.rows.at(-1);
    console.log(`     imported patching of "abcab" into "abdab": ${patchSites.length} sites × ${pagePatch.Ok.words.length} positions, `
      + `${last.site} recovers ${last.all.toFixed(3)}; worst difference from the CLI ${patchWorst.toExponential(2)}`);
    if (JSON.stringify(patchSites) !== '["block0.attn","block1.ff.resid"]' || JSON.stringify(cliPatch.patches.map((r) => r.site)) !== JSON.stringify(patchSites)
      || pagePatch.Ok.words.length !== 5 || !(patchWorst < 2e-3))
      throw new Error('the imported run\'s patching is not the CLI\'s');
    // Patching the whole last residual at every position is the clean forward: all of it recovered.
    if (!(Math.abs(last.all - 1) < 1e-3)) throw new Error(`patching ${last.site} everywhere recovers ${last.all}`);
    if ((await page.$$('#residual-patching tbody tr')).length !== patchSites.length) throw new Error('the patching table does not show every site');
    // A click on a bar takes its site out of the ablation (or puts it in).
    await page.click('#residual-dla tr.dla-row[data-site="slot1"]');
    if ((await page.inputValue('#residual-ablate')) !== 'block0.attn') throw new Error(`a click on slot1 left ${await page.inputValue('#residual-ablate')}`);
    // and the imported checkpoint is read again: the ablation shown is now block0.attn's alone.
    await page.waitForFunction(() => JSON.parse(document.querySelector('#residual-ablation')?.dataset.ablation || 'null')?.Ok?.sites?.join() === 'block0.attn',
      null, { timeout: 120_000 });
    const reread = JSON.parse(await page.$eval('#residual-ablation', (e) => e.dataset.ablation)).Ok;
    const cliAgain = JSON.parse(cli(['analyze', 'ablate', '--run', cliRun, '--sites', 'block0.attn', '--how', 'mean', '--token', ablToken,
      '--target', `#${ablTarget}`, '--backend', 'cpu', '--json'])).ablations.at(-1);
    console.log(`     read again with block0.attn alone: loss ${reread.loss_change.toFixed(4)} (CLI ${cliAgain.loss_change.toFixed(4)}); ${await page.textContent('#status')}`);
    if (!(Math.abs(reread.loss_change - cliAgain.loss_change) < 2e-3)) throw new Error('the imported run read again is not the CLI\'s');
    const sampled = await page.$eval('#sample', (e) => e.dataset.text);
    if (!sampled) throw new Error('the imported run shows no sample');

    // The same run continued in JAX (`resmem export jax`, then `python -m resmem_jax.train`, as
    // the README says) imports as a run resmem trained: its held-out loss and residuals are what
    // `resmem eval` and `resmem analyze residual` compute for the JAX run's files.
    const jaxRun = path.join(tmp, 'jax');
    await page.fill('#patch-clean', '');
    await page.locator('#patch-clean').blur();
    await ready(page, errors);
    cli(['export', 'jax', '--run', cliRun, '--out', jaxRun]);
    execFileSync(PYTHON, ['-m', 'resmem_jax.train', '--run', jaxRun, '--steps', '14', '--quiet'],
      { cwd: ROOT, env: { ...process.env, PYTHONPATH: path.join(ROOT, 'python') } });
    await page.setInputFiles('#import', path.join(jaxRun, 'checkpoints', 'step-000000014.safetensors'));
    await page.waitForFunction(() => /^Imported step-000000014/.test(document.querySelector('#status')?.textContent)
      || /Cannot import/.test(document.querySelector('#status')?.textContent), null, { timeout: 120_000 });
    const jaxStatus = await page.textContent('#status');
    console.log(`     ${jaxStatus}`);
    const jaxLoss = /held-out loss ([0-9.]+)/.exec(jaxStatus);
    if (!/^Imported step-000000014\.safetensors: step 14,/.test(jaxStatus) || !jaxLoss) throw new Error(jaxStatus);
    const jaxEval = JSON.parse(cli(['eval', '--run', jaxRun, '--batches', '1', '--backend', 'cpu', '--json']));
    if (!(Math.abs(parseFloat(jaxLoss[1]) - jaxEval.val_loss) < 1e-3)) throw new Error(`the JAX run's loss: page ${jaxLoss[1]}, resmem eval ${jaxEval.val_loss}`);
    await page.waitForFunction(() => document.querySelector('#residual-heatmap')?.dataset.step === '14');
    const jaxShown = await residualShown(page);
    const jaxWant = JSON.parse(cli(['analyze', 'residual', '--run', jaxRun, '--depth', jaxShown.depth, '--token', String(jaxShown.token), '--backend', 'cpu', '--json']));
    const jaxWorst = Math.max(...jaxShown.values.map((v, i) => Math.abs(v - jaxWant.values[i])));
    console.log(`     the JAX run's residual at ${jaxShown.depth}, token ${jaxShown.token}: worst difference from the CLI ${jaxWorst.toExponential(2)}`);
    if (jaxShown.values.length !== jaxWant.values.length || !(jaxWorst < 2e-3 * Math.max(1, ...jaxWant.values.map(Math.abs))))
      throw new Error('the imported JAX run\'s residuals are not the CLI\'s');

    // A reload keeps the three runs, their curves and checkpoints; "clear" forgets them.
    const before = [await pageLosses(page, 1), await pageLosses(page, 2), await pageLosses(page, 3)];
    await page.reload();
    await ready(page, errors);
    await page.waitForFunction(() => document.querySelectorAll('#run-list tr[data-run]').length === 3, null, { timeout: 20_000 });
    const after = [await pageLosses(page, 1), await pageLosses(page, 2), await pageLosses(page, 3)];
    if (JSON.stringify(after) !== JSON.stringify(before)) throw new Error(`after a reload: ${JSON.stringify(after)}, before ${JSON.stringify(before)}`);
    if (await page.isDisabled('#run-list tr[data-run="1"] .run-checkpoint')) throw new Error('the reloaded run lost its checkpoint');
    await page.click('#clear-runs');
    await page.waitForFunction(() => document.querySelectorAll('#run-list tr[data-run]').length === 0);
    await page.reload();
    await ready(page, errors);
    await new Promise((ok) => setTimeout(ok, 1000));
    if ((await page.$$('#run-list tr[data-run]')).length !== 0) throw new Error('cleared runs came back after a reload');
    if (errors.length) throw new Error(`console errors: ${errors.join('\n')}`);
  } finally {
    await browser.close();
  }
});

await test('Shakespeare trains with samples, and a lost device is recovered and the run continued', async () => {
  const { browser, page, errors } = await open(`${url}?v=1&data=shakespeare-bytes`, true);
  try {
    await ready(page, errors);
    if ((await page.inputValue('#task')) !== 'shakespeare-bytes') throw new Error('the link did not choose Shakespeare');
    await page.click('#start');
    await page.waitForFunction(() => parseInt(document.querySelector('#step')?.textContent) >= 15
      || /failed|Cannot/.test(document.querySelector('#status')?.textContent), null, { timeout: 240_000 });
    if (/failed|Cannot/.test(await page.textContent('#status'))) throw new Error(await page.textContent('#status'));
    const swiftshader = await page.textContent('#speed');
    await page.click('#stop');
    await page.waitForFunction(() => document.querySelector('#run-list tr[data-run="1"] .run-state')?.textContent === 'done', null, { timeout: 120_000 });
    const points = await pageLosses(page, 1);
    const [first, last] = [points[0][1], points.at(-1)[1]];
    console.log(`     Shakespeare (bytes), tiny RMT on SwiftShader: loss ${first} → ${last} by step ${points.at(-1)[0]}; ${swiftshader}`);
    if (!(Math.abs(first - Math.log(256)) < 1e-2 && last < 0.75 * first)) throw new Error('the loss on Shakespeare did not fall');
    const sample = await page.$eval('#sample', (e) => ({ text: e.dataset.text, step: document.querySelector('#sample-step').textContent,
      p: [...e.querySelectorAll('.sample-tok')].map((t) => parseFloat(t.dataset.p)) }));
    console.log(`     sample after step ${sample.step}: ${JSON.stringify(sample.text)}`);
    if (sample.text.length < 32 || sample.p.length !== 64 || !sample.p.every((p) => p > 0 && p <= 1))
      throw new Error(`the sample: ${JSON.stringify(sample)}`);

    // Continue, lose the device after step 20's loss was read, make a new device, continue from
    // the kept checkpoint: the run reads step 20's loss again, bit for bit.
    const stoppedAt = points.at(-1)[0];
    const lossAt = (step) => page.$eval('#run-list tr[data-run="1"]', (r, s) => JSON.parse(r.dataset.losses).find((p) => p[0] === s)?.[1], step);
    await page.click('#run-list tr[data-run="1"] .run-continue');
    await page.waitForFunction(() => JSON.parse(document.querySelector('#run-list tr[data-run="1"]').dataset.losses).some((p) => p[0] === 20),
      null, { timeout: 180_000 });
    const before = await lossAt(20);
    await page.evaluate(() => window.resmemLoseDevice());
    await page.waitForSelector('#device-lost', { timeout: 60_000 });
    console.log(`     ${await page.textContent('#status')}`);
    if (!/interrupted/.test(await page.textContent('#run-list tr[data-run="1"] .run-state'))) throw new Error('the run is not marked interrupted');
    await page.waitForFunction(() => document.querySelector('#recover')?.disabled === false);
    // Forced: after a destroyed device headless Chromium may not paint for a while, and
    // playwright's wait for a stable box never ends, though the button is shown and enabled.
    await page.click('#recover', { force: true });
    // SwiftShader finishes the destroyed device's queued work first: up to a minute here.
    await page.waitForFunction(() => /^Ready/.test(document.querySelector('#status')?.textContent), null, { timeout: 180_000 })
      .catch(async () => { throw new Error(`no new device: ${await page.textContent('#status')}`); });
    await page.click('#run-list tr[data-run="1"] .run-continue');
    await page.waitForFunction(() => /from step/.test(document.querySelector('#status')?.textContent));
    await page.waitForFunction(() => JSON.parse(document.querySelector('#run-list tr[data-run="1"]').dataset.losses).some((p) => p[0] === 20)
      || /failed|Cannot/.test(document.querySelector('#status')?.textContent), null, { timeout: 180_000 });
    await page.click('#stop');
    await page.waitForFunction(() => document.querySelector('#run-list tr[data-run="1"] .run-state')?.textContent === 'done', null, { timeout: 120_000 });
    const again = await lossAt(20);
    console.log(`     step 20 before the device was lost: ${before}; continued from step ${stoppedAt} on a new device: ${again}`);
    if (again !== before) throw new Error('the continued run does not repeat the lost one');
    await page.screenshot({ path: path.join(shots, 'shakespeare.png'), fullPage: true });
  } finally {
    await browser.close();
  }
});

await test('a bad link is reported and its defaults stand; without WebGPU the CPU fallback trains the CLI\'s losses', async () => {
  const { browser, page, errors } = await open(`${url}?v=2&d_k=32`, false);
  try {
    await page.waitForSelector('#link-problems');
    const v2 = await page.textContent('#link-problems');
    if (!/another version of the page \(v=2/.test(v2) || (await page.inputValue('#ctl-d_k')) !== '8') throw new Error(`v=2: ${v2}`);
    await page.goto(`${url}?v=1&arch=nope&d_k=abc&bogus=1&seed=5&steps=12`);
    // Mounted (a status exists) and past the adapter check.
    await page.waitForFunction(() => document.querySelector('#status') && !document.querySelector('#status').textContent.startsWith('Checking'),
      null, { timeout: 60_000 });
    const problems = await page.$$eval('#link-problems li', (ls) => ls.map((l) => l.textContent));
    console.log(`     ${JSON.stringify(problems)}`);
    if (problems.length !== 3 || !/arch=nope/.test(problems[0]) || !/D_k must be a whole number, not "abc"; its default stands/.test(problems.join())
      || !/`bogus` is not a setting/.test(problems.join()))
      throw new Error(`the link's problems: ${JSON.stringify(problems)}`);
    if ((await page.inputValue('#ctl-d_k')) !== '8' || (await page.inputValue('#ctl-seed')) !== '5') throw new Error('the good settings were not kept');
    const status = await page.textContent('#status');
    console.log(`     status: ${status}`);
    if (!/WebGPU/.test(status) || !(await page.isDisabled('#start'))) throw new Error(`without WebGPU: ${status}`);
    await page.click('#use-cpu');
    await ready(page, errors);
    // The engine runs in its Web Worker, not on the page's thread.
    const cpuStatus = await page.textContent('#status');
    const workerWasm = page.workers().some((w) => w.url().endsWith('/resmem-worker_loader.js'));
    if (!/^Ready: cpu.* in a worker/.test(cpuStatus) || !workerWasm) throw new Error(`CPU engine: "${cpuStatus}", worker loaded: ${workerWasm}`);
    await page.click('#start');
    await page.waitForFunction(() => document.querySelector('#run-list tr[data-run="1"] .run-state')?.textContent === 'done'
      || /failed|Cannot/.test(document.querySelector('#status')?.textContent), null, { timeout: 240_000 });
    if (/failed|Cannot/.test(await page.textContent('#status'))) throw new Error(await page.textContent('#status'));
    const cpuSpeed = await page.textContent('#speed');
    const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'resmem-cpu-'));
    cli(['train', '--preset', 'tiny-rmt', '--seed', '5', '--steps', '12', '--log-every', '1', '--backend', 'cpu', '--out', path.join(tmp, 'r')]);
    const points = await pageLosses(page, 1);
    sameLosses(points, metricsByStep(path.join(tmp, 'r')), 1e-4, 'page (CPU, wasm32) against CLI (CPU)');
    console.log(`     tiny RMT on the CPU fallback: ${cpuSpeed}`);
    if (!(points.at(-1)[1] < 0.75 * points[0][1])) throw new Error('the loss did not fall on the CPU fallback');
    const sample = await page.$eval('#sample', (e) => e.dataset.text);
    if (!sample) throw new Error('no sample on the CPU fallback');
    // Sampling again sends the run's checkpoint to the worker and the new prompt with it.
    await page.click('#sample-view > summary');
    await page.fill('#prompt', 'abcdefgh|');
    await page.click('#sample-now');
    await page.waitForFunction(() => document.querySelector('#sample .prompt')?.textContent === 'abcdefgh|', null, { timeout: 60_000 });
    console.log(`     sampled in the worker from run 1's checkpoint: ${JSON.stringify(await page.$eval('#sample', (e) => e.dataset.text))}`);
    // Stop reaches the worker between steps.
    await page.fill('#ctl-steps', '100000');
    await page.click('#start');
    await page.waitForFunction(() => Number(document.querySelector('#step')?.textContent) >= 3, null, { timeout: 60_000 });
    await page.click('#stop');
    await page.waitForFunction(() => document.querySelector('#run-list tr[data-run="2"] .run-state')?.textContent === 'done', null, { timeout: 60_000 });
    const stoppedAt = Number(await page.textContent('#step'));
    console.log(`     run 2 stopped at step ${stoppedAt} of 100000`);
    if (!(stoppedAt < 1000)) throw new Error(`Stop did not reach the worker: step ${stoppedAt}`);
    // A diverging run says so in the worker too, naming the step by which a loss was NaN or Inf.
    const lr = await page.inputValue('#ctl-lr');
    await page.fill('#ctl-lr', '1000000');
    await page.fill('#ctl-steps', '20');
    await page.click('#start');
    await page.waitForFunction(() => /^failed/.test(document.querySelector('#run-list tr[data-run="3"] .run-state')?.textContent), null, { timeout: 60_000 });
    const diverged = await page.textContent('#status');
    console.log(`     ${diverged}`);
    if (!/the loss became (NaN|inf) by step \d+; lower the learning rate/.test(diverged)) throw new Error(`a diverging run: ${diverged}`);
    // A control takes its value on change, when it loses focus, as a person's next click does.
    await page.fill('#ctl-lr', lr);
    await page.locator('#ctl-lr').blur();
    // Hyper-connections (mHC, 4 streams): every site's mixing matrix and the composite gain, as
    // `resmem analyze mixing` reads them from the same training on the CPU.
    // The preset's 300 steps, as `analyze mixing --step` trains (the schedule depends on them),
    // stopped once the gates of step 20 are read.
    await page.selectOption('#arch', 'hc');
    await page.fill('#ctl-steps', '300');
    await page.click('#start');
    await page.waitForFunction(() => Number(document.querySelector('#mstep-value')?.textContent) >= 20
      || /^failed/.test(document.querySelector('#run-list tr[data-run="4"] .run-state')?.textContent), null, { timeout: 240_000 });
    await page.click('#stop');
    // The status still tells of run 3's divergence: run 4's own state says how it ended.
    await page.waitForFunction(() => /^(done|failed)/.test(document.querySelector('#run-list tr[data-run="4"] .run-state')?.textContent),
      null, { timeout: 120_000 });
    if ((await page.textContent('#run-list tr[data-run="4"] .run-state')) !== 'done') throw new Error(await page.textContent('#status'));
    await page.fill('#mstep', '2');
    await page.waitForFunction(() => document.querySelector('#mstep-value')?.textContent === '20');
    const sites = await page.$$eval('#mixing-grid g.site', (gs) => gs.map((g) => ({
      site: g.dataset.site, mix: JSON.parse(g.dataset.mix), pre: JSON.parse(g.dataset.pre), gain: g.dataset.gain.split(',').map(Number),
    })));
    const mixStep = Number(await page.textContent('#mstep-value'));
    const cliMix = JSON.parse(execFileSync(RESMEM, ['analyze', 'mixing', '--preset', 'tiny-hc', '--batch', '32', '--seq-len', '16', '--seed', '5',
      '--step', String(mixStep), '--seq', '0', '--token', '0', '--backend', 'cpu', '--json']).toString());
    console.log(`     mHC at step ${mixStep}: ${sites.length} sites, composite gain ${sites.at(-1)?.gain}; P of ${sites[0]?.site}: ${sites[0]?.mix.map((v) => v.toFixed(3))}`);
    if (mixStep !== 20 || sites.length !== cliMix.length || sites.length !== 4) throw new Error(`${sites.length} sites at step ${mixStep}; the CLI reads ${cliMix.length}`);
    sites.forEach((s, i) => {
      const c = cliMix[i];
      const worst = Math.max(...s.mix.map((v, k) => Math.abs(v - c.mix[k])), ...s.pre.map((v, k) => Math.abs(v - c.pre[k])),
        ...s.gain.map((v, k) => Math.abs(v - c.composite_gain[k])));
      if (s.site !== c.site || !(worst < 1e-4)) throw new Error(`${s.site}: the page's gates are ${worst} from the CLI's ${c.site}`);
      // Doubly stochastic: columns sum to 1 (normalised last), rows nearly.
      for (let a = 0; a < 4; a++) {
        const row = [0, 1, 2, 3].reduce((x, b) => x + s.mix[a * 4 + b], 0);
        const col = [0, 1, 2, 3].reduce((x, b) => x + s.mix[b * 4 + a], 0);
        if (!(Math.abs(row - 1) < 0.05 && Math.abs(col - 1) < 1e-4)) throw new Error(`${s.site}: row ${a} sums to ${row}, column to ${col}`);
      }
      // Sinkhorn normalises the columns last: the forward gain is 1 to ε, the backward near it.
      if (!(Math.abs(s.gain[0] - 1) < 1e-4 && Math.abs(s.gain[1] - 1) < 0.05)) throw new Error(`${s.site}: composite gain ${s.gain}`);
    });
    // The gain over training: one point a read (steps 1, 10 and 20), both margins in the legend.
    const gainTexts = await page.$$eval('#mixing-gain svg text', (ts) => ts.map((t) => t.textContent.trim()));
    if (!gainTexts.some((t) => t.startsWith('forward')) || !gainTexts.some((t) => t.startsWith('backward')) || !gainTexts.includes('composite gain'))
      throw new Error(`the gain chart's texts: ${gainTexts}`);
    // Scrubbing back to step 1 shows its P: near I at init (SPEC §6.6 `identity`).
    await page.fill('#mstep', '0');
    await page.waitForFunction(() => document.querySelector('#mstep-value')?.textContent === '1');
    const atInit = await page.$eval('#mixing-grid g.site', (g) => JSON.parse(g.dataset.mix));
    if (!atInit.every((v, i) => (i % 5 === 0 ? v > 0.99 : v < 0.01))) throw new Error(`P at step 1: ${atInit}`);
    await page.screenshot({ path: path.join(shots, 'mixing.png'), fullPage: true });
    // Block Attention Residuals: every read's weights over the blocks before it, as `resmem
    // analyze depth` reads them from the same training on the CPU; uniform at init (each
    // pseudo-query starts at zero), a distribution at every read.
    await page.selectOption('#arch', 'attnres');
    await page.fill('#ctl-steps', '300');
    await page.click('#start');
    await page.waitForFunction(() => Number(document.querySelector('#dstep-value')?.textContent) >= 20
      || /^failed/.test(document.querySelector('#run-list tr[data-run="5"] .run-state')?.textContent), null, { timeout: 240_000 });
    await page.click('#stop');
    await page.waitForFunction(() => /^(done|failed)/.test(document.querySelector('#run-list tr[data-run="5"] .run-state')?.textContent),
      null, { timeout: 120_000 });
    if ((await page.textContent('#run-list tr[data-run="5"] .run-state')) !== 'done') throw new Error(await page.textContent('#status'));
    const depthReads = () => page.$$eval('#depth-grid g.read', (gs) => gs.map((g) => ({
      read: g.dataset.read, sources: g.dataset.sources.split(','), weights: JSON.parse(g.dataset.weights),
    })));
    await page.fill('#dstep', '2');
    await page.waitForFunction(() => document.querySelector('#dstep-value')?.textContent === '20');
    const reads = await depthReads();
    const cliDepth = JSON.parse(execFileSync(RESMEM, ['analyze', 'depth', '--preset', 'tiny-attnres', '--batch', '32', '--seq-len', '16', '--seed', '5',
      '--step', '20', '--seq', '0', '--token', '0', '--backend', 'cpu', '--json']).toString());
    console.log(`     AttnRes at step 20: ${reads.length} reads; the head's weights ${reads.at(-1)?.weights.map((v) => v.toFixed(3))} over ${reads.at(-1)?.sources}`);
    if (reads.length !== cliDepth.length || reads.length < 3) throw new Error(`${reads.length} reads on the page; the CLI reads ${cliDepth.length}`);
    reads.forEach((r, i) => {
      const c = cliDepth[i];
      const worst = Math.max(...r.weights.map((v, k) => Math.abs(v - c.weights[k])));
      if (r.read !== c.read || r.sources.join() !== c.sources.join() || !(worst < 1e-4))
        throw new Error(`${r.read} over ${r.sources}: the page's weights are ${worst} from the CLI's ${c.read} over ${c.sources}`);
      const sum = r.weights.reduce((a, b) => a + b, 0);
      if (!(Math.abs(sum - 1) < 1e-5)) throw new Error(`${r.read}: its weights sum to ${sum}`);
    });
    await page.fill('#dstep', '0');
    await page.waitForFunction(() => document.querySelector('#dstep-value')?.textContent === '1');
    for (const r of await depthReads()) {
      if (!r.weights.every((v) => Math.abs(v - 1 / r.weights.length) < 1e-6)) throw new Error(`${r.read} at step 1 is not uniform: ${r.weights}`);
    }
    await page.screenshot({ path: path.join(shots, 'depth.png'), fullPage: true });
    // AltUp trains the CLI's losses in the worker too: the preset's 300 steps (the schedule is
    // the CLI's), stopped once step 10 is read.
    await page.selectOption('#arch', 'altup');
    await page.fill('#ctl-steps', '300');
    await page.click('#start');
    await page.waitForFunction(() => Number(document.querySelector('#astep-value')?.textContent) >= 10
      || /^failed/.test(document.querySelector('#run-list tr[data-run="6"] .run-state')?.textContent), null, { timeout: 120_000 });
    await page.click('#stop');
    await page.waitForFunction(() => /^(done|failed)/.test(document.querySelector('#run-list tr[data-run="6"] .run-state')?.textContent),
      null, { timeout: 120_000 });
    const altupDir = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'resmem-altup-')), 'r');
    cli(['train', '--preset', 'tiny-altup', '--seed', '5', '--log-every', '1', '--backend', 'cpu', '--out', altupDir]);
    sameLosses(await pageLosses(page, 6), metricsByStep(altupDir), 1e-4, 'AltUp: page (CPU, wasm32) against CLI (CPU)');
    // Its view at step 10: each layer's P and g (the weights after step 10's update, which the
    // CLI's forward of step 11 reads) and its sub-blocks' cosines (of step 10's forward).
    await page.fill('#astep', '1');
    await page.waitForFunction(() => document.querySelector('#astep-value')?.textContent === '10');
    const layers = await page.$$eval('#altup-grid g.layer', (gs) => gs.map((g) => ({ layer: g.dataset.layer, active: Number(g.dataset.active),
      predict: JSON.parse(g.dataset.predict), correct: JSON.parse(g.dataset.correct), cosine: JSON.parse(g.dataset.cosine) })));
    const cliAltup = (step) => JSON.parse(execFileSync(RESMEM, ['analyze', 'altup', '--preset', 'tiny-altup', '--batch', '32', '--seq-len', '16',
      '--seed', '5', '--step', String(step), '--seq', '0', '--token', '0', '--backend', 'cpu', '--json']).toString());
    const [forward, after] = [cliAltup(10), cliAltup(11)];
    console.log(`     AltUp at step 10: ${layers.length} layers computing on ${layers.map((l) => l.active)}; P of block0 ${layers[0]?.predict.map((v) => v.toFixed(3))}; cosines ${layers[0]?.cosine.map((v) => v.toFixed(4))}`);
    if (layers.length !== 2 || after.length !== 2) throw new Error(`${layers.length} AltUp layers on the page, ${after.length} from the CLI`);
    const identity = [1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1];
    layers.forEach((l, i) => {
      const gap = (a, b) => Math.max(...a.map((v, k) => Math.abs(v - b[k])));
      const worst = Math.max(gap(l.predict, after[i].predict), gap(l.correct, after[i].correct), gap(l.cosine, forward[i].cosine));
      if (l.layer !== after[i].layer || l.active !== i || !(worst < 1e-4)) throw new Error(`${l.layer}: the page's AltUp reading is ${worst} from the CLI's`);
      if (!(gap(l.predict, identity) > 1e-3)) throw new Error(`${l.layer}: P has not left I by step 10: ${l.predict}`);
    });
    await page.screenshot({ path: path.join(shots, 'altup.png'), fullPage: true });
    await page.selectOption('#arch', 'rmt');
    // GPT-2 BPE (V = 50,257): its checkpoint, over 128 MiB with the moments, is one value
    // IndexedDB refuses, so it is kept as a Blob; it survives a reload.
    await page.selectOption('#task', 'shakespeare-gpt2');
    await page.fill('#ctl-steps', '5');
    await page.click('#start');
    await page.waitForFunction(() => ['done', 'failed'].some((s) => document.querySelector('#run-list tr[data-run="7"] .run-state')?.textContent.startsWith(s)),
      null, { timeout: 300_000 });
    const bpe = await pageLosses(page, 7);
    const bpeSample = await page.$eval('#sample', (e) => e.dataset.text);
    console.log(`     Shakespeare (GPT-2 BPE) on the CPU fallback: loss ${bpe[0][1]} → ${bpe.at(-1)[1]} by step 5; sample ${JSON.stringify(bpeSample)}`);
    if (!(bpe.at(-1)[1] < bpe[0][1] - 0.5) || !bpeSample) throw new Error(`GPT-2 BPE: losses ${JSON.stringify(bpe)}, sample ${bpeSample}`);
    const storedBytes = () => page.evaluate(() => new Promise((ok, no) => {
      const r = indexedDB.open('resmem', 1);
      r.onsuccess = () => { const g = r.result.transaction('kv').objectStore('kv').get('checkpoint/7'); g.onsuccess = () => ok(g.result?.size ?? 0); g.onerror = () => no(g.error); };
      r.onerror = () => no(r.error);
    }));
    let stored = 0;
    for (let i = 0; i < 120 && !stored && !/could not be kept/.test(await page.textContent('#status')); i++) { await page.waitForTimeout(500); stored = await storedBytes(); }
    console.log(`     run 7's checkpoint kept in IndexedDB: ${stored} bytes`);
    if (!(stored > 128 * 2 ** 20)) throw new Error(`the GPT-2 checkpoint was not kept: ${stored} bytes; status ${await page.textContent('#status')}`);
    await page.screenshot({ path: path.join(shots, 'cpu-fallback.png'), fullPage: true });
    // Runs stored before the one relay of readings kept their variance ratios as `history` and
    // the gates as `mixing`: the stored runs are rewritten so, and load with both.
    const variance = await page.textContent('#run-list tr[data-run="1"] .run-variance');
    const older = await page.evaluate(() => new Promise((ok, no) => {
      const r = indexedDB.open('resmem', 1);
      r.onsuccess = () => {
        const store = r.result.transaction('kv', 'readwrite').objectStore('kv');
        const g = store.get('runs');
        g.onsuccess = () => {
          const kept = (run, kind) => (run.observed ?? []).filter((o) => o.rows[kind]).map((o) => [o.step, o.rows[kind]]);
          const runs = g.result.map(({ observed, ...run }) => ({ ...run, history: kept({ observed }, 'Variance'), mixing: kept({ observed }, 'Mixing') }));
          const p = store.put(runs, 'runs');
          p.onsuccess = () => ok(runs.map((run) => [run.id, run.history.length, run.mixing.length]));
          p.onerror = () => no(p.error);
        };
        g.onerror = () => no(g.error);
      };
      r.onerror = () => no(r.error);
    }));
    console.log(`     stored runs rewritten as before the relay ([id, variance readings, gate readings]): ${JSON.stringify(older)}`);
    if (!older.some(([id, h]) => id === 1 && h > 0) || !older.some(([id, , m]) => id === 4 && m === 3)) throw new Error(`the stored runs: ${JSON.stringify(older)}`);
    await page.reload();
    await page.waitForSelector('#run-list tr[data-run="7"] .run-checkpoint', { timeout: 60_000 });
    if (await page.isDisabled('#run-list tr[data-run="7"] .run-checkpoint')) throw new Error('the GPT-2 run lost its checkpoint in the reload');
    const restored = await page.textContent('#run-list tr[data-run="1"] .run-variance');
    if (restored !== variance || restored === '–') throw new Error(`run 1's variance was ${variance} before the reload and ${restored} after`);
    await page.click('#run-list tr[data-run="4"] .run-focus');
    await page.waitForFunction(() => document.querySelectorAll('#mixing-grid g.site').length === 4 && document.querySelector('#mstep-value')?.textContent === '20',
      null, { timeout: 30_000 });
    if (errors.length) throw new Error(`console errors: ${errors.join('\n')}`);
  } finally {
    await browser.close();
  }
});

server.close();
console.log(`browser: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
