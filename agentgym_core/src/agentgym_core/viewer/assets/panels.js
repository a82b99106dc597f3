// HTML builders for the run-level panels: the runs list (overlay), the config table, one evaluation point.
"use strict";

function runLabel(name) { return name === "." ? "(this run)" : name; }

// runs: [{name, kind}]; shown: names drawn on the charts; primary: the listed run; colourOf(name).
function renderRunsPanel(runs, primary, shown, colourOf) {
  const rows = runs.map(r => {
    const on = shown.includes(r.name);
    return `<label class="run-row${r.name === primary ? " primary" : ""}" data-run="${esc(r.name)}">
      <input type="checkbox" data-overlay="${esc(r.name)}" ${on ? "checked" : ""} ${r.name === primary ? "disabled" : ""}
        title="${r.name === primary ? "the listed run is always drawn" : "draw this run on the charts too"}">
      <i class="swatch" style="background:${colourOf(r.name)}"></i>
      <a href="${esc(hashWith({ run: r.name, step: null, i: null, eval: null, overlay: shown.filter(n => n !== r.name) }))}"
        data-open="${esc(r.name)}" title="list this run's steps and trajectories">${esc(runLabel(r.name))}</a>
      <span class="muted">${r.kind}</span></label>`;
  }).join("");
  return `<div class="runs-list">${rows}</div>`;
}

function configValue(v) {
  if (v === undefined) return '<span class="muted">–</span>';
  return esc(typeof v === "string" ? v : JSON.stringify(v));
}

// configs: [{name, colour, config: {dotted.key: value}}]; with two or more runs, differing rows are marked.
function renderConfig(configs, onlyDiffering) {
  const keys = [...new Set(configs.flatMap(c => Object.keys(c.config)))].sort();
  if (!keys.length) return '<p class="muted">This run has no config.yaml (or results.json config) yet.</p>';
  const several = configs.length > 1;
  const differs = k => several && new Set(configs.map(c => JSON.stringify(c.config[k]))).size > 1;
  const shown = keys.filter(k => !onlyDiffering || differs(k));
  const head = configs.map(c => `<th><i class="swatch" style="background:${c.colour}"></i>${esc(runLabel(c.name))}</th>`).join("");
  const body = shown.map(k => `<tr data-key="${esc(k)}" class="${differs(k) ? "diff" : ""}"><td class="key">${esc(k)}</td>${
    configs.map(c => `<td>${configValue(c.config[k])}</td>`).join("")}</tr>`).join("");
  const nDiff = keys.filter(differs).length;
  const toggle = several ? `<label class="muted"><input type="checkbox" id="config-diff" ${onlyDiffering ? "checked" : ""}>
      only the ${nDiff} keys that differ</label>` : "";
  return `${toggle}<table class="config" id="config-table"><thead><tr><th>key</th>${head}</tr></thead><tbody>${body}</tbody></table>`;
}

// One evaluation point: every eval metric at `step`, the previous evaluation and the change, and the
// training line of the same step where it has the same key; other shown runs side by side.
function renderEvalPoint(run, step, others) {
  const ev = run.overview.metrics.eval || {};
  const train = run.overview.metrics.train || {};
  const at = (series, s, key) => {
    const k = (series.step || []).lastIndexOf(s);
    return k < 0 || !series[key] ? undefined : series[key][k];
  };
  const steps = (ev.step || []).filter(s => s < step);
  const prev = steps.length ? steps[steps.length - 1] : null;
  const keys = Object.keys(ev).filter(k => k !== "step").sort();
  if (at(ev, step, keys[0]) === undefined) {
    return `<p class="muted">${esc(runLabel(run.name))} has no evaluation at step ${esc(step)}.</p>`;
  }
  const otherHead = others.map(o => `<th class="num"><i class="swatch" style="background:${o.colour}"></i>${esc(runLabel(o.name))}</th>`).join("");
  const rows = keys.map(k => {
    const now = at(ev, step, k), before = prev === null ? undefined : at(ev, prev, k);
    const change = now !== undefined && before !== undefined ? now - before : undefined;
    const cls = change === undefined || change === 0 ? "" : change > 0 ? "up" : "down";
    return `<tr data-key="${esc(k)}"><td>${esc(k)}</td><td class="num">${formatNumber(now)}</td>
      <td class="num">${formatNumber(before)}</td><td class="num ${cls}">${change === undefined ? "–" : (change > 0 ? "+" : "") + formatNumber(change)}</td>
      <td class="num">${formatNumber(at(train, step, k))}</td>${others.map(o => `<td class="num">${formatNumber(at(o.overview.metrics.eval || {}, step, k))}</td>`).join("")}</tr>`;
  }).join("");
  return `<h2 id="eval-point">Evaluation at step ${esc(step)} <span class="muted">· ${esc(runLabel(run.name))}</span></h2>
    <p class="muted">Held-out tasks, measured by the trainer after step ${esc(step)}${step === 0 ? " (before training)" : ""}.
      The trainer logs their metrics, not their trajectories; the list on the left shows the training step's trajectories.</p>
    <table class="results eval-point"><thead><tr><th>metric</th><th class="num">step ${esc(step)}</th>
      <th class="num">${prev === null ? "previous" : "step " + prev}</th><th class="num">change</th><th class="num">train, step ${esc(step)}</th>${otherHead}</tr></thead>
    <tbody>${rows}</tbody></table>`;
}
