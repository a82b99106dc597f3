// Small line charts drawn as inline SVG (no library): one series per colour, points clickable.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";

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

// series: [{xs, ys, colour, dashed, name}]; options: {selected, onPick(x)}
function lineChart(title, series, options) {
  const W = 300, H = 96, L = 34, R = 6, T = 6, B = 14;
  const box = document.createElement("div");
  box.className = "chart";
  box.dataset.metric = title;
  const points = series.flatMap(s => s.xs.map((x, k) => [x, s.ys[k]]))
    .filter(([x, y]) => typeof x === "number" && typeof y === "number" && Number.isFinite(y));
  const last = series[0] && series[0].ys.length ? series[0].ys[series[0].ys.length - 1] : null;
  const head = document.createElement("div");
  head.className = "title";
  head.innerHTML = `<span>${title}</span><span class="muted">${formatNumber(last)}</span>`;
  box.appendChild(head);
  const svg = svgEl("svg", { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", role: "img", "aria-label": title });
  box.appendChild(svg);
  if (!points.length) {
    const t = svgEl("text", { x: W / 2, y: H / 2, "text-anchor": "middle", "font-size": 10, fill: "#6b7480" });
    t.textContent = "not logged";
    svg.appendChild(t);
    return box;
  }
  let [x0, x1] = [Math.min(...points.map(p => p[0])), Math.max(...points.map(p => p[0]))];
  let [y0, y1] = [Math.min(...points.map(p => p[1])), Math.max(...points.map(p => p[1]))];
  if (x0 === x1) { x0 -= 1; x1 += 1; }
  if (y0 === y1) { const pad = Math.abs(y0) * 0.1 || 1; y0 -= pad; y1 += pad; }
  const sx = x => L + (x - x0) / (x1 - x0) * (W - L - R);
  const sy = y => T + (1 - (y - y0) / (y1 - y0)) * (H - T - B);
  const axis = { stroke: "#d9dde3", "stroke-width": 1 };
  svg.appendChild(svgEl("line", { x1: L, y1: H - B, x2: W - R, y2: H - B, ...axis }));
  svg.appendChild(svgEl("line", { x1: L, y1: T, x2: L, y2: H - B, ...axis }));
  const label = (x, y, text, anchor) => {
    const t = svgEl("text", { x, y, "text-anchor": anchor, "font-size": 9, fill: "#6b7480" });
    t.textContent = text;
    svg.appendChild(t);
  };
  label(L - 3, T + 7, formatNumber(y1), "end");
  label(L - 3, H - B, formatNumber(y0), "end");
  label(L, H - 2, formatNumber(x0), "start");
  label(W - R, H - 2, formatNumber(x1), "end");
  if (options.selected !== null && options.selected !== undefined && options.selected >= x0 && options.selected <= x1) {
    svg.appendChild(svgEl("line", { x1: sx(options.selected), x2: sx(options.selected), y1: T, y2: H - B,
      stroke: "#2f6fdf", "stroke-width": 1, "stroke-dasharray": "2 2" }));
  }
  for (const s of series) {
    const pts = s.xs.map((x, k) => [x, s.ys[k]]).filter(([, y]) => typeof y === "number" && Number.isFinite(y));
    if (!pts.length) continue;
    svg.appendChild(svgEl("polyline", {
      points: pts.map(([x, y]) => `${sx(x).toFixed(1)},${sy(y).toFixed(1)}`).join(" "),
      fill: "none", stroke: s.colour, "stroke-width": 1.5, "stroke-dasharray": s.dashed ? "4 2" : "",
      "vector-effect": "non-scaling-stroke",
    }));
    if (pts.length <= 200) {
      for (const [x, y] of pts) {
        const c = svgEl("circle", { cx: sx(x), cy: sy(y), r: 3, fill: s.colour, class: "pt", "data-step": x });
        const tip = svgEl("title");
        tip.textContent = `${s.name} · step ${x}: ${formatNumber(y)}`;
        c.appendChild(tip);
        if (options.onPick && !s.dashed) c.addEventListener("click", () => options.onPick(x));
        svg.appendChild(c);
      }
    }
  }
  return box;
}
