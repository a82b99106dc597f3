// The view's address: everything needed to show the same thing again lives in the URL hash, so
// reload, back/forward, bookmarks and a hand-edited hash all land on the same view.
//   run=NAME          the run whose steps and trajectories are listed
//   overlay=A,B       other runs drawn on the same charts
//   step=N            the listed step (-1: an evaluation's trajectories; absent: the newest)
//   i=N               the open trajectory          eval=N   the open evaluation point (no i)
//   view=turns|tokens|compare
//   env, task, category, success, minTurns, maxTurns   the trajectory filters (the form's names)
"use strict";

const FILTER_KEYS = ["env", "task", "category", "success", "minTurns", "maxTurns"];
const VIEWS = ["turns", "tokens", "compare"];

function intOrNull(text) {
  return text !== null && text !== "" && /^-?\d+$/.test(text) ? Number(text) : null;
}

function readHash() {
  const h = new URLSearchParams(location.hash.slice(1));
  const filters = {};
  for (const k of FILTER_KEYS) filters[k] = h.get(k) || "";
  return {
    run: h.get("run"),
    overlay: (h.get("overlay") || "").split(",").filter(Boolean),
    step: intOrNull(h.get("step")),
    i: intOrNull(h.get("i")),
    eval: intOrNull(h.get("eval")),
    view: VIEWS.includes(h.get("view")) ? h.get("view") : "turns",
    filters,
  };
}

// The hash of the current address with `changes` applied (null or "" removes a key).
function hashWith(changes) {
  const h = new URLSearchParams(location.hash.slice(1));
  for (const [k, v] of Object.entries(changes)) {
    const text = Array.isArray(v) ? v.join(",") : v;
    if (text === null || text === undefined || text === "" || (k === "view" && text === "turns")) h.delete(k);
    else h.set(k, String(text));
  }
  return "#" + h.toString().replace(/%2C/g, ",");
}

// Navigation: a new history entry (back returns here); the hashchange listener applies it.
function go(changes) {
  const target = hashWith(changes);
  if (target === (location.hash || "#")) return false;
  location.hash = target;
  return true;
}

// The same view, written down without a new history entry (filters as typed, defaults filled in).
function remember(changes) {
  history.replaceState(null, "", hashWith(changes));
}
