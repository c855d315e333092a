// braid web UI: plain ES module, no framework. Every value from a run (code, feedback, ids,
// model text) reaches the page through text nodes or attribute setters, never as markup.
// Routes: #/run/R (overview), #/run/R/candidates, #/run/R/tree[/ID], #/run/R/c/ID,
// #/run/R/islands, #/run/R/meta, #/run/R/knobs, #/compare.

import { el, svgEl, fmt, short, when, scoreColour } from './dom.js';
import { scoreScatter, parallelCoordinates, knobEffects } from './charts.js';

const main = document.getElementById('main');
let runs = [];
let lastChanges = null;
let renderSeq = 0;
const treeView = { colour: 'score', transform: { x: 0, y: 0, k: 1 }, key: '', drag: null };
window.addEventListener('pointerup', () => { treeView.drag = null; });

async function api(path) {
  const res = await fetch(path, { cache: 'no-store' });
  const body = await res.json();
  if (!res.ok) throw new Error(body.error || res.statusText);
  return body;
}

function route() {
  const parts = location.hash.replace(/^#\/?/, '').split('?')[0].split('/').filter(Boolean).map(decodeURIComponent);
  const query = new URLSearchParams(location.hash.split('?')[1] || '');
  if (parts[0] === 'compare') return { view: 'compare', run: 0, query };
  const run = parts[0] === 'run' ? Number(parts[1]) || 0 : 0;
  const view = parts[2] || 'overview';
  return { view, run, arg: parts[3], query };
}

function link(text, hash) { return el('a', { href: hash }, text); }
function candLink(run, id) { return link(short(id), `#/run/${run}/c/${encodeURIComponent(id)}`); }

function setNav(r) {
  const nav = document.getElementById('nav');
  nav.replaceChildren();
  const items = [['overview', 'Overview'], ['candidates', 'Candidates'], ['tree', 'Lineage'], ['knobs', 'Knobs'], ['islands', 'Islands & archive'], ['meta', 'Meta']];
  for (const [view, label] of items) {
    const a = link(label, `#/run/${r.run}/${view}`);
    if (r.view === view || (view === 'candidates' && r.view === 'c')) a.className = 'active';
    nav.append(a);
  }
  if (runs.length > 1) {
    const a = link('Compare', '#/compare');
    if (r.view === 'compare') a.className = 'active';
    nav.append(a);
  }
  const sel = document.getElementById('run-select');
  if (sel.options.length !== runs.length) {
    sel.replaceChildren(...runs.map((x) => el('option', { value: x.index }, x.name)));
    sel.onchange = () => { location.hash = `#/run/${sel.value}/${route().view === 'compare' ? 'overview' : route().view}`; };
  }
  sel.value = String(r.run);
}

function table(headers, rows, onRow) {
  const t = el('table', {}, el('tr', {}, headers.map((h) => el('th', {}, h))));
  rows.forEach((cells, i) => {
    const tr = el('tr', onRow ? { className: 'clickable' } : {}, cells.map((c) => el('td', {}, c)));
    if (onRow) tr.addEventListener('click', (e) => { if (e.target.tagName !== 'A') onRow(i); });
    t.append(tr);
  });
  return t;
}

function kvTable(obj) {
  if (!obj || typeof obj !== 'object' || Object.keys(obj).length === 0) return el('p', { className: 'muted' }, 'none');
  return table(['key', 'value'], Object.entries(obj).map(([k, v]) => [k, typeof v === 'string' ? v : JSON.stringify(v)]));
}

// public_metrics.profile of the GPU cascade's Nsight Compute level: its per-kernel lines, or
// the note saying why there is no profile.
function profileView(p) {
  if (!p || typeof p !== 'object') return null;
  return [el('h2', {}, 'Profile (Nsight Compute)'),
    p.summary ? el('pre', { id: 'profile' }, p.summary) : el('p', { className: 'muted' }, `none: ${p.note ?? ''}`)];
}

function plot(src, alt) {
  // SVG plots are rendered by braid and shown as images: they can never run script.
  return el('img', { src: `${src}${src.includes('?') ? '' : '?'}t=${lastChanges ?? 0}`, alt });
}

// What a score rests on: its re-runs (median, spread, how many), a rebench median, or nothing
// but the evaluation itself. '-' where the answer did not say (children of a candidate page).
function measuredText(c) {
  if (c.reruns === undefined || !c.correct) return '-';
  const parts = [];
  if (c.reruns.length) parts.push(`${c.refuted ? 'not promoted: ' : ''}median ${fmt(c.median)} of ${c.reruns.length}${c.spread !== null ? ` ±${Math.round(c.spread * 50)}%` : ''}`);
  if (c.rebench_median !== null) parts.push(`rebench ${fmt(c.rebench_median)} of ${c.rebench_runs}`);
  return parts.length ? parts.join('; ') : 'single measurement';
}
function candidateRows(run, items) {
  return items.map((c) => [candLink(run, c.id), fmt(c.score), measuredText(c), c.ratio_to_bound === null ? '-' : fmt(c.ratio_to_bound), c.generation, c.island,
    c.failure, c.patch_type, c.model, c.parent ? candLink(run, c.parent) : '-', c.children]);
}
const candidateHeaders = ['id', 'score', 're-measured', 'ratio to bound', 'gen', 'island', 'outcome', 'patch', 'model', 'parent', 'children'];

// `braid run`: the fast path's summary (rules, what was left, LLM rewrite, gate, annotation).
function conversionSection(c) {
  if (!c) return null;
  const gate = c.gate || {};
  const ann = c.annotation || {};
  const rows = [
    ['input', c.input || '-'],
    ['method', c.method || '-'],
    ['NCCL calls converted', `${c.converted_calls ?? 0} of ${c.nccl_calls ?? 0}`],
    ['rule changes', (c.changes || []).length],
    ['gate', `${gate.status || '-'}${gate.reason ? ` (${gate.reason})` : ''}${gate.failure ? `: ${gate.failure}` : ''}`],
    ['compiled', c.compiled || '-'],
    ['annotation', `${ann.method || '-'}: ${(ann.blocks || []).length} blocks, ${ann.knob_count ?? 0} knobs${ann.llm_outcome ? ` (LLM: ${ann.llm_outcome})` : ''}`],
  ];
  if (c.rewrite) rows.splice(4, 0, ['LLM rewrite', `${c.rewrite.accepted ? 'accepted' : 'not accepted'} after ${c.rewrite.attempts} attempt(s) ${c.rewrite.failure || ''}`]);
  const left = c.left || [];
  return el('div', { className: 'conversion' },
    el('h2', {}, 'Conversion'),
    table(['item', 'value'], rows),
    left.length ? el('h3', {}, 'Left as host NCCL') : null,
    left.length ? table(['line', 'construct', 'reason'], left.map((l) => [l.line, l.construct, l.reason])) : null);
}

// stop_when's outcome: the candidate that met the goal (with its re-runs), and those that did not
// hold up on theirs.
function goalSection(g) {
  if (!g) return null;
  const runs = (item) => (item.runs || []).map((v) => Number(v).toPrecision(4)).join(', ');
  const rows = [];
  const r = g.reached;
  rows.push(['met', r ? `${r.goal}: ${r.id} (generation ${r.generation}), ${r.metric} = ${Number(r.value).toPrecision(4)}${r.runs ? `; runs ${runs(r)}` : ''}` : 'not (yet)']);
  for (const item of g.refuted || []) rows.push(['not confirmed', `${item.id} (generation ${item.generation}): runs ${runs(item)}; ${item.why}`]);
  return el('div', { className: 'goal' }, el('h2', {}, 'Goal'), table(['item', 'value'], rows));
}

// The run's state as stored: running (braid holds the folder's lock), done, interrupted.
const duration = (s) => (s === null || s === undefined ? '-' : s < 90 ? `${Math.round(s)} s` : s < 5400 ? `${Math.round(s / 60)} min` : `${(s / 3600).toFixed(1)} h`);
function stateText(st) {
  const of = st.generations_total === null ? `${st.generations_done}` : `${st.generations_done} of ${st.generations_total}`;
  return `${st.state} · ${of} generations${st.eta_s !== null ? ` · ETA ${duration(st.eta_s)}` : ''}`;
}

async function viewOverview(r) {
  const base = `/api/runs/${r.run}`;
  const [ov, top, points, st] = await Promise.all([api(`${base}/overview`), api(`${base}/candidates?order=score&limit=10`),
    api(`${base}/points`), api(`${base}/state`)]);
  const cost = ov.cost.llm_calls_usd ?? ov.cost.candidates_usd;
  const kpi = (label, value) => el('div', { className: 'kpi' }, label, el('b', {}, value));
  const best = ov.best;
  return [
    el('h1', {}, `Run ${ov.name}`),
    el('p', { className: 'muted' }, ov.path),
    el('div', { className: 'kpis' },
      el('div', { className: `kpi state ${st.state}`, id: 'run-state', 'data-state': st.state, title: st.why }, 'state', el('b', {}, st.state)),
      kpi('generations', st.generations_total === null ? st.generations_done : `${st.generations_done} of ${st.generations_total}`),
      kpi('ETA', st.state === 'running' ? duration(st.eta_s) : '-'),
      kpi('candidates', ov.count),
      kpi('best score', best ? fmt(best.score) : '-'),
      kpi('best rests on', best ? (best.confirmed ? `median of ${best.runs} re-runs` : 'a single measurement') : '-'),
      kpi('best ratio to bound', best && best.ratio_to_bound !== null ? fmt(best.ratio_to_bound) : '-'),
      kpi('wall time', `${Math.round(ov.elapsed_s)} s`),
      kpi('LLM cost', `$${cost.toFixed(4)}`),
      kpi('LLM calls', ov.cost.llm_calls ?? '-')),
    best ? el('p', {}, 'Best: ', candLink(r.run, best.id), ` (generation ${best.generation}, island ${best.island})`) : null,
    el('p', { className: 'muted' }, st.why),
    conversionSection(ov.conversion),
    goalSection(ov.goal),
    el('h2', {}, 'Every candidate: is the best really faster?'),
    ov.noise ? el('p', {}, `Noise: the seed re-timed ${ov.noise.samples.length}x, spread ${Math.round(ov.noise.spread * 100)}% (median ${fmt(ov.noise.median)}).`)
      : el('p', { className: 'muted' }, 'Noise: not measured (the seed was not re-timed).'),
    el('div', { className: 'scatter' }, scoreScatter(points, (id) => { location.hash = `#/run/${r.run}/c/${encodeURIComponent(id)}`; })),
    el('div', { className: 'plots' },
      plot(`${base}/plots/best_by_eval.svg`, 'best score over evaluations'),
      plot(`${base}/plots/best_by_time.svg`, 'best score over wall time'),
      ov.has_ratio_to_bound ? plot(`${base}/plots/ratio_by_eval.svg`, 'ratio to bound of the best') : null,
      plot(`${base}/plots/failures.svg`, 'candidates by outcome')),
    el('h2', {}, 'Islands'),
    table(['island', 'candidates', 'ok', 'best score', 'best'], ov.islands.map((i) => [i.island, i.count, i.ok, fmt(i.best_score), i.best_id ? candLink(r.run, i.best_id) : '-'])),
    el('h2', {}, 'Models and patch types'),
    el('div', { className: 'two' }, table(['model', 'candidates'], Object.entries(ov.models)), table(['patch', 'candidates'], Object.entries(ov.patch_types))),
    el('h2', {}, 'Best candidates'),
    table(candidateHeaders, candidateRows(r.run, top.items), (i) => { location.hash = `#/run/${r.run}/c/${encodeURIComponent(top.items[i].id)}`; }),
  ];
}

// Knob and metric columns: each header sorts by it (a second click flips the direction).
function sortHeader(label, order, q, go) {
  const cur = q.get('order') || 'score';
  const dir = q.get('dir') || 'desc';
  const active = cur === order || (order === 'generation' && cur === 'generation_asc');
  let next = { order, dir: 'desc' };
  if (order === 'generation') next = { order: cur === 'generation' ? 'generation_asc' : 'generation', dir: '' };
  else if (order === 'score') next = { order: 'score', dir: '' };
  else if (active) next = { order, dir: dir === 'desc' ? 'asc' : 'desc' };
  const arrow = !active ? '' : order === 'generation' ? (cur === 'generation' ? ' ▼' : ' ▲') : order === 'score' ? ' ▼' : dir === 'asc' ? ' ▲' : ' ▼';
  return el('th', { className: `sortable${active ? ' sorted' : ''}`, 'data-order': order, onclick: () => go({ ...next, offset: 0 }) }, label + arrow);
}

async function viewCandidates(r) {
  const q = r.query;
  const order = q.get('order') || 'score';
  const offset = Number(q.get('offset') || 0);
  const limit = 50;
  const params = new URLSearchParams({ order, offset, limit });
  if (q.get('dir')) params.set('dir', q.get('dir'));
  if (q.get('island')) params.set('island', q.get('island'));
  if (q.get('failure')) params.set('failure', q.get('failure'));
  const [page, ov] = await Promise.all([api(`/api/runs/${r.run}/candidates?${params}`), api(`/api/runs/${r.run}/overview`)]);
  const go = (changes) => {
    const p = new URLSearchParams(q);
    for (const [k, v] of Object.entries(changes)) { if (v === '' || v === null) p.delete(k); else p.set(k, v); }
    location.hash = `#/run/${r.run}/candidates?${p}`;
  };
  const select = (label, value, options, key) => el('label', {}, `${label} `,
    (() => {
      const s = el('select', { onchange: (e) => go({ [key]: e.target.value, offset: 0 }) }, options.map(([v, t]) => el('option', { value: v }, t)));
      s.value = value;
      return s;
    })());
  const knobs = page.columns.knobs, metrics = page.columns.metrics.filter((m) => m !== 'ratio_to_bound');
  const head = el('tr', {}, el('th', {}, 'id'), sortHeader('score', 'score', q, go), el('th', {}, 're-measured'), el('th', {}, 'ratio to bound'),
    sortHeader('gen', 'generation', q, go),
    ['island', 'outcome', 'patch', 'model', 'parent', 'children'].map((h) => el('th', {}, h)),
    knobs.map((k) => sortHeader(k, `knob:${k}`, q, go)), metrics.map((m) => sortHeader(m, `metric:${m}`, q, go)));
  const t = el('table', { id: 'candidates' }, head);
  page.items.forEach((c, i) => {
    const cells = [...candidateRows(r.run, [c])[0], ...knobs.map((k) => c.knobs[k] ?? '-'), ...metrics.map((m) => fmt(c.metrics[m] ?? null))];
    const tr = el('tr', { className: 'clickable' }, cells.map((x) => el('td', {}, x)));
    tr.addEventListener('click', (e) => { if (e.target.tagName !== 'A') location.hash = `#/run/${r.run}/c/${encodeURIComponent(page.items[i].id)}`; });
    t.append(tr);
  });
  return [
    el('h1', {}, `Candidates (${page.total})`),
    el('div', {},
      select('island', q.get('island') || '', [['', 'all'], ...ov.islands.map((i) => [String(i.island), `island ${i.island}`])], 'island'),
      select('outcome', q.get('failure') || '', [['', 'all'], ...Object.keys(ov.failures).map((f) => [f, f])], 'failure'),
      el('span', { className: 'export' }, 'export every candidate: ',
        el('a', { href: `/api/runs/${r.run}/export.csv`, download: '', id: 'export-csv' }, 'CSV'), ' · ',
        el('a', { href: `/api/runs/${r.run}/export.json`, download: '', id: 'export-json' }, 'JSON'))),
    el('p', { className: 'muted' }, 'Click a column header to sort by it.'),
    pager(page, (o) => go({ offset: o })),
    el('div', { className: 'wide' }, t),
    pager(page, (o) => go({ offset: o })),
  ];
}

function pager(page, goto) {
  const last = Math.max(0, Math.ceil(page.total / page.limit) - 1);
  const cur = Math.floor(page.offset / page.limit);
  return el('div', { className: 'pager' },
    el('button', { onclick: () => goto(0), disabled: cur === 0 }, '« first'),
    el('button', { onclick: () => goto(Math.max(0, page.offset - page.limit)), disabled: cur === 0 }, '‹ prev'),
    `page ${cur + 1} of ${last + 1}`,
    el('button', { onclick: () => goto(page.offset + page.limit), disabled: cur >= last }, 'next ›'),
    el('button', { onclick: () => goto(last * page.limit), disabled: cur >= last }, 'last »'));
}

function diffView(text) {
  const pre = el('pre', { className: 'diff' });
  for (const line of text.split('\n')) {
    let cls = 'ctx';
    if (line.startsWith('+++') || line.startsWith('---') || line.startsWith('@@')) cls = 'hunk';
    else if (line.startsWith('+')) cls = 'add';
    else if (line.startsWith('-')) cls = 'del';
    pre.append(el('span', { className: cls }, line || ' '));
  }
  return pre;
}

async function viewCandidate(r) {
  const id = r.arg;
  const d = await api(`/api/runs/${r.run}/candidates/${encodeURIComponent(id)}`);
  const rec = d.record;
  const c = d.cascade;
  const levels = c.levels.map((name, i) => {
    const level = i + 1;
    let cls = '';
    if (level < c.level_reached || (level === c.level_reached && !c.failed)) cls = 'passed';
    else if (level === c.level_reached && c.failed) cls = 'failed';
    const t = c.timings && typeof c.timings === 'object' ? c.timings[['build', 'run', 'bench'][i]] : undefined;
    return el('span', { className: cls }, `L${level} ${name}${t !== undefined ? ` ${fmt(t, 3)} s` : ''}`);
  });
  return [
    el('h1', { 'data-candidate': rec.id }, `Candidate ${rec.id}`),
    el('p', {}, `generation ${rec.generation} · island ${rec.island_idx} · ${rec.patch_type} by ${rec.model} · `,
      `created ${when(rec.created_at)} · parent `, d.parent ? candLink(r.run, d.parent.id) : '-', ' · ',
      link('show in lineage', `#/run/${r.run}/tree/${encodeURIComponent(rec.id)}`)),
    el('div', { className: 'kpis' },
      el('div', { className: 'kpi' }, 'score', el('b', {}, fmt(rec.combined_score))),
      el('div', { className: 'kpi' }, 'correct', el('b', {}, rec.correct ? 'yes' : 'no')),
      el('div', { className: 'kpi' }, 'outcome', el('b', {}, rec.failure_kind)),
      el('div', { className: 'kpi' }, 'cost', el('b', {}, `$${fmt(rec.cost_usd, 3)}`))),
    el('h2', {}, 'Cascade'), el('div', { className: 'cascade', id: 'cascade' }, levels),
    rec.error_text ? [el('h2', {}, 'Error'), el('pre', { className: 'error' }, rec.error_text)] : null,
    el('div', { className: 'two' },
      el('div', {}, el('h2', {}, 'Public metrics'), kvTable(rec.public_metrics)),
      el('div', {}, el('h2', {}, 'Private metrics'), kvTable(rec.private_metrics)),
      el('div', {}, el('h2', {}, 'Knobs and cell'), kvTable({ knob_key: rec.knob_key, archive_cell: rec.archive_cell, in_archive: rec.in_archive }))),
    el('h2', {}, 'Feedback'), rec.text_feedback ? el('pre', { id: 'feedback' }, rec.text_feedback) : el('p', { className: 'muted' }, 'none'),
    profileView(rec.public_metrics && rec.public_metrics.profile),
    el('h2', {}, d.parent ? `Diff against parent ${short(d.parent.id)} (score ${fmt(d.parent.score)})` : 'Diff'),
    d.diff === null ? el('p', { className: 'muted' }, 'a seed: no parent')
      : d.diff === '' ? el('p', { className: 'muted', id: 'diff' }, 'the same code as its parent')
        : el('div', { id: 'diff' }, diffView(d.diff)),
    rec.code_diff ? el('details', {}, el('summary', {}, 'Patch as proposed'), el('pre', {}, rec.code_diff)) : null,
    el('h2', {}, 'Code'), el('pre', { id: 'code' }, rec.code),
    el('h2', {}, `Logs (${d.logs.length})`),
    d.logs.length ? d.logs.map((l) => el('details', {}, el('summary', {}, `${l.name} (${l.bytes} bytes)`), el('pre', {}, l.text)))
      : el('p', { className: 'muted' }, 'no log files kept for this generation'),
    el('h2', {}, `Children (${d.children_total ?? 0})`),
    d.children.length ? table(candidateHeaders, candidateRows(r.run, d.children)) : el('p', { className: 'muted' }, 'none'),
  ];
}

// Island colours match the server's plots (Okabe-Ito).
const palette = ['#000000', '#E69F00', '#56B4E9', '#009E73', '#F0E442', '#0072B2', '#D55E00', '#CC79A7', '#999999'];
async function viewTree(r) {
  const focus = r.arg || '';
  const up = Number(r.query.get('up') || 6), down = Number(r.query.get('down') || 3);
  const t = await api(`/api/runs/${r.run}/tree?${new URLSearchParams({ focus, up, down, max_children: 8 })}`);
  const key = `${r.run}/${t.focus}`;
  if (treeView.key !== key) { treeView.key = key; treeView.transform = { x: 0, y: 0, k: 1 }; }
  const side = el('div', { className: 'side', id: 'tree-side' }, el('p', { className: 'muted' }, 'Click a node for details; "+N" opens hidden children. Wheel zooms, drag pans.'));
  const colourSel = el('select', { onchange: (e) => { treeView.colour = e.target.value; draw(); } },
    el('option', { value: 'score' }, 'colour by score'), el('option', { value: 'island' }, 'colour by island'));
  colourSel.value = treeView.colour;
  const svg = svgEl('svg', { id: 'tree-svg' });
  const g = svgEl('g');
  svg.append(g);
  const colW = 150, rowH = 26;
  const scores = t.nodes.filter((n) => n.correct).map((n) => n.score);
  const lo = Math.min(...scores), hi = Math.max(...scores);
  const pos = new Map(t.nodes.map((n) => [n.id, [40 + n.x * colW, 30 + n.y * rowH]]));

  function showNode(n) {
    side.replaceChildren(
      el('h2', {}, `Candidate ${short(n.id)}`),
      kvTable({ id: n.id, score: n.score, correct: n.correct, outcome: n.failure, generation: n.generation, island: n.island,
        patch: n.patch_type, model: n.model, children: n.children, ratio_to_bound: n.ratio_to_bound }),
      el('p', {}, link('open candidate page', `#/run/${r.run}/c/${encodeURIComponent(n.id)}`)),
      el('p', {}, link('focus the tree here', `#/run/${r.run}/tree/${encodeURIComponent(n.id)}`)));
  }

  function draw() {
    g.replaceChildren();
    for (const e of t.edges) {
      const [x1, y1] = pos.get(e.from), [x2, y2] = pos.get(e.to), m = (x1 + x2) / 2;
      g.append(svgEl('path', { d: `M${x1},${y1} C${m},${y1} ${m},${y2} ${x2},${y2}`, fill: 'none', stroke: '#bbb' }));
    }
    for (const n of t.nodes) {
      const [x, y] = pos.get(n.id);
      const fill = treeView.colour === 'island' ? palette[n.island % palette.length] : n.correct ? scoreColour(n.score, lo, hi) : '#ccc';
      const circle = svgEl('circle', { cx: x, cy: y, r: n.focus ? 8 : 6, fill, stroke: n.focus ? '#d00' : '#333', 'stroke-width': n.focus ? 2.5 : 0.8,
        class: 'node', 'data-id': n.id });
      circle.append(svgEl('title', {}, `${n.id} score ${fmt(n.score)} ${n.failure}`));
      circle.addEventListener('click', (ev) => { ev.stopPropagation(); showNode(n); });
      g.append(circle);
      g.append(svgEl('text', { x: x + 10, y: y + 4, 'font-size': 10, fill: '#333' }, `${short(n.id)} ${n.correct ? fmt(n.score, 3) : n.failure}`));
      if (n.hidden > 0) {
        const more = svgEl('text', { x: x + 10, y: y + 15, class: 'more', 'data-more': n.id }, `+${n.hidden} more`);
        more.addEventListener('click', (ev) => { ev.stopPropagation(); location.hash = `#/run/${r.run}/tree/${encodeURIComponent(n.id)}?up=1&down=2`; });
        g.append(more);
      }
    }
    const { x, y, k } = treeView.transform;
    g.setAttribute('transform', `translate(${x},${y}) scale(${k})`);
  }
  draw();
  // Zoom around the pointer; pan by dragging.
  svg.addEventListener('wheel', (ev) => {
    ev.preventDefault();
    const tr = treeView.transform, rect = svg.getBoundingClientRect();
    const px = ev.clientX - rect.left, py = ev.clientY - rect.top;
    const f = ev.deltaY < 0 ? 1.15 : 1 / 1.15;
    const k = Math.min(8, Math.max(0.1, tr.k * f));
    tr.x = px - (px - tr.x) * (k / tr.k); tr.y = py - (py - tr.y) * (k / tr.k); tr.k = k;
    g.setAttribute('transform', `translate(${tr.x},${tr.y}) scale(${tr.k})`);
  }, { passive: false });
  svg.addEventListener('pointerdown', (ev) => { treeView.drag = [ev.clientX, ev.clientY, treeView.transform.x, treeView.transform.y]; });
  svg.addEventListener('pointermove', (ev) => {
    const drag = treeView.drag;
    if (!drag) return;
    treeView.transform.x = drag[2] + ev.clientX - drag[0]; treeView.transform.y = drag[3] + ev.clientY - drag[1];
    g.setAttribute('transform', `translate(${treeView.transform.x},${treeView.transform.y}) scale(${treeView.transform.k})`);
  });
  const focusNode = t.nodes.find((n) => n.focus);
  if (focusNode) showNode(focusNode);
  return [
    el('h1', {}, `Lineage around ${short(t.focus)} (${t.nodes.length} of ${t.total} candidates shown)`),
    el('div', {}, colourSel, ' ',
      focusNode && focusNode.has_parent ? link('↑ more ancestors', `#/run/${r.run}/tree/${encodeURIComponent(t.focus)}?up=${up + 4}&down=${down}`) : null, ' ',
      link('↓ deeper', `#/run/${r.run}/tree/${encodeURIComponent(t.focus)}?up=${up}&down=${down + 2}`), ' ',
      link('best candidate', `#/run/${r.run}/tree`)),
    el('div', { className: 'tree-wrap' }, svg, side),
  ];
}

async function viewIslands(r) {
  const offset = Number(r.query.get('offset') || 0);
  const [isl, arch] = await Promise.all([api(`/api/runs/${r.run}/islands`), api(`/api/runs/${r.run}/archive?offset=${offset}&limit=50`)]);
  return [
    el('h1', {}, 'Islands'),
    table(['island', 'candidates', 'correct', 'in archive', 'migrants', 'max gen', 'best score', 'best', 'outcomes'],
      isl.islands.map((i) => [i.island, i.count, i.correct, i.archive, i.migrants, i.max_generation, fmt(i.best_score),
        i.best_id ? candLink(r.run, i.best_id) : '-', Object.entries(i.failures).map(([k, v]) => `${k}: ${v}`).join(', ')])),
    el('h2', {}, `Archive (${arch.total} candidates in ${arch.cells} cells)`),
    pager({ ...arch, limit: 50 }, (o) => { location.hash = `#/run/${r.run}/islands?offset=${o}`; }),
    table(['id', 'score', 'island', 'gen', 'cell', 'patch'], arch.items.map((c) => [candLink(r.run, c.id), fmt(c.score), c.island, c.generation, c.archive_cell, c.patch_type])),
  ];
}

async function viewMeta(r) {
  const m = await api(`/api/runs/${r.run}/meta`);
  return [
    el('h1', {}, `Meta recommendations (${m.total})`),
    m.recommendations.length === 0 ? el('p', { className: 'muted' }, 'none written yet (meta_N.txt appear every meta_rec_interval generations)') : null,
    m.recommendations.map((x) => el('div', {}, el('h2', {}, `meta_${x.n}.txt`, el('span', { className: 'muted' }, ` written ${when(x.written_at)}`)), el('pre', {}, x.text))),
    el('h2', {}, 'meta_memory.json'),
    m.memory === null ? el('p', { className: 'muted' }, 'none') : el('pre', {}, typeof m.memory === 'string' ? m.memory : JSON.stringify(m.memory, null, 2)),
  ];
}

// Knob runs are knob searches: which knob settings scored well (parallel coordinates) and how
// each knob on its own moves the score (effect plots).
async function viewKnobs(r) {
  const data = await api(`/api/runs/${r.run}/export.json`);
  const correct = data.items.filter((c) => c.correct).length;
  if (!data.knobs.length) return [el('h1', {}, 'Knobs'), el('p', { className: 'muted', id: 'no-knobs' }, 'this run\'s candidates set no knobs')];
  return [
    el('h1', {}, `Knobs (${data.knobs.length}) over ${correct} correct candidates`),
    el('h2', {}, 'Parallel coordinates'),
    el('p', { className: 'muted' }, 'One line per candidate through its knob values to its score; colour: score (yellow best).'),
    el('div', { className: 'wide' }, parallelCoordinates(data)),
    el('h2', {}, 'Score by knob value'),
    el('p', { className: 'muted' }, 'Every correct candidate by the value of one knob; the bar is the median per value.'),
    el('div', { className: 'plots', id: 'effects' }, knobEffects(data)),
  ];
}

// Several runs side by side, only when they measured the same thing: runs of different
// workloads (or seeds) are flagged, and their curves overlaid only when asked for.
async function viewCompare(r) {
  const [k, w] = await Promise.all([api('/api/compare/knobs'), api('/api/compare/workloads')]);
  const mixed = !w.same;
  const overlay = !mixed || r.query.get('mixed') === '1';
  const q = mixed ? '?mixed=1&' : '?';
  return [
    el('h1', {}, `Comparison of ${runs.length} runs`),
    mixed ? el('div', { className: 'warn', id: 'workload-warning' }, el('b', {}, 'Not comparable: '), `${w.why}; their scores do not measure the same thing.`,
      overlay ? null : [' ', el('a', { href: '#/compare?mixed=1', id: 'overlay-anyway' }, 'overlay their curves anyway')]) : null,
    el('h2', {}, 'Workloads'),
    table(['run', 'workload', 'folder', 'seed program'], w.runs.map((x) => [x.name, x.workload ?? '-', x.workload_dir ?? '-', x.seed_hash ? short(x.seed_hash) : '-'])),
    overlay ? el('div', { className: 'plots' }, plot(`/api/compare/plots/best_by_eval.svg${q}`, 'best so far, per run'),
      plot(`/api/compare/plots/best_by_time.svg${q}`, 'best so far over time, per run')) : null,
    el('h2', {}, 'Best candidates'),
    table(['run', 'best', 'score', 'generation'], k.runs.map((x, i) => [x.name, x.best ? candLink(i, x.best.id) : '-', x.best ? fmt(x.best.score) : '-', x.best ? x.best.generation : '-'])),
    el('h2', {}, 'Knob choices of each best'),
    k.knobs.length ? table(['knob', ...k.runs.map((x) => x.name)], k.knobs.map((row) => [row.name, ...row.values.map((v) => v ?? '-')]))
      : el('p', { className: 'muted' }, 'the bests declare no knobs'),
  ];
}

const views = { overview: viewOverview, candidates: viewCandidates, c: viewCandidate, tree: viewTree, islands: viewIslands, meta: viewMeta, knobs: viewKnobs, compare: viewCompare };

async function render() {
  const seq = ++renderSeq;
  const hash = location.hash;  // what this render shows; a click that changes it makes it stale
  const r = route();
  setNav(r);
  const view = views[r.view] || viewOverview;
  main.dataset.ready = '';
  try {
    const content = await view(r);
    if (seq !== renderSeq) return;
    main.replaceChildren(...[content].flat(2).filter((x) => x instanceof Node));
  } catch (err) {
    if (seq !== renderSeq) return;
    main.replaceChildren(el('p', { className: 'error' }, `Error: ${err.message}`));
  }
  main.dataset.view = r.view;
  main.dataset.hash = hash;
  main.dataset.ready = String(seq);
}

// What a running search has in flight (its activity.json): evaluations, proposals, the
// evaluator's note (Slurm's running and queued jobs).
function activityText(a) {
  if (!a) return '';
  const parts = [`${a.in_flight} evaluating`];
  if (a.proposing) parts.push(`${a.proposing} proposals (${a.proposals_asking} asked, oldest ${a.proposal_wait_s} s)`);
  if (a.proposals_paused_s) parts.push(`rate-limited for ${a.proposals_paused_s} s`);
  if (a.note) parts.push(a.note);
  return ' · ' + parts.join(' · ');
}

// Live view: a cheap status poll; views that summarise the run re-render when it grew.
async function poll() {
  try {
    const r = route();
    const st = await api(`/api/runs/${r.run}/status`);
    const liveEl = document.getElementById('live');
    liveEl.textContent = `${stateText(st.state)} · ${st.count} candidates · best ${st.best ? fmt(st.best.score) : '-'}${st.best && !st.best.confirmed ? ' (single measurement)' : ''}${activityText(st.state.activity)}`;
    liveEl.dataset.count = st.count;
    liveEl.dataset.state = st.state.state;
    if (lastChanges !== null && st.changes !== lastChanges && ['overview', 'candidates', 'islands', 'meta', 'compare', 'tree', 'knobs'].includes(r.view)) {
      lastChanges = st.changes;
      await render();
    }
    lastChanges = st.changes;
  } catch (err) {
    document.getElementById('live').textContent = `offline: ${err.message}`;
  }
  setTimeout(poll, 2000);
}

async function start() {
  runs = (await api('/api/runs')).runs;
  window.addEventListener('hashchange', render);
  await render();
  poll();
}

start();
