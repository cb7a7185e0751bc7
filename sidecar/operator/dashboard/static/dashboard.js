// The on-call screen: polls /dashboard/api/state every second and the history every two,
// switches modes on click (saying who switched: the name typed in "on duty").
"use strict";
import {render as renderHistory} from "./history.js";

const TIERS = ["p0", "p1", "p2"];
const HISTORY_EVERY_MS = 2000;

async function call(path, body) {
  const options = body === undefined ? {} : {
    method: "POST",
    // The custom header marks a request from this page: a cross-site form cannot send it.
    headers: {"Content-Type": "application/json", "X-QoS-Request": "dashboard"},
    body: JSON.stringify({...body, by: document.getElementById("operator").value}),
  };
  const response = await fetch(path, {credentials: "same-origin", ...options});
  if (!response.ok) throw new Error(`${path}: ${response.status}`);
  return response.json();
}

function percent(value) {
  return value === null || value === undefined ? "–" : (100 * value).toFixed(1) + " %";
}

function cell(row, text, className) {
  const td = row.insertCell();
  td.textContent = text;
  if (className) td.className = className;
  return td;
}

// A recorded change in a line: what, who, how and when.
function said(change) {
  return `${change.what} by ${change.by} via ${change.via}, ${new Date(change.at * 1000).toLocaleString()}`;
}

// The last switch of the mode that matched, as a line under the switch.
function lastSwitch(changes, matches) {
  const found = changes.find((c) => c.kind === "mode" && matches(c.what));
  return found ? `last: ${said(found)}` : "";
}

// Every change recorded (the mode, tenants, the configuration, files), newest first:
// the newest in the summary, each with its fields old → new when opened.
function renderChanges(changes) {
  document.getElementById("changes-last").textContent =
    changes.length ? `last change: ${said(changes[0])}` : "no change recorded";
  const list = document.getElementById("changes");
  list.replaceChildren();
  for (const change of changes.slice(0, 10)) {
    const item = document.createElement("li");
    item.textContent = said(change);
    for (const field of change.changes) {
      const line = document.createElement("small");
      line.className = "changed-field";
      line.textContent = `${field.field}: ${field.old ?? "-"} → ${field.new ?? "-"}`;
      item.append(line);
    }
    list.append(item);
  }
}

function render(state) {
  document.getElementById("mode").textContent = state.mode;
  document.getElementById("mode-last").textContent =
    lastSwitch(state.switches, (what) => what.startsWith("mode "));
  renderChanges(state.switches);
  const body = document.querySelector("#tiers tbody");
  body.replaceChildren();
  for (const tier of TIERS) {
    const t = state.tiers[tier];
    const row = body.insertRow();
    row.id = `tier-${tier}`;
    cell(row, tier.toUpperCase());
    cell(row, t.admitted_per_second.toFixed(1));
    cell(row, t.shed_per_second.toFixed(1));
    cell(row, t.in_flight);
    cell(row, t.waiting);
    const ok = t.compliance === null ? "" : (t.compliance >= t.target ? "good" : "bad");
    cell(row, `${percent(t.compliance)} (${t.samples})`, ok);
    cell(row, percent(t.target));
    cell(row, percent(t.share));
    cell(row, Math.round(t.rate));
    cell(row, t.overload || "–", t.overload ? "bad" : "");
    const box = document.createElement("input");
    box.type = "checkbox";
    box.id = `shed-${tier}`;
    box.checked = state.force_shed.includes(tier);
    box.addEventListener("change", () => act({tier, shed: box.checked}, "/dashboard/api/shed"));
    const switchCell = cell(row, "");
    const note = document.createElement("small");
    note.className = "last-switch";
    note.id = `shed-${tier}-last`;
    note.textContent = lastSwitch(state.switches, (what) => what.endsWith(` ${tier}`));
    switchCell.append(box, note);
  }
  const pools = document.querySelector("#pools tbody");
  pools.replaceChildren();
  for (const pool of state.pools) {
    const row = pools.insertRow();
    row.id = `pool-${pool.pool}`;
    cell(row, pool.pool);
    cell(row, pool.models.length ? pool.models.join(", ") : "every other model");
    cell(row, pool.pods);
    cell(row, percent(pool.free_kv));
    cell(row, percent(pool.projected_free_kv));
    cell(row, `${pool.slots} / ${pool.max_concurrency}`);
    cell(row, Math.round(pool.capacity));
    cell(row, TIERS.map((tier) => Math.round(pool.rates[tier])).join(" / "));
    const shed = Object.entries(pool.shedding).map(([tier, why]) => `${tier.toUpperCase()} ${why}`);
    cell(row, shed.length ? shed.join(", ") : "–", shed.length ? "bad" : "");
  }
  document.getElementById("free-kv").textContent = percent(state.free_kv);
  document.getElementById("in-flight").textContent = state.in_flight;
  document.getElementById("leader").textContent = state.leader ? "this sidecar" : "another sidecar";
  const pods = document.querySelector("#pods tbody");
  pods.replaceChildren();
  for (const pod of state.pods) {
    const row = pods.insertRow();
    cell(row, pod.pod);
    cell(row, percent(pod.kv_usage), pod.kv_usage > 0.92 ? "bad" : "");
    cell(row, pod.running);
    cell(row, pod.waiting);
    cell(row, pod.age.toFixed(2) + " s");
  }
  const moves = document.getElementById("adjustments");
  moves.replaceChildren();
  for (const move of state.adjustments) {
    const item = document.createElement("li");
    item.textContent = `${new Date(move.at * 1000).toLocaleTimeString()} — ${move.reason}`;
    moves.appendChild(item);
  }
}

async function act(body, path) {
  const status = document.getElementById("status");
  try {
    const state = await call(path, body);
    status.textContent = `done: mode ${state.mode}`;
    await refresh();
  } catch (error) {
    status.textContent = `failed: ${error.message}`;
  }
}

async function refresh() {
  try {
    render(await call("/dashboard/api/state"));
  } catch (error) {
    document.getElementById("status").textContent = `no data: ${error.message}`;
  }
}

async function refreshHistory() {
  try {
    renderHistory(await call("/dashboard/api/history"));
  } catch (error) {
    document.getElementById("status").textContent = `no history: ${error.message}`;
  }
}

// The theme: ?theme= in the address, else the last one chosen here, else the system's.
function applyTheme(theme) {
  document.documentElement.dataset.theme = theme;
}
const asked = new URLSearchParams(location.search).get("theme");
applyTheme(asked || localStorage.getItem("qos-theme") ||
  (matchMedia("(prefers-color-scheme: light)").matches ? "light" : "dark"));
document.getElementById("theme").addEventListener("click", () => {
  const theme = document.documentElement.dataset.theme === "dark" ? "light" : "dark";
  localStorage.setItem("qos-theme", theme);
  applyTheme(theme);
});
const operator = document.getElementById("operator");
operator.value = localStorage.getItem("qos-operator") || "";
operator.addEventListener("change", () => localStorage.setItem("qos-operator", operator.value));

document.getElementById("core-only").addEventListener(
  "click", () => act({mode: "core-only"}, "/dashboard/api/mode"));
document.getElementById("normal").addEventListener(
  "click", () => act({mode: "normal"}, "/dashboard/api/mode"));
refresh();
setInterval(refresh, 1000);
refreshHistory();
setInterval(refreshHistory, HISTORY_EVERY_MS);
