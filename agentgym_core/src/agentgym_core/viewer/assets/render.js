// HTML builders for the viewer's panels. Every value from a log goes through esc().
"use strict";

function esc(value) {
  return String(value ?? "").replace(/[&<>"']/g, c => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}

// Special tokens as chat templates write them (records.py SPECIAL_TOKEN): shown as token chips, not prose.
const SPECIAL_TOKEN = /<\|[^<>|\s]{1,40}\|>|<\/?s>|<eos>|<bos>|<pad>|<(?:start|end)_of_turn>/g;
function tokenChip(token) { return `<code class="special-token" title="a special token the model sampled">${esc(token)}</code>`; }
function withTokenChips(text) {
  let out = "", last = 0;
  for (const m of String(text ?? "").matchAll(SPECIAL_TOKEN)) {
    out += esc(text.slice(last, m.index)) + tokenChip(m[0]);
    last = m.index + m[0].length;
  }
  return out + esc(String(text ?? "").slice(last));
}

function seconds(v) { return v === null || v === undefined ? "–" : `${Number(v).toFixed(2)} s`; }

function outcomeBadges(t) {
  const out = [t.success ? '<span class="badge ok">success</span>' : '<span class="badge bad">failed</span>'];
  if (t.failed) out.push(`<span class="badge bad" title="${esc(t.failure_reason || "")}">env failure</span>`);
  if (t.truncation_reason) out.push(`<span class="badge warn">truncated: ${esc(t.truncation_reason)}</span>`);
  return out.join("");
}

function renderList(rows, selected) {
  if (!rows.length) return '<p class="muted">No trajectory matches these filters.</p>';
  const body = rows.map(r => `<tr data-i="${r.i}" class="${r.i === selected ? "sel" : ""}">
    <td class="num">${r.i}</td><td>${esc(r.env)}</td><td class="num">${esc(r.task_id)}</td>
    <td class="num">${esc(r.sample_index)}</td><td>${esc(r.category ?? "")}</td>
    <td>${r.success ? '<span class="badge ok">✓</span>' : '<span class="badge bad">✗</span>'}${r.failed ? '<span class="badge bad">fail</span>' : ""}</td>
    <td class="num">${r.invalid_actions ?? "–"}</td><td class="num">${formatNumber(r.reward)}</td><td class="num">${r.turns}</td>
    <td class="num">${r.sampled_tokens ?? "–"}</td><td class="num">${r.wall_seconds === null ? "–" : Number(r.wall_seconds).toFixed(1)}</td>
    <td class="act" title="${esc(r.last_action)}">${esc(r.last_action)}</td></tr>`).join("");
  return `<table><thead><tr><th class="num">#</th><th>env</th><th class="num">task</th><th class="num">sample</th>
    <th>category</th><th>outcome</th><th class="num" title="turns whose action the environment refused">invalid</th><th class="num">reward</th><th class="num">turns</th><th class="num">tokens</th>
    <th class="num">s</th><th>last action</th></tr></thead><tbody>${body}</tbody></table>`;
}

// A BabyAI map from info.grid: rows of 2-character cells (kind, colour); see agentgym_env_babyai.grid.
const GRID_COLOURS = { r: "#d33", g: "#3a3", b: "#36c", p: "#93c", y: "#db2", e: "#888" };
const GRID_KINDS = { W: "wall", B: "ball", K: "key", X: "box", D: "door", d: "open door", L: "locked door", G: "goal", V: "lava" };
function gridHtml(rows) {
  const cells = rows.map(row => {
    let tds = "";
    for (let i = 0; i < row.length; i += 2) {
      const kind = row[i], colour = row[i + 1];
      if (">v<^".includes(kind)) {
        tds += `<td class="g-agent" title="agent${colour !== "." ? " carrying" : ""}">${esc(kind)}</td>`;
      } else if (kind === ".") {
        tds += "<td></td>";
      } else {
        const name = GRID_KINDS[kind] || kind;
        const fill = kind === "W" ? "#555" : GRID_COLOURS[colour] || "#999";
        const mark = kind === "W" ? "" : esc(kind === "d" ? "▯" : kind === "L" ? "▮" : kind);
        tds += `<td style="background:${fill}" title="${esc(name)}">${mark}</td>`;
      }
    }
    return `<tr>${tds}</tr>`;
  }).join("");
  return `<div class="label">map</div><table class="grid-map">${cells}</table>`;
}

// Environment-specific extras that cost nothing: BabyAI map, TextCraft inventory chips, WebArena screenshots.
function envExtras(env, turn, screenshotUrl) {
  let html = "";
  const obs = turn.observation || "";
  const inventory = obs.match(/^Inventory:\s*(.*)$/m);
  if (inventory) {
    const items = [...inventory[1].matchAll(/\[([^\]]+)\]\s*\((\d+)\)/g)];
    html += `<div class="label">inventory</div><div class="chips">${items.length
      ? items.map(m => `<span>${esc(m[1])} × ${esc(m[2])}</span>`).join("") : '<span>empty</span>'}</div>`;
  }
  if (turn.grid) html += gridHtml(turn.grid);
  if (turn.has_screenshot) html += `<div class="label">screenshot</div><img class="shot" alt="screenshot after turn ${turn.index}" src="${screenshotUrl}">`;
  return html;
}

// The tools' JSON schemas the model was given (Trajectory.tools), collapsed: they can be long.
function toolsHtml(tools) {
  if (!Array.isArray(tools) || !tools.length) return "";
  const names = tools.map(t => (t && t.function && t.function.name) || (t && t.name) || "?");
  return `<details class="tools"><summary>tools given to the model (${tools.length}): ${esc(names.join(", "))}</summary>
    <pre>${esc(JSON.stringify(tools, null, 2))}</pre></details>`;
}

function renderTurns(d, screenshotUrl) {
  const prompt = d.prompt.map(m => m.role === "system"
    ? `<details><summary>system prompt (${m.content.length} chars)</summary><pre>${esc(m.content)}</pre></details>`
    : `<div class="label">first observation</div><pre>${esc(m.content)}</pre>`).join("") + toolsHtml(d.tools);
  const turns = d.turns_detail.map(t => {
    const flags = [
      t.terminated ? '<span class="badge ok">terminated</span>' : "",
      t.truncated ? '<span class="badge warn">truncated</span>' : "",
      t.failed ? '<span class="badge bad">failed</span>' : "",
      t.invalid_action === true ? '<span class="badge warn">invalid action</span>' : "",
      t.success === true ? '<span class="badge ok">success</span>' : t.success === false ? '<span class="badge bad">success=false</span>' : "",
    ].join("");
    const info = t.info ? `<div class="info">info: ${Object.entries(t.info).map(([k, v]) => `${esc(k)}=${esc(JSON.stringify(v))}`).join(" · ")}</div>` : "";
    return `<div class="turn" data-turn="${t.index}">
      <div class="head"><b>Turn ${t.index + 1}</b><span class="badge ${t.reward > 0 ? "ok" : t.reward < 0 ? "bad" : ""}">reward ${formatNumber(t.reward)}</span>${flags}
        <span class="muted">${esc(t.finish_reason || "")} · ${t.sampled_tokens ?? "–"} tokens · gen ${seconds(t.gen_seconds)} · env ${seconds(t.env_seconds)}</span></div>
      ${t.thought ? `<div class="label">thought</div><div class="thought">${esc(t.thought)}</div>` : ""}
      <div class="label">action</div><pre class="action">${withTokenChips(t.action || "(none parsed)")}</pre>
      ${(t.special_tokens || []).length ? `<div class="label">special tokens</div><div class="special-tokens">${t.special_tokens.map(tokenChip).join(" ")}</div>` : ""}
      ${t.thought ? "" : `<details><summary>full reply</summary><pre>${withTokenChips(t.text)}</pre></details>`}
      <div class="label">observation</div><pre>${t.observation === null ? '<span class="muted">(the environment never answered)</span>' : esc(t.observation)}</pre>
      ${envExtras(d.env, t, screenshotUrl(t.index))}${info}</div>`;
  }).join("");
  return prompt + (turns || '<p class="muted">No turns.</p>');
}

function renderDetailHeader(d, logLabel) {
  const step = d.step === -1 ? logLabel || "eval" : `step ${d.step}`;
  return `<h2>${esc(d.env)} · task ${esc(d.task_id)} · sample ${esc(d.sample_index)} · ${step}
      ${d.category ? `<span class="muted">· ${esc(d.category)}</span>` : ""}</h2>
    <div>${outcomeBadges(d)}<span class="badge">reward ${formatNumber(d.reward)}</span>
      <span class="badge">${d.turns}${d.max_turns ? "/" + d.max_turns : ""} turns</span>
      <span class="badge">${d.tokens_count ?? "–"} tokens${d.tokens_available ? "" : " (not logged)"}</span>
      <span class="muted">gen ${seconds(d.timing && d.timing.gen_seconds)} · env ${seconds(d.timing && d.timing.env_seconds)} · wall ${seconds(d.timing && d.timing.wall_seconds)}</span></div>`;
}

function tokenClass(mask, adv, trained) {
  if (!mask) return "ctx";
  if (!trained) return "skip";
  if (adv === null || adv === undefined) return "zero";
  return adv > 0 ? "pos" : adv < 0 ? "neg" : "zero";
}

function renderTokens(tv) {
  if (!tv.available) return `<p class="muted" id="token-stats">${esc(tv.reason)}</p>`;
  const n = tv.token_ids.length;
  const adv = tv.advantages;
  const trainedRun = tv.trained !== false;  // older servers did not say
  const rewardAt = new Set(tv.turn_spans.map(s => s.reward_index));
  let sampled = 0, pos = 0, neg = 0;
  const parts = new Array(n);
  for (let k = 0; k < n; k++) {
    const m = tv.loss_mask[k] ? 1 : 0;
    const a = adv ? adv[k] : null;
    sampled += m;
    if (m && a > 0) pos++;
    if (m && a < 0) neg++;
    const lp = tv.logprobs ? tv.logprobs[k] : null;
    const tip = `#${k} id ${tv.token_ids[k]} · mask ${m}${m && !trainedRun ? " (not trained)" : ""}${m && lp !== null ? " · logprob " + lp.toFixed(3) : ""}${m && a !== null ? " · advantage " + formatNumber(a) : ""}`;
    const cls = tokenClass(m, a, trainedRun) + (rewardAt.has(k) ? " rw" : "");
    const text = tv.text ? tv.text[k].replace(/\n/g, "↵\n") : null;
    parts[k] = text === null
      ? `<span class="id ${cls}" title="${tip}">${tv.token_ids[k]}</span>`
      : `<span class="${cls}" title="${esc(tip)}">${esc(text)}</span>`;
  }
  const advNote = tv.advantage_source === "logged" ? "advantages as logged by the trainer"
    : tv.advantage_source === "derived" ? "advantage derived from the log: outcome reward minus the mean of its task's group at this step (the sign GRPO-style estimators train with; the log has no per-token advantages)"
    : "no advantages: nothing was trained on this trajectory's log (evaluation) or its group has a single sample";
  const textNote = tv.text_source ? `token text from ${esc(tv.text_source)}`
    : `showing token ids: ${esc(tv.text_missing || "no tokenizer found for this run")}`;
  const legend = trainedRun
    ? `<span class="swatch" style="background:var(--pos)"></span>trained, advantage &gt; 0
      <span class="swatch" style="background:var(--neg)"></span>trained, advantage &lt; 0
      <span class="swatch" style="background:var(--zero)"></span>trained, advantage 0 / unknown`
    : `<span class="swatch skip-swatch"></span>sampled (mask 1), not trained: ${esc(tv.not_trained)}`;
  const counts = trainedRun ? `${sampled} trained (${pos} +, ${neg} −) · ${advNote}`
    : `${sampled} sampled, none trained: ${esc(tv.not_trained)}`;
  return `<div class="legend" id="token-legend">
      <span class="swatch" style="background:var(--ctx)"></span>context (mask 0, not trained)
      ${legend}
      <span class="swatch" style="outline:2px solid #7a4fd1"></span>turn reward sits here</div>
    <p class="muted" id="token-stats">${n} tokens · ${counts} · ${textNote}</p>
    <div class="tokens">${parts.join("")}</div>`;
}

function renderCompactTurns(d) {
  return d.turns_detail.map(t => `<div class="turn"><div class="head"><b>Turn ${t.index + 1}</b>
      <span class="badge ${t.reward > 0 ? "ok" : t.reward < 0 ? "bad" : ""}">reward ${formatNumber(t.reward)}</span>
      ${t.terminated ? '<span class="badge ok">terminated</span>' : ""}${t.truncated ? '<span class="badge warn">truncated</span>' : ""}</div>
      <pre class="action">${esc(t.action || "(none parsed)")}</pre><pre>${esc(t.observation ?? "")}</pre></div>`).join("");
}

function renderResults(results) {
  if (!results) return "";
  const rows = Object.entries(results.categories || {}).concat([["ALL", results.overall]]);
  const k = (results.config && results.config.n_samples) || 1;
  const body = rows.map(([name, m]) => `<tr><td>${esc(name)}</td><td class="num">${m.tasks}</td><td class="num">${m.samples}</td>
    <td class="num">${(100 * m.success_avg).toFixed(1)}%</td><td class="num">${(100 * m.success_pass).toFixed(1)}%</td>
    <td class="num">${m.invalid_action_rate == null ? "–" : (100 * m.invalid_action_rate).toFixed(1) + "%"}</td>
    <td class="num">${formatNumber(m.score_avg)}</td><td class="num">${formatNumber(m.score_pass)}</td><td class="num">${m.failed}</td></tr>`).join("");
  const cfg = results.config || {};
  return `<h2>Evaluation results <span class="muted">${esc(cfg.env || "")} · ${esc(cfg.model || "")} · split ${esc(cfg.split || "")}</span></h2>
    <table class="results" id="results"><thead><tr><th>category</th><th>tasks</th><th>samples</th><th>success Avg@${k}</th>
    <th>success Pass@${k}</th><th>invalid actions</th><th>score Avg@${k}</th><th>score Pass@${k}</th><th>failed</th></tr></thead><tbody>${body}</tbody></table>`;
}
