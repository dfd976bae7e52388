// slotflow dashboard: windowed run statistics (the stats processor, /v1/stats) as SVG charts.
// Plain JavaScript, no chart library: each chart is an <svg> with a title, a description and a
// table of the same numbers behind a <details>, so nothing is shown by colour alone.
"use strict";

(() => {
  const { h, svg, get, say, show, queryParam, withQuery, field, fmtTime } = window.slotflowUi;

  const PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"];
  const WIDTH = 1000;
  const HEIGHT = 240;
  const PAD = { left: 64, right: 16, top: 28, bottom: 34 };

  function niceMax(value) {
    if (!(value > 0)) return 1;
    const power = 10 ** Math.floor(Math.log10(value));
    for (const step of [1, 2, 4, 8, 10]) if (value <= step * power) return step * power;
    return 10 * power;
  }

  function timeLabel(ms, sizeSeconds) {
    const iso = new Date(ms).toISOString();
    return sizeSeconds >= 3600 ? `${iso.slice(5, 10)} ${iso.slice(11, 13)}h` : iso.slice(11, 16);
  }

  // series: [{ name, points: [[startMs, value|null], ...] }]; kind "line" or "bars" (stacked).
  function chart(id, title, unit, series, range, options) {
    const { kind = "line", format = (v) => String(v), max: fixedMax } = options || {};
    const [from, to, sizeSeconds] = range;
    const slot = sizeSeconds * 1000;
    const innerW = WIDTH - PAD.left - PAD.right;
    const innerH = HEIGHT - PAD.top - PAD.bottom;
    const x = (ms) => PAD.left + ((ms - from) / Math.max(to - from, 1)) * innerW;
    let top = 0;
    if (kind === "bars") {
      const sums = {};
      series.forEach((s) => s.points.forEach(([t, v]) => { sums[t] = (sums[t] || 0) + (v || 0); }));
      top = Math.max(0, ...Object.values(sums));
    } else {
      series.forEach((s) => s.points.forEach(([, v]) => { if (v !== null && v > top) top = v; }));
    }
    const yMax = fixedMax || niceMax(top);
    const y = (v) => PAD.top + innerH - (v / yMax) * innerH;
    const node = svg("svg", {
      class: "chart", viewBox: `0 0 ${WIDTH} ${HEIGHT}`, role: "img", id,
      "aria-labelledby": `${id}-title ${id}-desc`,
    });
    const total = series.reduce((n, s) => n + s.points.filter(([, v]) => v !== null).length, 0);
    node.append(
      svg("title", { id: `${id}-title` }, title),
      svg("desc", { id: `${id}-desc` }, `${series.length} series, ${total} windows with data, up to ${format(top)} ${unit}`),
    );
    for (let i = 0; i <= 4; i += 1) {
      const value = (yMax * i) / 4;
      node.append(
        svg("line", { class: "grid", x1: PAD.left, x2: WIDTH - PAD.right, y1: y(value), y2: y(value) }),
        svg("text", { x: PAD.left - 6, y: y(value) + 4, "text-anchor": "end" }, format(value)),
      );
    }
    const ticks = 8;
    const tickEvery = Math.max(1, Math.round((to - from) / slot / ticks)) * slot;
    for (let t = Math.ceil(from / tickEvery) * tickEvery; t <= to; t += tickEvery) {
      node.append(svg("text", { x: x(t), y: HEIGHT - 12, "text-anchor": "middle" }, timeLabel(t, sizeSeconds)));
    }
    node.append(svg("text", { class: "unit", x: 4, y: 16 }, unit));
    if (kind === "bars") {
      const base = {};
      const barW = Math.max(2, (innerW * slot) / Math.max(to - from, 1) - 2);
      series.forEach((s, i) => {
        for (const [t, v] of s.points) {
          if (!v) continue;
          const below = base[t] || 0;
          base[t] = below + v;
          node.append(svg("rect", {
            x: x(t) + 1, y: y(below + v), width: barW, height: Math.max(1, y(below) - y(below + v)),
            fill: PALETTE[i % PALETTE.length], "data-series": s.name,
          }, svg("title", {}, `${s.name} ${timeLabel(t, sizeSeconds)}: ${format(v)} ${unit}`)));
        }
      });
    } else {
      series.forEach((s, i) => {
        const color = PALETTE[(s.color ?? i) % PALETTE.length];
        const pts = s.points.filter(([, v]) => v !== null).map(([t, v]) => [x(t + slot / 2), y(v), t, v]);
        if (pts.length > 1) {
          node.append(svg("polyline", {
            points: pts.map(([px, py]) => `${px.toFixed(1)},${py.toFixed(1)}`).join(" "),
            fill: "none", stroke: color, "stroke-width": 2, "data-series": s.name,
            "stroke-dasharray": s.dashed ? "6 4" : null,
          }));
        }
        for (const [px, py, t, v] of pts) {
          node.append(svg("circle", { cx: px, cy: py, r: 3, fill: color },
            svg("title", {}, `${s.name} ${timeLabel(t, sizeSeconds)}: ${format(v)} ${unit}`)));
        }
      });
    }
    const legend = h("ul", { class: "legend" }, series.map((s, i) => h("li", {},
      h("span", { class: s.dashed ? "swatch dashed" : "swatch", "data-color": PALETTE[(s.color ?? i) % PALETTE.length] }),
      s.name)));
    // CSP forbids inline styles: colour the swatches through the SVG-free DOM API instead.
    legend.querySelectorAll(".swatch").forEach((el) => { el.style.background = el.dataset.color; });
    const rows = [];
    series.forEach((s) => s.points.forEach(([t, v]) => { if (v !== null) rows.push([s.name, t, v]); }));
    rows.sort((a, b) => a[1] - b[1]);
    const numbers = h("details", {}, h("summary", {}, "The numbers"), h("div", { class: "scroll" }, h("table", {},
      h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "series"), h("th", { scope: "col" }, "window start"),
        h("th", { scope: "col" }, unit))),
      h("tbody", {}, rows.map(([name, t, v]) => h("tr", {}, h("td", {}, name), h("td", {}, fmtTime(new Date(t).toISOString())),
        h("td", {}, format(v))))))));
    if (!series.length) return h("section", { class: "chart-box" }, h("h3", {}, title), h("p", { class: "empty" }, "No data in this range yet."));
    return h("section", { class: "chart-box" }, h("h3", {}, title), node, legend, numbers);
  }

  function points(item, pick) {
    return item.windows.map((w) => [new Date(w.start).getTime(), pick(w)]);
  }

  const finishedCount = (w) => (w.counts.completed || 0) + (w.counts.failed || 0);
  const pct = (v) => `${Math.round(v * 1000) / 10}%`;
  const num = (v) => (Number.isInteger(v) ? String(v) : v.toFixed(1));
  const ms = (v) => (v >= 10000 ? `${Math.round(v / 1000)} s` : `${Math.round(v)} ms`);

  async function statsPage() {
    const size = queryParam("size") === "1h" ? "1h" : "1m";
    const sizeSeconds = size === "1h" ? 3600 : 60;
    const form = h("form", { class: "filters", "aria-label": "Window size" });
    const select = h("select", { name: "size" }, [["1m", "1-minute windows, last hour"], ["1h", "1-hour windows, last 60 hours"]]
      .map(([value, label]) => h("option", { value, selected: value === size }, label)));
    form.append(field("Windows", select), h("button", { type: "submit" }, "Show"));
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      window.location.search = withQuery("", { size: select.value });
    });
    const [schedules, handlers, topics] = await Promise.all([
      get("/v1/stats/schedules", { size }), get("/v1/stats/handlers", { size }), get("/v1/stats/topics", { size }),
    ]);
    const range = [new Date(schedules.since).getTime(), new Date(schedules.until).getTime(), sizeSeconds];
    const bySchedule = schedules.series;
    const byHandler = handlers.series;
    const lateness = [];
    byHandler.forEach((s, i) => {
      lateness.push({ name: `${s.name} p50`, points: points(s, (w) => w.lateness_ms.p50), color: i });
      lateness.push({ name: `${s.name} p99`, points: points(s, (w) => w.lateness_ms.p99), color: i, dashed: true });
    });
    const per = size === "1h" ? "hour" : "minute";
    show(
      form,
      h("p", { class: "muted" }, `Counted by the stats processor (faust-streaming) in tumbling ${per} windows; `
        + "about a second behind the topics. Throughput is runs finished (completed or failed) per window."),
      h("h2", {}, "Per schedule"),
      chart("throughput-schedule", "Throughput per schedule", `runs / ${per}`,
        bySchedule.map((s) => ({ name: s.name, points: points(s, finishedCount) })), range, { format: num }),
      chart("failures-schedule", "Failure rate per schedule", "failed / finished",
        bySchedule.map((s) => ({ name: s.name, points: points(s, (w) => w.failure_rate) })), range,
        { format: pct, max: 1 }),
      h("h2", {}, "Per handler"),
      chart("throughput-handler", "Throughput per handler", `runs / ${per}`,
        byHandler.map((s) => ({ name: s.name, points: points(s, finishedCount) })), range, { format: num }),
      chart("failures-handler", "Failure rate per handler", "failed / finished",
        byHandler.map((s) => ({ name: s.name, points: points(s, (w) => w.failure_rate) })), range,
        { format: pct, max: 1 }),
      chart("lateness", "Firing lateness over time (p50 solid, p99 dashed)", "ms late", lateness, range, { format: ms }),
      h("h2", {}, "Dead-letter inflow"),
      chart("dlq-inflow", "Poison parked per original topic", `messages / ${per}`,
        topics.series.map((s) => ({ name: s.name, points: points(s, (w) => w.counts.parked || 0) })), range,
        { kind: "bars", format: num }),
    );
    if (!bySchedule.length && !topics.series.length) say("No statistics in this range yet: is the stats processor running?");
  }

  window.slotflowUi.pages.stats = statsPage;
})();
