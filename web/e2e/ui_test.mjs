// Browser test of `braid serve`, driven by tests/report/browser_test.cpp: Debian's chromium,
// headless, through playwright-core. Exit code 0 = every check passed; prints one JSON line
// starting with "RESULT " (checks passed, page load times).
//
// Environment:
//   BRAID_URL          base URL of a running `braid serve` (run 0: a real evolve; run 1, when
//                      present: a run holding a hostile candidate)
//   BRAID_MODE         "full" (every check) or "measure" (page load times of run 0 only)
//   BRAID_SHOTS        folder for screenshots
//   BRAID_LIVE         "1": run 0 is still being written; the page must update by itself
//   BRAID_LIVE_GATE    file whose creation lets the paced run 0 go on (after the page saw it running)
//   BRAID_HOSTILE_ID   id of the hostile candidate in run 1; BRAID_HOSTILE_CODE_FILE: its code
//   BRAID_CHROMIUM     browser executable (default /usr/bin/chromium)
import { chromium } from 'playwright-core';
import { readFileSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const base = process.env.BRAID_URL;
const mode = process.env.BRAID_MODE || 'full';
const shots = process.env.BRAID_SHOTS || '.';
mkdirSync(shots, { recursive: true });
const checks = [];
const errors = [];

function check(cond, what) {
  if (!cond) throw new Error(`check failed: ${what}`);
  checks.push(what);
}

const browser = await chromium.launch({
  executablePath: process.env.BRAID_CHROMIUM || '/usr/bin/chromium',
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync'],
});
// The server's Content-Security-Policy forbids eval, which playwright's waitForFunction needs;
// bypassing it also proves the UI's own escaping holds without that second defence.
const context = await browser.newContext({ viewport: { width: 1400, height: 1000 }, bypassCSP: true });
const page = await context.newPage();
// Generous bounds: the suite runs this beside the heaviest tests on two cores; a bound here
// says "never happened", not "too slow".
page.setDefaultTimeout(120000);
page.on('pageerror', (e) => errors.push(`pageerror: ${e.message}`));
page.on('console', (m) => { if (m.type() === 'error') errors.push(`console: ${m.text()}`); });
// Nothing but the server itself may be contacted (no CDN at run time).
page.on('request', (r) => { if (!r.url().startsWith(base) && !r.url().startsWith('data:') && r.url() !== 'about:blank') errors.push(`external request: ${r.url()}`); });

async function ready(view, timeout = 90000) {
  await page.waitForFunction((v) => {
    const m = document.querySelector('#main');
    // The render of the current address, not one still on screen from before a click.
    return m && m.dataset.ready && m.dataset.view === v && m.dataset.hash === location.hash;
  }, view, { timeout });
}

// Full load of a page (not a hash change), timed until the view has rendered its data.
async function timedLoad(hash, view) {
  await page.goto('about:blank');
  const t0 = Date.now();
  await page.goto(`${base}/${hash}`);
  await ready(view);
  return Date.now() - t0;
}

async function imagesLoaded() {
  return page.evaluate(() => [...document.querySelectorAll('#main img')].every((i) => i.complete && i.naturalWidth > 0));
}

async function shot(name) { await page.screenshot({ path: join(shots, `${name}.png`), fullPage: false }); }

const result = { mode, loads_ms: {} };
try {
  if (mode === 'measure') {
    const runs = await (await fetch(`${base}/api/runs`)).json();
    const best = runs.runs[0].best.id;
    const pages = [['overview', '#/run/0/overview', 'overview'], ['candidates', '#/run/0/candidates', 'candidates'],
      ['candidates_last_page', '#/run/0/candidates?order=generation&offset=' + Math.max(0, runs.runs[0].count - 50), 'candidates'],
      ['tree', '#/run/0/tree', 'tree'], ['candidate', `#/run/0/c/${best}`, 'c'], ['islands', '#/run/0/islands', 'islands'], ['meta', '#/run/0/meta', 'meta'], ['knobs', '#/run/0/knobs', 'knobs']];
    for (const [name, hash, view] of pages) {
      const times = [];
      for (let i = 0; i < 3; ++i) times.push(await timedLoad(hash, view));
      times.sort((a, b) => a - b);
      result.loads_ms[name] = times[1];
    }
    result.count = runs.runs[0].count;
    await page.goto(`${base}/#/run/0/tree`);
    await ready('tree');
    await shot(`tree_${result.count}`);
  } else {
    // Overview: KPIs, server-rendered plots.
    result.loads_ms.overview = await timedLoad('#/run/0/overview', 'overview');
    check((await page.textContent('h1')).startsWith('Run '), 'overview renders');
    await page.waitForFunction(() => [...document.querySelectorAll('#main img')].every((i) => i.complete), null, { timeout: 60000 });
    check(await imagesLoaded(), 'overview plots load');
    const state = await page.getAttribute('#run-state', 'data-state');
    check(['running', 'done', 'interrupted', 'unknown'].includes(state), `run state shown (${state})`);
    if (process.env.BRAID_LIVE === '1') check(state === 'running', 'a run being written reads as running');
    check((await page.textContent('#live')).includes('generations'), 'header line says N of M generations');
    check(await page.$('#scatter .seed-line') !== null, "every-candidate plot draws the seed's line");
    await shot('overview');

    if (process.env.BRAID_LIVE === '1') {
      await page.waitForFunction(() => Number(document.querySelector('#live').dataset.count) > 0, null, { timeout: 60000 });
      const before = Number(await page.getAttribute('#live', 'data-count'));
      // While held at the gate a build is in flight: the live line says what the run is doing.
      await page.waitForFunction(() => /\d+ evaluating/.test(document.querySelector('#live').textContent), null, { timeout: 60000 });
      check(true, `live line shows what is in flight (${(await page.textContent('#live')).split(' · ').slice(3).join(' · ')})`);
      // The run is held until the page has been seen running; let it go on now.
      if (process.env.BRAID_LIVE_GATE) writeFileSync(process.env.BRAID_LIVE_GATE, '');
      await page.waitForFunction((b) => Number(document.querySelector('#live').dataset.count) > b, before, { timeout: 240000 });
      const after = Number(await page.getAttribute('#live', 'data-count'));
      // The overview itself re-rendered with the new count, without a reload.
      await page.waitForFunction((a) => [...document.querySelectorAll('.kpi b')].some((b) => Number(b.textContent) >= a), after, { timeout: 60000 });
      check(after > before, `live view updated while the run added candidates (${before} -> ${after})`);
      result.live = { before, after };
      await shot('overview_live');
      // The checks below compare what a page drew with what the API says a moment later; a run
      // still growing re-renders the page between the two. They run on the finished run.
      await page.waitForFunction(() => document.querySelector('#live').dataset.state !== 'running', null, { timeout: 600000 });
      const finished = await page.getAttribute('#live', 'data-state');
      check(finished === 'done', `the live line follows the run to its end (${finished})`);
    }

    // Every candidate as a point: re-measured ones drawn apart from single measurements.
    await timedLoad('#/run/0/overview', 'overview');
    const points = await (await fetch(`${base}/api/runs/0/points`)).json();
    const remeasured = points.items.filter((c) => c.reruns.length > 0).length;
    const drawn = await page.evaluate(() => ({
      remeasured: document.querySelectorAll('#scatter circle.pt.confirmed, #scatter circle.pt.refuted').length,
      single: document.querySelectorAll('#scatter circle.pt.single, #scatter path.pt.single').length,
      ranges: document.querySelectorAll('#scatter line.range').length,
      best: document.querySelectorAll('#scatter .best-mark').length }));
    check(drawn.remeasured === remeasured && drawn.ranges === remeasured, `re-measured candidates drawn with their re-run range (${remeasured})`);
    check(drawn.single > 0, 'single measurements drawn as hollow points');
    check(drawn.best === (points.best ? 1 : 0), 'the reported best is marked');
    check((await page.textContent('#scatter-legend')).includes(points.best.confirmed ? 're-runs)' : 'single measurement)'),
      'the legend says what the best rests on');
    await page.click('#scatter circle.pt');
    await ready('c');
    check(true, 'clicking a point opens its candidate page');
    await page.goto(`${base}/#/run/0/overview`);
    await ready('overview');
    await page.locator('#scatter').screenshot({ path: join(shots, 'every_candidate.png') });

    // Candidates listing with knob and metric columns, sorted by a knob both ways; export.
    result.loads_ms.candidates = await timedLoad('#/run/0/candidates', 'candidates');
    const rows = await page.$$('#main table tr.clickable');
    check(rows.length > 0, 'candidates listing has rows');
    const measured = await page.$$eval('#candidates tr.clickable td:nth-child(3)', (tds) => tds.map((t) => t.textContent));
    check(measured.some((t) => t === 'single measurement' || t.startsWith('median ') || t.startsWith('not promoted')),
      `the listing says what each score rests on (${[...new Set(measured)].slice(0, 3).join(' | ')})`);
    await shot('candidates');
    const knobHeaders = await page.$$eval('#candidates th.sortable', (ths) => ths.map((t) => t.dataset.order).filter((o) => o.startsWith('knob:')));
    check(knobHeaders.length > 0, `knob columns (${knobHeaders.join(', ')})`);
    const metricHeaders = await page.$$eval('#candidates th.sortable', (ths) => ths.map((t) => t.dataset.order).filter((o) => o.startsWith('metric:')));
    check(metricHeaders.length > 0, `metric columns (${metricHeaders.join(', ')})`);
    const columnValues = (order) => page.evaluate((o) => {
      const ths = [...document.querySelectorAll('#candidates tr:first-child th')];
      const col = ths.findIndex((t) => t.dataset.order === o);
      return [...document.querySelectorAll('#candidates tr.clickable')].map((tr) => tr.children[col].textContent).filter((v) => v !== '-');
    }, order);
    const numeric = (vs) => vs.every((v) => v.trim() !== '' && Number.isFinite(Number(v)));
    const sortedBy = (vs, dir) => vs.every((v, i) => i === 0 || (dir === 'asc' ? Number(vs[i - 1]) <= Number(v) : Number(vs[i - 1]) >= Number(v)));
    const metric = metricHeaders[0];
    await page.click(`#candidates th[data-order="${metric}"]`);
    await ready('candidates');
    let values = await columnValues(metric);
    check(numeric(values) && sortedBy(values, 'desc'), `sorted by ${metric}, descending (${values.slice(0, 4).join(' ')} ...)`);
    await page.click(`#candidates th[data-order="${metric}"]`);
    await ready('candidates');
    values = await columnValues(metric);
    check(sortedBy(values, 'asc'), `second click sorts ${metric} ascending`);
    const numericKnob = [];
    for (const k of knobHeaders) if (numeric(await columnValues(k))) numericKnob.push(k);
    if (numericKnob.length) {
      await page.click(`#candidates th[data-order="${numericKnob[0]}"]`);
      await ready('candidates');
      check(sortedBy(await columnValues(numericKnob[0]), 'desc'), `sorted by ${numericKnob[0]}, descending`);
    }
    await shot('candidates_sorted');
    const csvHref = await page.getAttribute('#export-csv', 'href');
    const csv = await (await fetch(`${base}${csvHref}`)).text();
    const lines = csv.trim().split('\n');
    check(lines[0].startsWith('id,parent,generation') && lines[0].includes('knob:'), 'CSV export has a header with knob columns');
    const listed = (await (await fetch(`${base}/api/runs/0/candidates?limit=1`)).json()).total;
    check(lines.length - 1 >= Math.min(listed, 1) && lines.length - 1 <= listed + 50, `CSV export has every candidate (${lines.length - 1})`);
    const jsonHref = await page.getAttribute('#export-json', 'href');
    const exported = await (await fetch(`${base}${jsonHref}`)).json();
    check(exported.items.length >= lines.length - 1 && exported.knobs.length > 0, 'JSON export with knobs');

    // Knob run: parallel coordinates and one effect plot per knob.
    result.loads_ms.knobs = await timedLoad('#/run/0/knobs', 'knobs');
    const lines_pc = await page.$$('#parallel path.pc-line');
    // The run is live: candidates indexed between the export above and this page are drawn too.
    const exportedAfter = await (await fetch(`${base}${jsonHref}`)).json();
    const correctBefore = exported.items.filter((c) => c.correct).length;
    const correctAfter = exportedAfter.items.filter((c) => c.correct).length;
    check(lines_pc.length >= correctBefore && lines_pc.length <= correctAfter,
          `parallel coordinates: one line per correct candidate (${lines_pc.length}; ${correctBefore}-${correctAfter} correct)`);
    check((await page.$$('#effects svg.effect')).length === exported.knobs.length, 'an effect plot per knob');
    await shot('knobs');

    // Lineage tree: render, zoom, click a node with a parent, open its candidate page.
    result.loads_ms.tree = await timedLoad('#/run/0/tree', 'tree');
    const nodes = await page.$$('#tree-svg circle.node');
    check(nodes.length > 1, `tree renders ${nodes.length} nodes`);
    const g = await page.$('#tree-svg > g');
    const t0 = await g.getAttribute('transform');
    await page.hover('#tree-svg');
    await page.mouse.wheel(0, -400);
    await page.waitForFunction((t) => document.querySelector('#tree-svg > g').getAttribute('transform') !== t, t0);
    check(true, 'tree zooms on the wheel');
    await page.mouse.wheel(0, 400);
    const tree = await (await fetch(`${base}/api/runs/0/tree`)).json();
    // A correct child: a rejected proposal may repeat its parent's code and have no diff to show.
    const hasParent = (n) => n.parent && tree.nodes.some((m) => m.id === n.parent);
    const child = tree.nodes.find((n) => hasParent(n) && n.correct) || tree.nodes.find((n) => hasParent(n) && n.failure !== 'rejected');
    check(child, 'tree has an edge');
    await page.click(`#tree-svg circle.node[data-id="${child.id}"]`);
    await page.waitForSelector('#tree-side a[href*="/c/"]');
    check((await page.textContent('#tree-side')).includes(child.id), 'clicking a node shows its details');
    await shot('tree');
    await page.click('#tree-side a[href*="/c/"]');
    await ready('c');
    check((await page.getAttribute('h1', 'data-candidate')) === child.id, 'the node opens its candidate page');
    const added = await page.$$('#diff span.add');
    const removed = await page.$$('#diff span.del');
    check(added.length + removed.length > 0, `candidate page shows its diff (${added.length} added, ${removed.length} removed lines)`);
    check((await page.$$('#cascade span.passed, #cascade span.failed')).length > 0, 'cascade levels shown');
    await shot('candidate');

    result.loads_ms.islands = await timedLoad('#/run/0/islands', 'islands');
    check((await page.$$('#main table tr')).length > 1, 'islands table');
    await shot('islands');
    result.loads_ms.meta = await timedLoad('#/run/0/meta', 'meta');
    check((await page.textContent('h1')).startsWith('Meta recommendations'), 'meta page');
    await shot('meta');

    const runs = await (await fetch(`${base}/api/runs`)).json();
    if (runs.runs.length > 1) {
      // Run 1 is not of run 0's workload: flagged, curves not overlaid until asked for.
      result.loads_ms.compare = await timedLoad('#/compare', 'compare');
      const workloads = await (await fetch(`${base}/api/compare/workloads`)).json();
      check(!workloads.same && (await page.textContent('#workload-warning')).includes('Not comparable'), 'runs of different workloads are flagged');
      check((await page.$$('#main img')).length === 0, 'their curves are not overlaid by default');
      check((await fetch(`${base}/api/compare/plots/best_by_eval.svg`)).status === 409, 'the overlay endpoint refuses them');
      await shot('compare_mixed');
      await page.click('#overlay-anyway');
      await ready('compare');
      await page.waitForFunction(() => document.querySelectorAll('#main img').length > 0 && [...document.querySelectorAll('#main img')].every((i) => i.complete), null, { timeout: 60000 });
      check(await imagesLoaded(), 'comparison plots load when asked for');
      check((await page.$$('#main table')).length >= 3, 'comparison tables (workloads, bests, knobs)');
      await shot('compare');
    }

    if (process.env.BRAID_HOSTILE_ID) {
      const id = process.env.BRAID_HOSTILE_ID;
      const code = readFileSync(process.env.BRAID_HOSTILE_CODE_FILE, 'utf8');
      await timedLoad(`#/run/1/c/${id}`, 'c');
      check((await page.textContent('#code')) === code, 'hostile code shown verbatim as text');
      check((await page.textContent('#feedback')).includes('</pre><script>'), 'hostile feedback shown as text');
      check(await page.evaluate(() => window.__pwned === undefined), 'no injected script ran');
      check(await page.evaluate(() => document.scripts.length === 1 && document.querySelectorAll('#main img, #main script').length === 0),
        'no element injected from candidate text');
      await shot('hostile_candidate');
      await timedLoad('#/run/1/candidates', 'candidates');
      check(await page.evaluate(() => window.__pwned === undefined), 'listing with hostile model name is inert');
    }
    check(errors.length === 0, `no page errors or external requests (${errors.join('; ')})`);
  }
} catch (e) {
  result.error = String(e.stack || e);
  try { await shot('failure'); } catch { /* the page may be gone */ }
}
result.checks = checks;
result.errors = errors;
await browser.close();
console.log(`RESULT ${JSON.stringify(result)}`);
process.exit(result.error ? 1 : 0);
