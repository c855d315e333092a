// Charts drawn in the page as plain SVG (no library: the machines have no network): every
// candidate's measurements, and for knob runs the parallel coordinates and per-knob effects.
import { el, svgEl, fmt, short, scoreColour } from './dom.js';

// Linear scale with a little headroom; a flat range is widened so points stay visible.
function scale(lo, hi, from, to) {
  if (!(hi > lo)) { const pad = Math.abs(lo) * 0.05 || 1; lo -= pad; hi += pad; }
  const pad = (hi - lo) * 0.05;
  lo -= pad; hi += pad;
  const f = (v) => from + ((v - lo) / (hi - lo)) * (to - from);
  f.ticks = (n) => Array.from({ length: n + 1 }, (_, i) => lo + ((hi - lo) * i) / n);
  return f;
}

function axes(svg, x, y, w, h, m, xLabel, yLabel) {
  svg.append(svgEl('line', { x1: m.l, y1: h - m.b, x2: w - m.r, y2: h - m.b, class: 'axis' }));
  svg.append(svgEl('line', { x1: m.l, y1: m.t, x2: m.l, y2: h - m.b, class: 'axis' }));
  for (const t of y.ticks(4)) {
    svg.append(svgEl('line', { x1: m.l, y1: y(t), x2: w - m.r, y2: y(t), class: 'grid' }));
    svg.append(svgEl('text', { x: m.l - 4, y: y(t) + 3, 'text-anchor': 'end', class: 'tick' }, fmt(t, 3)));
  }
  // Evaluations are counted: whole-number ticks only, each once.
  if (x) for (const t of new Set(x.ticks(5).map(Math.round))) svg.append(svgEl('text', { x: x(t), y: h - m.b + 14, 'text-anchor': 'middle', class: 'tick' }, t));
  svg.append(svgEl('text', { x: (m.l + w - m.r) / 2, y: h - 4, 'text-anchor': 'middle', class: 'label' }, xLabel));
  svg.append(svgEl('text', { x: 12, y: (m.t + h - m.b) / 2, transform: `rotate(-90 12 ${(m.t + h - m.b) / 2})`, 'text-anchor': 'middle', class: 'label' }, yLabel));
}

// Every correct candidate as a point (score over evaluation index). A single measurement is a
// hollow circle; a candidate re-measured by confirmation is filled, with the range of its
// re-runs as a bar and their median as a tick; one that lost its confirmation is red; a
// `braid rebench` median is a diamond. The seed's score is a dashed line (with the seed's
// re-timed spread as a band), the reported best a ring. Clicking a point opens its page.
export function scoreScatter(p, open) {
  const w = 900, h = 340, m = { l: 56, r: 16, t: 14, b: 34 };
  const ys = [];
  for (const c of p.items) { ys.push(c.score, ...c.reruns); if (c.rebench_median !== null) ys.push(c.rebench_median); }
  if (p.seed) ys.push(p.seed.score);
  if (p.best) ys.push(p.best.score);
  const svg = svgEl('svg', { id: 'scatter', viewBox: `0 0 ${w} ${h}`, width: w, height: h, role: 'img' });
  svg.append(svgEl('title', {}, 'every candidate: score over evaluations'));
  if (!ys.length) return [svg, el('p', { className: 'muted' }, 'no correct candidate yet')];
  const x = scale(1, Math.max(2, p.evaluations), m.l, w - m.r);
  const y = scale(Math.min(...ys), Math.max(...ys), h - m.b, m.t);
  axes(svg, x, y, w, h, m, 'evaluation', 'score');
  const noise = p.noise;
  if (noise && noise.median > 0 && noise.spread > 0) {
    const half = (noise.median * noise.spread) / 2;
    const top = y(noise.median + half), bottom = y(noise.median - half);
    svg.append(svgEl('rect', { x: m.l, y: top, width: w - m.l - m.r, height: Math.max(1, bottom - top), class: 'noise-band' },
      svgEl('title', {}, `seed re-timed ${noise.samples.length}x: median ${fmt(noise.median)}, spread ${Math.round(noise.spread * 100)}%`)));
  }
  if (p.seed) {
    svg.append(svgEl('line', { x1: m.l, y1: y(p.seed.score), x2: w - m.r, y2: y(p.seed.score), class: 'seed-line' }));
    svg.append(svgEl('text', { x: w - m.r - 2, y: y(p.seed.score) - 4, 'text-anchor': 'end', class: 'seed-label' }, `seed ${fmt(p.seed.score)}`));
  }
  // Many single measurements are drawn as one path (round dots), so 100k candidates stay light.
  const singles = p.items.filter((c) => c.reruns.length === 0);
  const dense = singles.length > 3000;
  if (dense) svg.append(svgEl('path', { d: singles.map((c) => `M${x(c.x).toFixed(1)},${y(c.score).toFixed(1)}h0`).join(''), class: 'pt single dense' }));
  const byPoint = [];
  for (const c of p.items) {
    const cx = x(c.x), cy = y(c.score);
    byPoint.push([cx, cy, c]);
    if (c.reruns.length === 0) {
      if (!dense) svg.append(svgEl('circle', { cx, cy, r: 3.5, class: 'pt single', 'data-id': c.id }, svgEl('title', {}, `${short(c.id)}: ${fmt(c.score)} (single measurement)`)));
      continue;
    }
    const lo = Math.min(...c.reruns), hi = Math.max(...c.reruns);
    const cls = c.refuted ? 'refuted' : 'confirmed';
    svg.append(svgEl('line', { x1: cx, y1: y(lo), x2: cx, y2: y(hi), class: `range ${cls}` }));
    svg.append(svgEl('line', { x1: cx - 5, y1: y(c.median), x2: cx + 5, y2: y(c.median), class: `median ${cls}` }));
    svg.append(svgEl('circle', { cx, cy, r: 4.5, class: `pt ${cls}`, 'data-id': c.id },
      svgEl('title', {}, `${short(c.id)}: first ${fmt(c.score)}, re-runs ${c.reruns.map((v) => fmt(v, 3)).join(', ')} (median ${fmt(c.median)}${c.refuted ? ', not promoted' : ''})`)));
  }
  for (const c of p.items.filter((i) => i.rebench_median !== null)) {
    const cx = x(c.x), cy = y(c.rebench_median);
    svg.append(svgEl('path', { d: `M${cx},${cy - 6}L${cx + 6},${cy}L${cx},${cy + 6}L${cx - 6},${cy}Z`, class: 'rebench', 'data-id': c.id },
      svgEl('title', {}, `${short(c.id)}: braid rebench median ${fmt(c.rebench_median)} of ${c.rebench_runs}`)));
  }
  const best = p.best && p.items.find((c) => c.id === p.best.id);
  if (best) {
    svg.append(svgEl('circle', { cx: x(best.x), cy: y(p.best.score), r: 9, class: `best-mark ${p.best.confirmed ? 'confirmed' : 'single'}` },
      svgEl('title', {}, `reported best ${short(best.id)}: ${fmt(p.best.score)}`)));
  }
  svg.addEventListener('click', (ev) => {
    const r = svg.getBoundingClientRect(), sx = ((ev.clientX - r.left) / r.width) * w, sy = ((ev.clientY - r.top) / r.height) * h;
    let near = null, d2 = 100;
    for (const [px, py, c] of byPoint) { const d = (px - sx) ** 2 + (py - sy) ** 2; if (d < d2) { d2 = d; near = c; } }
    if (near) open(near.id);
  });
  const confirmed = p.items.filter((c) => c.reruns.length && !c.refuted).length, refuted = p.items.filter((c) => c.refuted).length;
  const legend = el('div', { className: 'legend', id: 'scatter-legend' },
    el('span', { className: 'lg single' }, `single measurement (${p.single_measurements}${p.single_measurements > singles.length ? `; the lowest and highest of each range of evaluations drawn: ${singles.length}` : ''})`),
    el('span', { className: 'lg confirmed' }, `re-measured: re-run range and median (${confirmed})`),
    el('span', { className: 'lg refuted' }, `re-measured, not promoted (${refuted})`),
    el('span', { className: 'lg rebench' }, 'braid rebench median'),
    el('span', { className: 'lg seed' }, noise ? 'seed score; band: its re-timed spread' : 'seed score'),
    el('span', { className: 'lg best' }, p.best ? `reported best: ${fmt(p.best.score)} (${p.best.confirmed ? `median of ${p.best.runs} re-runs` : 'single measurement'})` : 'no best yet'),
    p.failed ? el('span', { className: 'muted' }, `${p.failed} failed candidates not shown`) : null);
  return [svg, legend];
}

// Knob values in axis order: numbers ascending, then text.
function axisValues(items, name) {
  const vals = [...new Set(items.map((c) => c.knobs[name]).filter((v) => v !== undefined))];
  const num = (v) => (v.trim() !== '' && Number.isFinite(Number(v)) ? Number(v) : null);
  return vals.sort((a, b) => (num(a) !== null && num(b) !== null ? num(a) - num(b) : num(a) !== null ? -1 : num(b) !== null ? 1 : a.localeCompare(b)));
}

// One vertical axis per knob (its values spaced evenly) and the score last; one line per
// correct candidate, coloured by score (the best lines drawn last, on top).
export function parallelCoordinates(data) {
  const items = data.items.filter((c) => c.correct).sort((a, b) => a.score - b.score);
  const names = data.knobs;
  const w = Math.max(600, 140 * (names.length + 1)), h = 360, m = { l: 50, r: 60, t: 28, b: 30 };
  const svg = svgEl('svg', { id: 'parallel', viewBox: `0 0 ${w} ${h}`, width: w, height: h, role: 'img' });
  svg.append(svgEl('title', {}, 'parallel coordinates: knobs and score'));
  if (!items.length) return svg;
  const lo = items[0].score, hi = items[items.length - 1].score;
  const axisX = (i) => m.l + ((w - m.l - m.r) * i) / names.length;
  const ys = names.map((n) => {
    const vals = axisValues(items, n);
    const at = new Map(vals.map((v, i) => [v, vals.length === 1 ? (m.t + h - m.b) / 2 : m.t + ((h - m.t - m.b) * (vals.length - 1 - i)) / (vals.length - 1)]));
    return { vals, at };
  });
  const sy = scale(lo, hi, h - m.b, m.t);
  for (const c of items) {
    const pts = names.map((n, i) => (c.knobs[n] === undefined ? null : [axisX(i), ys[i].at.get(c.knobs[n])]));
    pts.push([axisX(names.length), sy(c.score)]);
    const d = pts.filter(Boolean).map(([px, py], i) => `${i ? 'L' : 'M'}${px.toFixed(1)},${py.toFixed(1)}`).join('');
    svg.append(svgEl('path', { d, class: 'pc-line', stroke: scoreColour(c.score, lo, hi), 'data-id': c.id }, svgEl('title', {}, `${short(c.id)}: ${fmt(c.score)}`)));
  }
  names.forEach((n, i) => {
    svg.append(svgEl('line', { x1: axisX(i), y1: m.t, x2: axisX(i), y2: h - m.b, class: 'pc-axis' }));
    svg.append(svgEl('text', { x: axisX(i), y: m.t - 10, 'text-anchor': 'middle', class: 'label pc-name' }, n));
    for (const [v, py] of ys[i].at) svg.append(svgEl('text', { x: axisX(i) - 5, y: py + 3, 'text-anchor': 'end', class: 'tick' }, v));
  });
  const sx = axisX(names.length);
  svg.append(svgEl('line', { x1: sx, y1: m.t, x2: sx, y2: h - m.b, class: 'pc-axis' }));
  svg.append(svgEl('text', { x: sx, y: m.t - 10, 'text-anchor': 'middle', class: 'label' }, 'score'));
  for (const t of sy.ticks(4)) svg.append(svgEl('text', { x: sx + 5, y: sy(t) + 3, class: 'tick' }, fmt(t, 3)));
  return svg;
}

// Per knob: the score of every correct candidate by the knob's value (jittered dots), with
// the median per value as a bar, so a knob that matters shows as a trend.
export function knobEffects(data) {
  const items = data.items.filter((c) => c.correct);
  const all = items.map((c) => c.score);
  const lo = Math.min(...all), hi = Math.max(...all);
  return data.knobs.map((n) => {
    const vals = axisValues(items, n);
    const w = Math.max(220, 60 * vals.length + 70), h = 220, m = { l: 50, r: 10, t: 10, b: 34 };
    const svg = svgEl('svg', { class: 'effect', 'data-knob': n, viewBox: `0 0 ${w} ${h}`, width: w, height: h, role: 'img' });
    svg.append(svgEl('title', {}, `score by ${n}`));
    const y = scale(lo, hi, h - m.b, m.t);
    axes(svg, null, y, w, h, m, n, 'score');
    const band = (w - m.l - m.r) / Math.max(1, vals.length);
    vals.forEach((v, i) => {
      const cx = m.l + band * (i + 0.5);
      const scores = items.filter((c) => c.knobs[n] === v).map((c) => c.score).sort((a, b) => a - b);
      scores.forEach((s, k) => {
        const jitter = ((k * 0.618) % 1 - 0.5) * band * 0.5;  // deterministic, so screenshots compare
        svg.append(svgEl('circle', { cx: cx + jitter, cy: y(s), r: 2.5, class: 'effect-pt' }));
      });
      const med = scores[Math.floor(scores.length / 2)];
      svg.append(svgEl('line', { x1: cx - band * 0.35, y1: y(med), x2: cx + band * 0.35, y2: y(med), class: 'effect-median' },
        svgEl('title', {}, `${n}=${v}: median ${fmt(med)} of ${scores.length}`)));
      svg.append(svgEl('text', { x: cx, y: h - m.b + 14, 'text-anchor': 'middle', class: 'tick' }, v));
    });
    return svg;
  });
}
