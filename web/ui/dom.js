// DOM helpers shared by the UI's modules. Values from a run reach the page only through text
// nodes and attribute setters, never as markup.
export const SVG_NS = 'http://www.w3.org/2000/svg';

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'onclick' || k === 'onchange') node.addEventListener(k.slice(2), v);
    else if (k === 'className') node.className = v;
    else node.setAttribute(k, String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

export function svgEl(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== undefined && v !== null) node.setAttribute(k, String(v));
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

export const fmt = (v, digits = 4) => (v === null || v === undefined ? '-' : typeof v === 'number' ? Number(v.toPrecision(digits)).toString() : String(v));
export const short = (id) => (id ? id.slice(0, 10) : '-');
export const when = (t) => (t ? new Date(t * 1000).toISOString().replace('T', ' ').slice(0, 19) : '-');


// Viridis, sampled: a score's colour between lo and hi (colour-blind safe, prints in grey).
export function scoreColour(s, lo, hi) {
  const stops = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
  const t = hi > lo ? Math.min(1, Math.max(0, (s - lo) / (hi - lo))) : 1;
  const pos = t * 4, k = Math.min(3, Math.floor(pos)), f = pos - k;
  return `rgb(${stops[k].map((a, i) => Math.round(a + (stops[k + 1][i] - a) * f)).join(',')})`;
}
