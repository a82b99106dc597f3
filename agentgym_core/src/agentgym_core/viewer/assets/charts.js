// Line charts drawn as inline SVG (no library): one chart per metric key, one series per run and
// line kind (train solid with round points, eval dashed with square points); every point is clickable.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const RUN_COLOURS = ["#2f6fdf", "#d9822b", "#1f8a4c", "#b8328f", "#6b4fd1", "#8a6d1f", "#11879b", "#c2352b"];
const MAX_POINTS_DRAWN = 200;  // past this a series is a line only (hundreds of circles would be noise)

function svgEl(name, attrs) {
  const el = document.createElementNS(SVG_NS, name);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, v);
  return el;
}

function formatNumber(v) {
  if (v === null || v === undefined || Number.isNaN(v)) return "–";
  const a = Math.abs(v);
  if (a !== 0 && (a < 0.001 || a >= 100000)) return v.toExponential(2);
  if (Number.isInteger(v)) return String(v);
  return v.toFixed(a < 1 ? 3 : 2);
}

// Axis labels have ~7 characters of room.
function axisNumber(v) {
  const a = Math.abs(v);
  if (a >= 1e4) return a >= 1e6 ? (v / 1e6).toFixed(1) + "M" : (v / 1e3).toFixed(1) + "k";
  if (a !== 0 && a < 1e-3) return v.toExponential(1);
  return formatNumber(v);
}

function finitePairs(s) {
  return s.xs.map((x, k) => [x, s.ys[k]]).filter(([x, y]) => typeof x === "number" && typeof y === "number" && Number.isFinite(y));
}

// series: [{run, kind: "train"|"eval", xs, ys, colour}]
// options: {selected: {run, kind, step} | null, onPick(run, kind, step)}
function lineChart(key, series, options) {
  // The SVG stretches to the chart's width, so text inside it would shrink with it (to ~6 px in a
  // three-column grid): the axis labels are HTML beside it, in CSS pixels.
  const W = 300, H = 96, L = 4, R = 4, T = 6, B = 6;
  const box = document.createElement("div");
  box.className = "chart";
  box.dataset.metric = key;
  const points = series.flatMap(finitePairs);
  const first = series.find(s => s.ys.length);
  const last = first ? first.ys[first.ys.length - 1] : null;
  // The title's tooltip is the docs' text for this metric ("What a run logs"), when it has one.
  const help = options.help && options.help[key];
  box.innerHTML = `<div class="title"${help ? ` title="${esc(key + ": " + help)}"` : ""}><span class="name">${esc(key).replace(/([_/])/g, "$1<wbr>")}${
    help ? '<sup class="help" aria-hidden="true">?</sup>' : ""}</span><span class="muted">${formatNumber(last)}</span></div>
    <div class="plot"><div class="yaxis"></div><div class="area"></div><div class="xaxis"></div></div>`;
  const svg = svgEl("svg", { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", role: "img", "aria-label": key });
  box.querySelector(".area").appendChild(svg);
  if (!points.length) {
    box.querySelector(".area").insertAdjacentHTML("beforeend", '<div class="empty">no finite values</div>');
    return box;
  }
  let [x0, x1] = [Math.min(...points.map(p => p[0])), Math.max(...points.map(p => p[0]))];
  let [y0, y1] = [Math.min(...points.map(p => p[1])), Math.max(...points.map(p => p[1]))];
  if (x0 === x1) { x0 -= 1; x1 += 1; }
  if (y0 === y1) { const pad = Math.abs(y0) * 0.1 || 1; y0 -= pad; y1 += pad; }
  const sx = x => L + (x - x0) / (x1 - x0) * (W - L - R);
  const sy = y => T + (1 - (y - y0) / (y1 - y0)) * (H - T - B);
  const axis = { stroke: "#d9dde3", "stroke-width": 1, "vector-effect": "non-scaling-stroke" };
  svg.appendChild(svgEl("line", { x1: 0, y1: H, x2: W, y2: H, ...axis }));
  svg.appendChild(svgEl("line", { x1: 0, y1: 0, x2: 0, y2: H, ...axis }));
  box.querySelector(".yaxis").innerHTML = `<span>${esc(axisNumber(y1))}</span><span>${esc(axisNumber(y0))}</span>`;
  box.querySelector(".xaxis").innerHTML = `<span>${esc(axisNumber(x0))}</span><span>step</span><span>${esc(axisNumber(x1))}</span>`;
  const sel = options.selected;
  if (sel && sel.step >= x0 && sel.step <= x1) {
    svg.appendChild(svgEl("line", { x1: sx(sel.step), x2: sx(sel.step), y1: T, y2: H - B, class: "cursor",
      stroke: sel.kind === "eval" ? "#d9822b" : "#2f6fdf", "stroke-width": 1, "stroke-dasharray": "2 2" }));
  }
  for (const s of series) {
    const pts = finitePairs(s);
    if (!pts.length) continue;
    const evalLine = s.kind === "eval";
    svg.appendChild(svgEl("polyline", {
      points: pts.map(([x, y]) => `${sx(x).toFixed(1)},${sy(y).toFixed(1)}`).join(" "),
      fill: "none", stroke: s.colour, "stroke-width": 1.5, "stroke-dasharray": evalLine ? "4 2" : "",
      "vector-effect": "non-scaling-stroke", class: `line ${s.kind}`, "data-run": s.run,
    }));
    if (pts.length > MAX_POINTS_DRAWN) continue;
    for (const [x, y] of pts) {
      const picked = sel && sel.run === s.run && sel.kind === s.kind && sel.step === x;
      const attrs = { fill: evalLine ? "#fff" : s.colour, stroke: s.colour, "stroke-width": 1.5,
        class: `pt ${s.kind}${picked ? " picked" : ""}`, "data-step": x, "data-run": s.run };
      const mark = evalLine
        ? svgEl("rect", { x: sx(x) - 3, y: sy(y) - 3, width: 6, height: 6, ...attrs })
        : svgEl("circle", { cx: sx(x), cy: sy(y), r: 3, ...attrs });
      const tip = svgEl("title");
      tip.textContent = `${s.run === "." ? "this run" : s.run} · ${s.kind} · step ${x}: ${formatNumber(y)}`
        + (evalLine ? " (click: this evaluation's metrics)" : " (click: this step's trajectories)");
      mark.appendChild(tip);
      mark.addEventListener("click", () => options.onPick(s.run, s.kind, x));
      svg.appendChild(mark);
    }
  }
  return box;
}

// The union of the shown runs' chart sections, in the first run's order, keys merged. A key that is
// quiet in one run but moves in another is charted with the moving ones, not folded away.
function mergeSections(overviews) {
  const merged = [];
  for (const ov of overviews) {
    for (const { section, keys } of ov.sections || []) {
      let entry = merged.find(m => m.section === section);
      if (!entry) { entry = { section, keys: [] }; merged.push(entry); }
      for (const k of keys) if (!entry.keys.includes(k)) entry.keys.push(k);
    }
  }
  const moving = new Set(merged.filter(m => m.section !== QUIET_SECTION).flatMap(m => m.keys));
  const quiet = merged.find(m => m.section === QUIET_SECTION);
  if (quiet) {
    quiet.keys = quiet.keys.filter(k => !moving.has(k));
    merged.splice(merged.indexOf(quiet), 1);
    if (quiet.keys.length) merged.push(quiet);  // always last
  }
  return merged;
}

const QUIET_SECTION = "quiet";  // charts of all zeros or values that never changed: folded unless opened

function sectionSummary(section, keys) {
  if (section === QUIET_SECTION) {
    return `${keys.length} quiet chart${keys.length === 1 ? "" : "s"} <span class="muted">(all zero, or values that never changed)</span>`;
  }
  return `${esc(section)} <span class="muted">(${keys.length})</span>`;
}

// runs: [{name, colour, overview}]; the DOM of every section, one chart per key.
// options.closed: sections the reader folded; options.opened: folded-by-default sections they opened.
function chartSections(runs, options) {
  const frag = document.createDocumentFragment();
  for (const { section, keys } of mergeSections(runs.map(r => r.overview))) {
    const details = document.createElement("details");
    details.className = "chart-section";
    details.dataset.section = section;
    details.open = section === QUIET_SECTION ? Boolean(options.opened && options.opened.has(section))
      : !(options.closed && options.closed.has(section));
    details.addEventListener("toggle", () => options.onToggle && options.onToggle(section, details.open));
    details.innerHTML = `<summary>${sectionSummary(section, keys)}</summary><div class="charts"></div>`;
    const grid = details.querySelector(".charts");
    for (const key of keys) {
      const series = [];
      for (const r of runs) {
        for (const kind of ["train", "eval"]) {
          const m = r.overview.metrics[kind] || {};
          if (m[key]) series.push({ run: r.name, kind, xs: m.step || [], ys: m[key], colour: r.colour });
        }
      }
      const help = Object.assign({}, ...runs.map(r => r.overview.help || {}));
      grid.appendChild(lineChart(key, series, { ...options, help }));
    }
    frag.appendChild(details);
  }
  return frag;
}
