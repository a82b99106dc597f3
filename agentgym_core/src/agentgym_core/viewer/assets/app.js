// The viewer page: state, API calls, event wiring and live polling. Rendering lives in render.js.
"use strict";

const CURVES = [["success", "success"], ["reward", "reward"], ["turns", "turns"],
                ["horizon", "horizon"], ["kl", "KL"], ["entropy", "entropy"]];
const POLL_MS = 1500;
const $ = sel => document.querySelector(sel);

const state = {
  run: null, overview: null, step: null, rows: [], i: null, detail: null, view: "turns",
  tokens: null, stamp: null, compare: { a: null, b: null, sampleA: 0, sampleB: 0, steps: [] },
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

function saveHash() {
  const h = new URLSearchParams();
  if (state.run !== null) h.set("run", state.run);
  if (state.step !== null) h.set("step", state.step);
  if (state.i !== null) h.set("i", state.i);
  if (state.view !== "turns") h.set("view", state.view);
  history.replaceState(null, "", "#" + h.toString());
}

// ---- runs and overview ------------------------------------------------------------------------
async function loadRuns() {
  const data = await api("runs");
  const select = $("#run-select");
  select.innerHTML = data.runs.map(r => `<option value="${esc(r.name)}">${esc(r.name === "." ? "(this run)" : r.name)} · ${r.kind}</option>`).join("");
  $("#run-path").textContent = data.root;
  if (!data.runs.length) { $("#overview").innerHTML = '<p class="muted">No run files here yet; waiting for them…</p>'; return false; }
  const wanted = new URLSearchParams(location.hash.slice(1)).get("run");
  state.run = data.runs.some(r => r.name === wanted) ? wanted : data.runs[0].name;
  select.value = state.run;
  return true;
}

async function loadOverview(keepStep) {
  const before = state.overview ? state.overview.steps.map(s => s.step) : [];
  // Someone watching the newest step of a running training keeps watching the newest one.
  const following = keepStep && before.length && state.step === before[before.length - 1] && state.i === null;
  const ov = await api("run", { run: state.run });
  state.overview = ov;
  state.stamp = ov.stamp;
  $("#run-kind").textContent = ov.kind === "eval" ? "evaluation" : "training";
  renderOverview();
  const steps = ov.steps.map(s => s.step);
  if (following && steps.length) state.step = steps[steps.length - 1];
  if (!keepStep || !steps.includes(state.step)) {
    const wanted = Number(new URLSearchParams(location.hash.slice(1)).get("step"));
    state.step = steps.includes(wanted) && location.hash.includes("step=") ? wanted : (steps.length ? steps[steps.length - 1] : null);
  }
  renderSteps();
}

function renderOverview() {
  const ov = state.overview;
  const box = $("#overview");
  box.innerHTML = "";
  if (ov.results) box.insertAdjacentHTML("beforeend", renderResults(ov.results));
  const train = ov.metrics.train || {}, ev = ov.metrics.eval || {};
  if (!(train.step && train.step.length) && !(ev.step && ev.step.length)) return;
  box.insertAdjacentHTML("beforeend", '<h2>Training curves <span class="muted">(click a point to open its step)</span></h2><div class="charts" id="charts"></div>' +
    '<div class="legend"><i style="background:#2f6fdf"></i>train (per step)<i style="background:#d9822b"></i>eval (held-out tasks)</div>');
  const charts = $("#charts");
  for (const [key, title] of CURVES) {
    const series = [{ xs: train.step || [], ys: train[key] || [], colour: "#2f6fdf", name: "train" }];
    if (ev[key]) series.push({ xs: ev.step, ys: ev[key], colour: "#d9822b", dashed: true, name: "eval" });
    charts.appendChild(lineChart(title, series, { selected: state.step, onPick: step => selectStep(step) }));
  }
}

function renderSteps() {
  const ov = state.overview;
  $("#steps").innerHTML = ov.steps.length ? ov.steps.map(s => `<button type="button" data-step="${s.step}" class="${s.step === state.step ? "sel" : ""}"
      title="${esc(s.file)}">${s.step === -1 ? "eval" : "step " + s.step}${s.count !== undefined ? ` · ${s.count} · ${Math.round(100 * s.success)}%` : ""}</button>`).join("")
    : '<span class="muted">No trajectory files yet (training writes trajectories/step_N.jsonl when trainer.save_trajectories is on).</span>';
}

// ---- steps and the trajectory list -------------------------------------------------------------
async function selectStep(step) {
  state.step = step;
  renderSteps();
  renderOverviewSelection();
  await loadRows();
  saveHash();
}

function renderOverviewSelection() {
  if (state.overview && $("#charts")) renderOverview();
}

async function loadRows() {
  if (state.step === null) { state.rows = []; renderListPanel(); return; }
  const data = await api("trajectories", { run: state.run, step: state.step });
  state.rows = data.rows;
  const entry = state.overview.steps.find(s => s.step === state.step);
  if (entry && data.rows.length) {
    entry.count = data.rows.length;
    entry.success = data.rows.filter(r => r.success).length / data.rows.length;
    renderSteps();
  }
  fillFilterOptions();
  renderListPanel();
}

function fillFilterOptions() {
  const form = $("#filters");
  for (const [name, key] of [["env", "env"], ["category", "category"]]) {
    const select = form.elements[name];
    const current = select.value;
    const values = [...new Set(state.rows.map(r => r[key]).filter(v => v !== null && v !== undefined))].sort();
    select.innerHTML = '<option value="">all</option>' + values.map(v => `<option value="${esc(v)}">${esc(v)}</option>`).join("");
    if (values.includes(current)) select.value = current;
  }
}

function filteredRows() {
  const f = Object.fromEntries(new FormData($("#filters")).entries());
  const minT = f.minTurns === "" ? -Infinity : Number(f.minTurns);
  const maxT = f.maxTurns === "" ? Infinity : Number(f.maxTurns);
  const task = f.task.trim();
  return state.rows.filter(r => (!f.env || r.env === f.env)
    && (!f.category || r.category === f.category)
    && (f.success === "" || (f.success === "1") === r.success)
    && (!task || String(r.task_id) === task)
    && r.turns >= minT && r.turns <= maxT);
}

function renderListPanel() {
  const rows = filteredRows();
  $("#list-count").textContent = `${rows.length} of ${state.rows.length} shown`;
  $("#list").innerHTML = renderList(rows, state.i);
}

// ---- one trajectory -----------------------------------------------------------------------------
async function openTrajectory(i) {
  state.i = i;
  state.tokens = null;
  state.detail = await api("trajectory", { run: state.run, step: state.step, i });
  state.compare = { a: null, b: null, sampleA: 0, sampleB: 0, steps: [] };
  // Move the highlight only: re-rendering a 1,000-row table would cost most of a second.
  for (const tr of document.querySelectorAll("#list tr.sel")) tr.classList.remove("sel");
  const row = document.querySelector(`#list tr[data-i="${i}"]`);
  if (row) row.classList.add("sel");
  await renderDetail();
  saveHash();
}

function screenshotUrl(turn) {
  return `api/screenshot?${new URLSearchParams({ run: state.run, step: state.step, i: state.i, turn })}`;
}

async function renderDetail() {
  const d = state.detail;
  const box = $("#detail");
  if (!d) { box.innerHTML = '<p class="muted">Pick a step, then a trajectory.</p>'; return; }
  const tab = (name, label) => `<button type="button" data-view="${name}" class="${state.view === name ? "sel" : ""}">${label}</button>`;
  box.innerHTML = renderDetailHeader(d) + `<div class="tabs">${tab("turns", "Turns")}${tab("tokens", "Tokens")}${tab("compare", "Compare steps")}</div><div id="view"></div>`;
  const view = $("#view");
  if (state.view === "turns") {
    view.innerHTML = renderTurns(d, screenshotUrl);
  } else if (state.view === "tokens") {
    if (!state.tokens) state.tokens = await api("tokens", { run: state.run, step: state.step, i: state.i });
    view.innerHTML = renderTokens(state.tokens);
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

// ---- live updates ----------------------------------------------------------------------------------
async function poll() {
  try {
    if (state.run === null) {
      if (await loadRuns()) { await loadOverview(false); await loadRows(); }
      return;
    }
    const { stamp } = await api("stamp", { run: state.run });
    if (stamp === state.stamp) return;
    await loadOverview(true);
    await loadRows();
    const live = $("#live");
    live.textContent = `updated ${new Date().toLocaleTimeString()}`;
    live.classList.add("flash");
    setTimeout(() => live.classList.remove("flash"), 800);
    showError(null);
  } catch (err) {
    showError(err);
  }
}

// ---- wiring -----------------------------------------------------------------------------------------
function wire() {
  $("#run-select").addEventListener("change", async e => {
    state.run = e.target.value; state.step = null; state.i = null; state.detail = null;
    history.replaceState(null, "", "#run=" + encodeURIComponent(state.run));
    await guarded(async () => { await loadOverview(false); await loadRows(); await renderDetail(); saveHash(); });
  });
  $("#steps").addEventListener("click", e => {
    const b = e.target.closest("button[data-step]");
    if (b) guarded(() => selectStep(Number(b.dataset.step)));
  });
  $("#filters").addEventListener("input", () => renderListPanel());
  $("#filters").addEventListener("submit", e => e.preventDefault());
  $("#list").addEventListener("click", e => {
    const tr = e.target.closest("tr[data-i]");
    if (tr) guarded(() => openTrajectory(Number(tr.dataset.i)));
  });
  $("#detail").addEventListener("click", e => {
    const tab = e.target.closest("button[data-view]");
    if (tab) { state.view = tab.dataset.view; saveHash(); guarded(renderDetail); return; }
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
  const hash = new URLSearchParams(location.hash.slice(1));
  state.view = hash.get("view") || "turns";
  await guarded(async () => {
    if (!(await loadRuns())) return;
    await loadOverview(false);
    await loadRows();
    if (hash.has("i") && state.rows.some(r => r.i === Number(hash.get("i")))) await openTrajectory(Number(hash.get("i")));
    saveHash();
  });
  document.body.dataset.ready = "1";
  setInterval(poll, POLL_MS);
}

start();
