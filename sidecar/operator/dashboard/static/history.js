// The last ten minutes, per pool, from /dashboard/api/history (every sidecar's page shows
// the whole cluster's), and the "what is happening" line above them.
"use strict";
import {draw} from "./charts.js";

const TIERS = ["p0", "p1", "p2"];
// Short names for the charts' labels; the line on top says them in full.
const SHORT = {
  shed_kv_watermark: "KV low", shed_inflight: "in flight", shed_tier_budget: "budget",
  shed_fair_share: "fair share", shed_queue_full: "queue full", shed_queue_timeout: "waited out",
  shed_queue_foreseen: "wait foreseen",
  shed_no_reports: "no reports", shed_core_only: "core-only", shed_forced: "by hand",
  tenant_rate_limited: "rate limit", cost_exceeds_burst: "over burst",
  prompt_too_long: "prompt too long", invalid_request: "invalid", unauthenticated: "no key",
  model_not_found: "no model", route_not_found: "no route",
};
const DASHES = ["", "7 4", "2 4", "10 3 2 3", "1 6"];
const CHARTS = [
  ["admitted", "Admitted / s"], ["shed", "Shed and refused / s"],
  ["free-kv", "Free KV cache against the watermarks"], ["in-flight", "In flight against the guard"],
  ["ttft", "First token p99 against the SLO"], ["shares", "Tier shares (the controller's)"],
];

export const percent = (v) => `${Math.round(100 * v)} %`;
export const count = (v) => v >= 10 ? `${Math.round(v)}` : `${Number(v.toFixed(2))}`;
// Small values keep their decimals: an axis from 0 to 1 ms reads 0.25, 0.5, 0.75 ms.
export const ms = (v) => v >= 1000 ? `${Number((v / 1000).toFixed(2))} s`
  : `${v >= 10 ? Math.round(v) : Number(v.toFixed(2))} ms`;
const label = (tier) => tier.toUpperCase();
const last = (values) => values.findLast((v) => v !== null && v !== undefined);

function clock(seconds) {
  return new Date(seconds * 1000).toLocaleTimeString();
}

function lasting(seconds) {
  if (seconds < 60) return `${Math.round(seconds)} s`;
  const minutes = Math.floor(seconds / 60), rest = Math.round(seconds % 60);
  return rest ? `${minutes} min ${rest} s` : `${minutes} min`;
}

function pieces(pool, name, page) {
  const data = page.pools[pool], lines = page.lines[pool] || {};
  const tiers = TIERS.filter((tier) => data.tiers[tier]);
  const tier = (t) => `tier-${t}`;
  switch (name) {
    case "admitted":
      return {format: count, lines: [], series: tiers.map((t) => ({
        name: label(t), className: tier(t), values: data.tiers[t].admitted, data: {tier: t}}))};
    case "shed": {
      const series = [];
      for (const t of tiers) {
        Object.entries(data.tiers[t].shed).forEach(([reason, values], index) => {
          if (!values.some((v) => v > 0)) return;
          series.push({name: `${label(t)} ${SHORT[reason] || reason}`, className: tier(t), values,
                       dash: DASHES[index % DASHES.length], data: {tier: t, reason}});
        });
      }
      return {format: count, lines: [], series};
    }
    case "free-kv":
      return {format: percent, top: 1, series: [
        {name: "reported", className: "load", values: data.free_kv},
        {name: "projected", className: "load", values: data.projected_free_kv, dash: "6 4"},
      ], lines: TIERS.filter((t) => lines[t] && lines[t].shed_below_free_kv != null).map((t) => ({
        name: `${label(t)} sheds below`, className: tier(t), value: lines[t].shed_below_free_kv}))};
    case "in-flight": {
      const guard = last(data.max_concurrency);
      const rules = guard ? TIERS.filter((t) => lines[t] && lines[t].shed_above_inflight != null) : [];
      return {format: count, series: [
        {name: "in flight", className: "load", values: data.in_flight},
        {name: "guard", className: "guard", values: data.max_concurrency, dash: "3 3"},
      ], lines: rules.map((t) => ({name: `${label(t)} sheds above`, className: tier(t),
                                   value: lines[t].shed_above_inflight * guard}))};
    }
    case "ttft": {
      const watched = ["p0", "p1"].filter((t) => data.tiers[t]);
      return {format: ms, series: watched.map((t) => ({
        name: label(t), className: tier(t), values: data.tiers[t].ttft_p99_ms})),
        lines: watched.filter((t) => lines[t]).map((t) => ({
          name: `${label(t)} SLO`, className: tier(t), value: lines[t].ttft_slo_ms}))};
    }
    case "shares":
      return {format: percent, lines: [], series: tiers.map((t) => ({
        name: label(t), className: tier(t), values: data.tiers[t].share}))};
  }
  throw new Error(name);
}

function poolSection(pool) {
  const id = `charts-${pool}`;
  let section = document.getElementById(id);
  if (section) return section;
  section = document.createElement("section");
  section.id = id;
  section.className = "pool-charts";
  const title = document.createElement("h2");
  title.textContent = `Pool ${pool} — the last 10 minutes`;
  const grid = document.createElement("div");
  grid.className = "chart-grid";
  for (const [name, caption] of CHARTS) {
    const figure = document.createElement("figure");
    const text = document.createElement("figcaption");
    text.textContent = caption;
    const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
    svg.id = `chart-${pool}-${name}`;
    svg.setAttribute("aria-label", `${caption}, pool ${pool}`);
    figure.append(text, svg);
    grid.appendChild(figure);
  }
  section.append(title, grid);
  document.getElementById("charts").appendChild(section);
  return section;
}

function happeningLine(page) {
  const happening = page.happening, parts = [];
  const pools = Object.keys(page.pools);
  if (happening.mode && happening.mode !== "normal") {
    const switched = page.events.findLast((e) => e.kind === "switch" && e.text.startsWith("mode "));
    const name = happening.mode === "core-only" ? "Protect transactions only (core-only)"
      : `Mode ${happening.mode}`;
    const since = happening.mode_since ? ` since ${clock(happening.mode_since)}` : "";
    parts.push({text: `${name}${since}${switched ? `, ${switched.text}` : ""}.`, className: "bad"});
  }
  for (const shed of happening.shed) {
    const where = pools.length > 1 ? `pool ${shed.pool}: ` : "";
    const how = shed.whole_window ? "for over 10 min"
      : `since ${clock(shed.since)} (${lasting(page.now - shed.since + 1)})`;
    const figures = shed.figures ? `: ${shed.figures}` : "";
    parts.push({
      text: `${where}${label(shed.tier)} shed ${how}, ${count(shed.per_second)}/s — ${shed.words}${figures}.`,
      className: `bad tier-${shed.tier}`,
    });
  }
  for (const moved of happening.overflow || []) {
    const model = moved.model ? ` (${moved.model})` : "";
    parts.push({
      text: `pool ${moved.pool}: ${label(moved.tier)} served by pool ${moved.to}'s model${model} instead, ${count(moved.per_second)}/s.`,
      className: `tier-${moved.tier}`,
    });
  }
  if (!happening.shed.length) {
    parts.push({text: "Nothing shed: every tier was admitted in the last seconds.", className: "good"});
  }
  const line = document.getElementById("happening");
  line.replaceChildren(...parts.map((part) => {
    const span = document.createElement("span");
    span.textContent = part.text;
    span.className = `fact ${part.className}`;
    return span;
  }));
}

export function render(page) {
  if (page.now === null) return;
  happeningLine(page);
  for (const pool of Object.keys(page.pools)) {
    poolSection(pool);
    const events = page.events.filter((e) => e.kind === "switch" || e.kind === "change" || e.pool === pool);
    for (const [name] of CHARTS) {
      draw(document.getElementById(`chart-${pool}-${name}`),
           {...pieces(pool, name, page), events, start: page.start});
    }
  }
}
