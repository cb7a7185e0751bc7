// Line charts of the last minutes in plain SVG: a value a second per series, horizontal
// lines for thresholds, vertical marks for events. Written here rather than vendored: the
// page needs lines, a time axis and labels, which take less code than a library's glue.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const WIDTH = 640, HEIGHT = 250;
const PAD = {left: 58, right: 150, top: 12, bottom: 30};
const LABEL_GAP = 16;
const TIME_MARK = 120;  // seconds between the time axis' marks, on whole even minutes

function element(name, attributes, parent) {
  const node = document.createElementNS(SVG, name);
  for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, value);
  if (parent) parent.appendChild(node);
  return node;
}

function text(parent, x, y, content, attributes = {}) {
  const node = element("text", {x, y, ...attributes}, parent);
  node.textContent = content;
  return node;
}

function clock(seconds) {
  return new Date(seconds * 1000).toLocaleTimeString([], {hour: "2-digit", minute: "2-digit"});
}

// A "nice" top for the y axis at or above `value`, whose quarters are round too.
function niceTop(value) {
  if (!(value > 0)) return 1;
  const power = 10 ** Math.floor(Math.log10(value));
  for (const step of [1, 2, 4, 6, 8]) if (step * power >= value) return step * power;
  return 10 * power;
}

// The path through a series' known points; a gap (null) lifts the pen.
function pathOf(values, x, y) {
  let d = "", drawing = false;
  values.forEach((value, index) => {
    if (value === null || value === undefined) { drawing = false; return; }
    d += `${drawing ? "L" : "M"}${x(index).toFixed(1)},${y(value).toFixed(1)}`;
    drawing = true;
  });
  return d;
}

// Draw `chart` into `svg` (replacing what was there):
//   series: [{name, className, values, dash, data (more data-* attributes)}], lines: [{name, className, value}],
//   events: [{at, kind, text}], start (the first second), format (a y value as text),
//   top (the y axis' least top).
export function draw(svg, chart) {
  svg.replaceChildren();
  svg.setAttribute("viewBox", `0 0 ${WIDTH} ${HEIGHT}`);
  svg.setAttribute("role", "img");
  const count = Math.max(1, ...chart.series.map((s) => s.values.length));
  const known = chart.series.flatMap((s) => s.values.filter((v) => v !== null && v !== undefined));
  const top = niceTop(Math.max(chart.top || 0, ...known, ...chart.lines.map((l) => l.value * 1.1)));
  const right = WIDTH - PAD.right, bottom = HEIGHT - PAD.bottom;
  const x = (index) => PAD.left + (right - PAD.left) * index / Math.max(1, count - 1);
  const y = (value) => bottom - (bottom - PAD.top) * Math.min(value, top) / top;
  svg.dataset.zeroY = y(0).toFixed(1);

  const grid = element("g", {class: "grid"}, svg);
  for (const fraction of [0, 0.25, 0.5, 0.75, 1]) {
    const at = y(top * fraction);
    element("line", {x1: PAD.left, x2: right, y1: at, y2: at}, grid);
    text(grid, PAD.left - 6, at + 5, chart.format(top * fraction), {"text-anchor": "end"});
  }
  const firstMark = TIME_MARK - (chart.start % TIME_MARK);
  for (let index = firstMark % TIME_MARK; index < count - 30; index += TIME_MARK) {
    text(grid, x(index), HEIGHT - 8, clock(chart.start + index), {"text-anchor": "middle"});
  }

  for (const event of chart.events) {
    const at = x(event.at - chart.start);
    if (at < PAD.left || at > right) continue;
    const mark = element("g", {class: `event event-${event.kind}`}, svg);
    element("line", {x1: at, x2: at, y1: PAD.top, y2: bottom}, mark);
    if (event.kind === "switch") element("path", {d: `M${at - 6},${PAD.top} h12 l-6,9 z`}, mark);
    const title = element("title", {}, mark);
    title.textContent = `${new Date(event.at * 1000).toLocaleTimeString()} ${event.text}`;
  }

  const labels = [];
  for (const line of chart.lines) {
    const at = y(line.value);
    const mark = element("g", {class: `threshold ${line.className}`, "data-line": line.name}, svg);
    element("line", {x1: PAD.left, x2: right, y1: at, y2: at}, mark);
    labels.push({y: at, name: line.name, className: `threshold-label ${line.className}`});
  }
  for (const series of chart.series) {
    const path = element("path", {
      d: pathOf(series.values, x, y),
      class: `series ${series.className}`,
      "data-series": series.name,
    }, svg);
    if (series.dash) path.setAttribute("stroke-dasharray", series.dash);
    for (const [key, value] of Object.entries(series.data || {})) path.dataset[key] = value;
    const last = series.values.findLastIndex((v) => v !== null && v !== undefined);
    if (last >= 0) {
      const value = series.values[last];
      labels.push({y: y(value), name: `${series.name} ${chart.format(value)}`,
                   className: `series-label ${series.className}`});
    }
  }
  // Labels on the right, pushed apart so they do not overlap, and kept above the axis.
  labels.sort((a, b) => a.y - b.y);
  let floor = PAD.top;
  for (const label of labels) {
    label.y = Math.max(label.y, floor);
    floor = label.y + LABEL_GAP;
  }
  let ceiling = bottom;
  for (const label of labels.reverse()) {
    label.y = Math.min(label.y, ceiling);
    ceiling = label.y - LABEL_GAP;
    text(svg, right + 6, label.y + 5, label.name, {class: label.className});
  }
}
