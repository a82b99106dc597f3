// The viewer page: state, API calls, applying the URL hash, and live polling.
// Rendering lives in charts.js, render.js and panels.js; the hash format in url.js.
"use strict";

const POLL_MS = 1500;
const $ = sel => document.querySelector(sel);

const state = {
  runs: [], run: null, overlay: [], overviews: {}, step: null, rows: [], rowsKey: null,
  i: null, eval: null, view: "turns", detail: null, detailKey: null, tokens: null,
  compare: { a: null, b: null, sampleA: 0, sampleB: 0, steps: [] }, closedSections: new Set(), openedSections: new Set(), configDiff: false,
};

async function api(path, params) {
  const query = new URLSearchParams(params || {}).toString();
  const response = await fetch(`api/${path}${query ? "?" + query : ""}`);
  const body = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(body.detail || `${path}: HTTP ${response.status}`);
  return body;
}

function showError(err) {
  const box = $("#error");
  if (!err) { box.hidden = true; return; }
  box.textContent = String(err.message || err);
  box.hidden = false;
}

function colourOf(name) {
  const k = state.runs.findIndex(r => r.name === name);
  return RUN_COLOURS[(k < 0 ? 0 : k) % RUN_COLOURS.length];
}

// ---- runs (re-discovered on every poll: a run started after the page opened appears) -------------
async function refreshRuns() {
  const data = await api("runs");
  $("#run-path").textContent = data.root;
  const before = JSON.stringify(state.runs);
  state.runs = data.runs;
  if (JSON.stringify(state.runs) === before) return false;
  $("#run-select").innerHTML = state.runs.map(r => `<option value="${esc(r.name)}">${esc(runLabel(r.name))} · ${r.kind}</option>`).join("");
  if (state.run !== null) $("#run-select").value = state.run;
  return true;
}

async function ensureOverview(name) {
  if (!state.overviews[name]) state.overviews[name] = await api("run", { run: name });
  return state.overviews[name];
}

// ---- apply the hash: the one place that turns an address into what is on screen ----------------
let applying = Promise.resolve();
function apply() {
  applying = applying.then(applyNow).then(() => showError(null), showError);
  return applying;
}

async function applyNow() {
  const h = readHash();
  if (!state.runs.length) await refreshRuns();
  if (!state.runs.length) {
    $("#overview").innerHTML = '<p class="muted">No run files here yet; waiting for them…</p>';
    return;
  }
  const names = state.runs.map(r => r.name);
  const run = names.includes(h.run) ? h.run : names[0];
  const overlay = h.overlay.filter(n => names.includes(n) && n !== run);
  for (const n of [run, ...overlay]) {  // a run coming into view is read afresh (it was not polled)
    if (n !== state.run && !state.overlay.includes(n)) delete state.overviews[n];
  }
  if (run !== state.run) {
    Object.assign(state, { run, step: null, rows: [], rowsKey: null, detail: null, detailKey: null, tokens: null });
  }
  state.overlay = overlay;
  $("#run-select").value = run;
  const ov = await ensureOverview(run);
  await Promise.all(overlay.map(ensureOverview));
  const steps = ov.steps.map(s => s.step);
  state.step = steps.includes(h.step) ? h.step : (steps.length ? steps[steps.length - 1] : null);
  state.view = h.view;
  await loadRows(h.filters);
  state.i = h.i !== null && state.rows.some(r => r.i === h.i) ? h.i : null;
  state.eval = state.i === null ? h.eval : null;
  $("#run-kind").textContent = { eval: "evaluation", collect: "collection" }[ov.kind] || "training";
  // Redraw only what changed: opening a trajectory must not rebuild 30 charts and a 1,000-row table.
  const shown = [run, ...overlay].map(n => `${n}:${state.overviews[n].stamp}`).join(",");
  const overviewKey = `${state.runs.map(r => r.name)}|${shown}|${state.step}|${state.eval}`;
  if (overviewKey !== state.overviewKey) { renderOverview(); state.overviewKey = overviewKey; }
  renderSteps();
  const listKey = `${state.rowsKey}|${JSON.stringify(h.filters)}`;
  if (listKey !== state.listKey) { renderListPanel(); state.listKey = listKey; } else { moveListHighlight(); }
  await renderDetail();
  remember({ run, overlay, step: state.step, i: state.i, eval: state.eval });
  document.body.dataset.applied = location.hash;
}

// ---- the left column: runs, results, charts, config, steps ----------------------------------------
function shownRuns() {
  return [state.run, ...state.overlay].map(name => ({ name, colour: colourOf(name), overview: state.overviews[name] }));
}

function renderOverview() {
  const ov = state.overviews[state.run];
  const shown = shownRuns();
  const box = $("#overview");
  box.innerHTML = "";
  if (state.runs.length > 1 || state.overlay.length) {
    box.insertAdjacentHTML("beforeend", `<h2>Runs <span class="muted">(tick to overlay on the charts)</span></h2>
      ${renderRunsPanel(state.runs, state.run, shown.map(r => r.name), colourOf)}`);
  }
  if (ov.results) box.insertAdjacentHTML("beforeend", renderResults(ov.results));
  if (shown.some(r => (r.overview.sections || []).length)) {
    box.insertAdjacentHTML("beforeend", `<h2>Charts <span class="muted">(solid ● train: click opens the step ·
      dashed ■ eval: click shows the evaluation)</span></h2><div id="charts"></div>`);
    const pickedStep = state.eval !== null ? { run: state.run, kind: "eval", step: state.eval }
      : { run: state.run, kind: "train", step: state.step };
    $("#charts").appendChild(chartSections(shown, {
      selected: pickedStep, onPick: pickPoint, closed: state.closedSections, opened: state.openedSections,
      onToggle: (section, open) => {
        if (open) { state.closedSections.delete(section); state.openedSections.add(section); }
        else { state.closedSections.add(section); state.openedSections.delete(section); }
      },
    }));
  }
  const nKeys = Object.keys(ov.config || {}).length;
  box.insertAdjacentHTML("beforeend", `<details id="config-panel" ${state.configOpen ? "open" : ""}>
    <summary><b>Config</b> <span class="muted">(${nKeys} keys${state.overlay.length ? ", compared across the shown runs" : ""})</span></summary>
    ${renderConfig(shown.map(r => ({ name: r.name, colour: r.colour, config: r.overview.config || {} })), state.configDiff)}</details>`);
  $("#config-panel").addEventListener("toggle", e => { state.configOpen = e.target.open; });
}

function pickPoint(run, kind, step) {
  const overlay = run === state.run ? state.overlay : [state.run, ...state.overlay.filter(n => n !== run)];
  if (kind === "eval") {
    const hasStep = state.overviews[run].steps.some(s => s.step === step);
    guarded(() => go({ run, overlay, eval: step, i: null, ...(hasStep ? { step } : {}) }) || apply());
  } else {
    guarded(() => go({ run, overlay, step, eval: null, i: null }) || apply());
  }
}

function renderSteps() {
  const ov = state.overviews[state.run];
  $("#steps").innerHTML = ov.steps.length ? ov.steps.map(s => `<button type="button" data-step="${s.step}" class="${s.step === state.step ? "sel" : ""}"
      title="${esc(s.file)}">${s.step === -1 ? esc(s.label) : "step " + s.step}${s.count !== undefined ? ` · ${s.count} · ${Math.round(100 * s.success)}%` : ""}</button>`).join("")
    : '<span class="muted">No trajectory files yet (training writes trajectories/step_N.jsonl when trainer.save_trajectories is on).</span>';
}

// ---- the trajectory list ------------------------------------------------------------------------------
async function loadRows(filters) {
  const ov = state.overviews[state.run];
  const key = `${state.run}|${state.step}|${ov.stamp}`;
  if (state.step === null) { state.rows = []; state.rowsKey = key; }
  if (state.rowsKey !== key) {
    const data = await api("trajectories", { run: state.run, step: state.step });
    state.rows = data.rows;
    state.rowsKey = key;
    const entry = ov.steps.find(s => s.step === state.step);
    if (entry && data.rows.length) {
      entry.count = data.rows.length;
      entry.success = data.rows.filter(r => r.success).length / data.rows.length;
    }
  }
  fillFilterOptions(filters);
}

function fillFilterOptions(filters) {
  const form = $("#filters");
  for (const name of ["env", "category"]) {
    const select = form.elements[name];
    const values = [...new Set(state.rows.map(r => r[name]).filter(v => v !== null && v !== undefined).map(String))].sort();
    if (filters[name] && !values.includes(filters[name])) values.push(filters[name]);
    select.innerHTML = '<option value="">all</option>' + values.map(v => `<option value="${esc(v)}">${esc(v)}</option>`).join("");
  }
  for (const name of FILTER_KEYS) form.elements[name].value = filters[name];
}

function filterValues() {
  return Object.fromEntries(FILTER_KEYS.map(k => [k, $("#filters").elements[k].value.trim()]));
}

function filteredRows() {
  const f = filterValues();
  const minT = f.minTurns === "" ? -Infinity : Number(f.minTurns);
  const maxT = f.maxTurns === "" ? Infinity : Number(f.maxTurns);
  return state.rows.filter(r => (!f.env || r.env === f.env)
    && (!f.category || String(r.category) === f.category)
    && (f.success === "" || (f.success === "1") === r.success)
    && (!f.task || String(r.task_id) === f.task)
    && r.turns >= minT && r.turns <= maxT);
}

function moveListHighlight() {
  for (const tr of document.querySelectorAll("#list tr.sel")) tr.classList.remove("sel");
  const row = document.querySelector(`#list tr[data-i="${state.i}"]`);
  if (row) row.classList.add("sel");
}

function renderListPanel() {
  const rows = filteredRows();
  $("#list-count").textContent = `${rows.length} of ${state.rows.length} shown`;
  $("#list").innerHTML = renderList(rows, state.i);
}

// ---- the right column: one trajectory, or one evaluation point ---------------------------------------
function screenshotUrl(turn) {
  return `api/screenshot?${new URLSearchParams({ run: state.run, step: state.step, i: state.i, turn })}`;
}

async function renderDetail() {
  const box = $("#detail");
  if (state.i === null) {
    state.detail = null; state.detailKey = null;
    box.innerHTML = state.eval !== null
      ? renderEvalPoint(shownRuns()[0], state.eval, shownRuns().slice(1))
      : '<p class="muted">Pick a step, then a trajectory (or click a chart point).</p>';
    return;
  }
  const key = `${state.run}|${state.step}|${state.i}`;
  if (state.detailKey !== key) {
    state.detail = await api("trajectory", { run: state.run, step: state.step, i: state.i });
    state.detailKey = key;
    state.tokens = null;
    state.compare = { a: null, b: null, sampleA: 0, sampleB: 0, steps: [] };
  }
  const d = state.detail;
  const tab = (name, label) => `<button type="button" data-view="${name}" class="${state.view === name ? "sel" : ""}">${label}</button>`;
  const logLabel = state.overviews[state.run].kind === "collect" ? "collect" : "eval";
  box.innerHTML = renderDetailHeader(d, logLabel) + `<div class="tabs">${tab("turns", "Turns")}${tab("tokens", "Tokens")}${tab("compare", "Compare steps")}</div><div id="view"></div>`;
  const view = $("#view");
  if (state.view === "turns") {
    view.innerHTML = renderTurns(d, screenshotUrl);
  } else if (state.view === "tokens") {
    if (!state.tokens) {
      // Decoding a long trajectory (and loading the tokenizer the first time) takes a while: say so.
      view.innerHTML = '<p class="loading" id="token-loading">Loading the token view…</p>';
      const key = state.detailKey;
      const tokens = await api("tokens", { run: state.run, step: state.step, i: state.i });
      if (state.detailKey !== key || state.view !== "tokens") return;  // the reader moved on meanwhile
      state.tokens = tokens;
    }
    $("#view").innerHTML = renderTokens(state.tokens);
  } else {
    await renderCompare(view);
  }
}

// ---- compare: the same task at two steps ----------------------------------------------------------
async function renderCompare(view) {
  const d = state.detail, c = state.compare;
  if (!c.steps.length) {
    c.steps = (await api("task", { run: state.run, env: d.env, task: d.task_id })).steps;
    const labels = c.steps.map(s => s.step);
    // B: the step being viewed; A: the earliest other step that has this task.
    c.b = labels.includes(state.step) ? state.step : labels[labels.length - 1];
    c.a = labels.find(s => s !== c.b) ?? c.b;
  }
  if (c.steps.length < 2) {
    view.innerHTML = `<p class="muted">Task ${esc(d.task_id)} of ${esc(d.env)} appears at only one step of this run, so there is nothing to compare it with.</p>`;
    return;
  }
  const options = sel => c.steps.map(s => `<option value="${s.step}" ${s.step === sel ? "selected" : ""}>${s.step === -1 ? "eval" : "step " + s.step} (${s.rows.length} samples)</option>`).join("");
  view.innerHTML = `<div class="compare">
    <div class="col" id="cmp-a"><label>step <select name="cmp-a">${options(c.a)}</select></label><div class="body"></div></div>
    <div class="col" id="cmp-b"><label>step <select name="cmp-b">${options(c.b)}</select></label><div class="body"></div></div></div>`;
  await Promise.all([fillCompareColumn("a"), fillCompareColumn("b")]);
}

async function fillCompareColumn(side) {
  const c = state.compare;
  const step = c[side];
  const entry = c.steps.find(s => s.step === step);
  const col = $(`#cmp-${side} .body`);
  const key = side === "a" ? "sampleA" : "sampleB";
  const k = Math.min(c[key], entry.rows.length - 1);
  const rate = entry.rows.filter(r => r.success).length / entry.rows.length;
  const buttons = entry.rows.map((r, n) => `<button type="button" data-side="${side}" data-sample="${n}" class="${n === k ? "sel" : ""}">
      #${r.i} ${r.success ? "✓" : "✗"} ${formatNumber(r.reward)}</button>`).join("");
  const detail = await api("trajectory", { run: state.run, step, i: entry.rows[k].i });
  col.innerHTML = `<div class="muted">${entry.rows.length} samples · ${Math.round(100 * rate)}% success · mean reward
      ${formatNumber(entry.rows.reduce((s, r) => s + r.reward, 0) / entry.rows.length)}</div>
    <div class="samples">${buttons}</div><div>${outcomeBadges(detail)}<span class="badge">reward ${formatNumber(detail.reward)}</span>
    <span class="badge">${detail.turns} turns</span></div>${renderCompactTurns(detail)}`;
}

// ---- live updates: new runs, and new lines in the shown runs -------------------------------------------
let polling = false;
async function poll() {
  if (polling) return;
  polling = true;
  try {
    const newRuns = await refreshRuns();
    if (state.run === null) { if (state.runs.length) await apply(); return; }
    const watched = [state.run, ...state.overlay];
    const stamps = await Promise.all(watched.map(n => api("stamp", { run: n }).then(r => [n, r.stamp])));
    const stale = stamps.filter(([n, s]) => !state.overviews[n] || state.overviews[n].stamp !== s).map(([n]) => n);
    if (!stale.length) { if (newRuns) { state.overviewKey = null; await apply(); } return; }
    // Someone watching the newest step of a running training (nothing open) keeps watching the newest one.
    const before = state.overviews[state.run].steps.map(s => s.step);
    const following = before.length && state.step === before[before.length - 1] && state.i === null;
    for (const n of stale) delete state.overviews[n];
    const ov = await ensureOverview(state.run);
    if (following && ov.steps.length) remember({ step: ov.steps[ov.steps.length - 1].step });
    await apply();
    const live = $("#live");
    live.textContent = `updated ${new Date().toLocaleTimeString()}`;
    live.classList.add("flash");
    setTimeout(() => live.classList.remove("flash"), 800);
  } catch (err) {
    showError(err);
  } finally {
    polling = false;
  }
}

// ---- wiring: every navigation is a hash change ---------------------------------------------------------
function wire() {
  window.addEventListener("hashchange", () => apply());
  $("#run-select").addEventListener("change", e => {
    const run = e.target.value;
    go({ run, overlay: state.overlay.filter(n => n !== run), step: null, i: null, eval: null });
  });
  $("#overview").addEventListener("change", e => {
    if (e.target.dataset.overlay !== undefined) {
      const name = e.target.dataset.overlay;
      const overlay = e.target.checked ? [...state.overlay, name] : state.overlay.filter(n => n !== name);
      go({ overlay: state.runs.map(r => r.name).filter(n => overlay.includes(n)) });
    } else if (e.target.id === "config-diff") {
      state.configDiff = e.target.checked;
      renderOverview();
      $("#config-panel").open = true;
    }
  });
  $("#steps").addEventListener("click", e => {
    const b = e.target.closest("button[data-step]");
    if (b) go({ step: Number(b.dataset.step), i: null, eval: null });
  });
  $("#filters").addEventListener("input", () => {
    remember(filterValues());
    renderListPanel();
    state.listKey = `${state.rowsKey}|${JSON.stringify(filterValues())}`;
  });
  $("#filters").addEventListener("submit", e => e.preventDefault());
  $("#list").addEventListener("click", e => {
    const tr = e.target.closest("tr[data-i]");
    if (tr) go({ i: Number(tr.dataset.i), eval: null });
  });
  $("#detail").addEventListener("click", e => {
    const tab = e.target.closest("button[data-view]");
    if (tab) { go({ view: tab.dataset.view }); return; }
    const sample = e.target.closest("button[data-sample]");
    if (sample) {
      state.compare[sample.dataset.side === "a" ? "sampleA" : "sampleB"] = Number(sample.dataset.sample);
      guarded(() => fillCompareColumn(sample.dataset.side));
    }
  });
  $("#detail").addEventListener("change", e => {
    if (e.target.name === "cmp-a" || e.target.name === "cmp-b") {
      const side = e.target.name.slice(-1);
      state.compare[side] = Number(e.target.value);
      state.compare[side === "a" ? "sampleA" : "sampleB"] = 0;
      guarded(() => fillCompareColumn(side));
    }
  });
}

async function guarded(fn) {
  try { await fn(); showError(null); } catch (err) { showError(err); }
}

async function start() {
  wire();
  await guarded(refreshRuns);
  await apply();
  document.body.dataset.ready = "1";
  setInterval(poll, POLL_MS);
}

start();
