// slotflow dashboard. Plain JavaScript, no dependencies: every page reads the JSON API (/v1) and
// builds its DOM with textContent, never innerHTML, so nothing from the read model is ever parsed as
// markup. Buttons POST the same commands a user's own client would and show the command id.
"use strict";

(() => {
  const body = document.body;
  const page = body.dataset.page;
  const subject = body.dataset.subject || "";
  const content = document.getElementById("content");
  const statusBox = document.getElementById("status");

  const COLORS = {
    completed: "#1a7f37", fired: "#1a7f37", succeeded: "#1a7f37",
    running: "#0969da", due: "#0969da", started: "#0969da",
    retrying: "#9a6700", late: "#9a6700",
    failed: "#cf222e", dead_lettered: "#cf222e", missed: "#cf222e",
    skipped: "#6e7781", skipped_by_policy: "#6e7781",
    duplicated_effect: "#8250df",
  };
  const RANGES = [["1h", 3600], ["6h", 21600], ["12h", 43200], ["24h", 86400], ["7d", 604800], ["30d", 2592000]];

  // ---- small helpers -------------------------------------------------------------------------

  function h(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
      else if (name === "class") node.className = value;
      else node.setAttribute(name, value === true ? "" : String(value));
    }
    append(node, children);
    return node;
  }

  function append(node, children) {
    for (const child of children.flat(Infinity)) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function svg(tag, attrs, ...children) {
    const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, String(value));
    for (const child of children.flat()) {
      if (child === null || child === undefined) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  const enc = encodeURIComponent;

  class ApiError extends Error {
    constructor(status, detail) {
      super(detail);
      this.status = status;
    }
  }

  async function request(method, path, payload) {
    const init = { method, headers: { Accept: "application/json" } };
    if (payload !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(payload);
    }
    let response;
    try {
      response = await fetch(path, init);
    } catch (err) {
      throw new ApiError(0, `the API did not answer (${err.message})`);
    }
    let data = null;
    try {
      data = await response.json();
    } catch (err) {
      data = null;
    }
    if (!response.ok) {
      let detail = data && data.detail;
      if (Array.isArray(detail)) detail = detail.map((d) => `${(d.loc || []).join(".")}: ${d.msg}`).join("; ");
      throw new ApiError(response.status, `${detail || response.statusText} (HTTP ${response.status})`);
    }
    return data;
  }

  const get = (path, params) => request("GET", withQuery(path, params));
  const post = (path, payload) => request("POST", path, payload);

  function withQuery(path, params) {
    const query = new URLSearchParams();
    for (const [name, value] of Object.entries(params || {})) {
      if (value !== null && value !== undefined && value !== "") query.set(name, String(value));
    }
    const text = query.toString();
    return text ? `${path}?${text}` : path;
  }

  async function allPages(path, params, maxPages) {
    const items = [];
    let cursor = null;
    for (let i = 0; i < (maxPages || 10); i += 1) {
      const pageBody = await get(path, { ...params, cursor });
      items.push(...(pageBody.items || []));
      cursor = pageBody.next_cursor;
      if (!cursor) return { items, truncated: false };
    }
    return { items, truncated: true };
  }

  function say(message, isError) {
    statusBox.textContent = message;
    statusBox.classList.toggle("error", Boolean(isError));
  }

  function fmtTime(value) {
    if (!value) return "–";
    const date = new Date(value);
    if (Number.isNaN(date.getTime())) return String(value);
    // Seconds only when a slot has them: cron slots read as "2026-12-02 13:00 UTC".
    return date.toISOString().replace("T", " ").replace(/\.000Z$/, "Z").replace(/:00Z$/, "Z").replace(/Z$/, " UTC");
  }

  function text(value) {
    if (value === null || value === undefined || value === "") return "–";
    if (typeof value === "object") return JSON.stringify(value);
    return String(value);
  }

  function badge(state) {
    const label = state || "unknown";
    return h("span", { class: `badge s-${String(label).replace(/[^a-z_]/gi, "_")}` }, label);
  }

  function specText(spec) {
    if (!spec || typeof spec !== "object") return text(spec);
    if (spec.kind === "cron") return `cron ${spec.expression} (${spec.timezone || "UTC"})`;
    if (spec.kind === "interval") return `every ${durationText(spec.every)}`;
    if (spec.kind === "once") return `once at ${fmtTime(spec.at)}`;
    return text(spec);
  }

  function durationText(value) {
    if (typeof value === "number") return `${value}s`;
    const match = /^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:([\d.]+)S)?)?$/.exec(String(value));
    if (!match) return text(value);
    const parts = [[match[1], "d"], [match[2], "h"], [match[3], "m"], [match[4], "s"]];
    return parts.filter(([n]) => n && Number(n) !== 0).map(([n, unit]) => `${Number(n)}${unit}`).join("") || "0s";
  }

  function scheduleState(row) {
    if (row.deleted) return "deleted";
    return row.paused ? "paused" : "active";
  }

  function slotValue(slot) {
    return slot && typeof slot === "object" ? slot.slot || slot.at || slot.fire_at : slot;
  }

  function slotItem(slot) {
    const at = slotValue(slot);
    const wall = slot && typeof slot === "object" && typeof slot.local === "string" ? slot.local : "";
    // The zone's wall-clock time, when it differs from UTC: "(02:00 local, +01:00)".
    const offset = wall.slice(19).replace(/^\.\d+/, "");
    const local = wall && offset && offset !== "+00:00" && offset !== "Z" ? ` (${wall.slice(11, 16)} local, ${offset})` : "";
    const dst = slot && typeof slot === "object" && slot.dst ? ` [${slot.dst}]` : "";
    return h("li", {}, h("time", { datetime: at }, fmtTime(at)), local, dst);
  }

  function errorText(error) {
    if (!error) return "";
    if (typeof error === "object") {
      const kind = error.error_type || error.type;
      const message = error.message || error.error;
      if (kind || message) return [kind, message].filter(Boolean).join(": ");
      if (error.dead_letter_reason) return `dead-lettered: ${error.dead_letter_reason}`;
      if (error.skip_reason) return `skipped: ${error.skip_reason}`;
    }
    return text(error);
  }

  const started = (r) => (r.timings && r.timings.started_at) || r.started_at;
  const finished = (r) => (r.timings && r.timings.finished_at) || r.finished_at;

  function table(caption, columns, rows, empty, className) {
    if (!rows.length) return h("p", { class: "empty" }, empty || "Nothing here yet.");
    return h(
      "table",
      { class: className || null },
      h("caption", {}, caption),
      h("thead", {}, h("tr", {}, columns.map((c) => h("th", { scope: "col" }, c.label)))),
      h(
        "tbody",
        {},
        rows.map((row) => h("tr", {}, columns.map((c) => h("td", { class: c.cls || null }, c.cell(row))))),
      ),
    );
  }

  function facts(pairs) {
    return h("dl", { class: "facts" }, pairs.map(([label, value]) => [h("dt", {}, label), h("dd", {}, value)]));
  }

  function jsonBlock(value) {
    if (value === null || value === undefined) return "–";
    return h("pre", { class: "json" }, JSON.stringify(value, null, 2));
  }

  // One line that fits a table cell; the whole value one click away (native, keyboard-accessible).
  function jsonDetails(value) {
    if (value === null || value === undefined) return "–";
    const line = JSON.stringify(value);
    if (line.length <= 90) return h("code", {}, line);
    return h("details", {}, h("summary", {}, h("code", {}, `${line.slice(0, 88)}…`)), jsonBlock(value));
  }

  function field(labelText, input) {
    return h("label", {}, labelText, input);
  }

  function queryParam(name) {
    return new URLSearchParams(window.location.search).get(name);
  }

  async function command(button, path, payload, what) {
    button.disabled = true;
    try {
      const reply = await post(path, payload);
      say(`${what}: command ${reply.command_id} published.`);
      return reply;
    } catch (err) {
      say(`${what} failed: ${err.message}`, true);
      button.disabled = false;
      return null;
    }
  }

  function done() {
    content.setAttribute("aria-busy", "false");
  }

  function show(...nodes) {
    content.replaceChildren(...nodes.flat().filter(Boolean));
    done();
  }

  // ---- schedules -----------------------------------------------------------------------------

  async function schedulesPage() {
    const form = h("form", { class: "filters", "aria-label": "Filter schedules" });
    const state = h("select", { name: "state" },
      h("option", { value: "" }, "all"), h("option", { value: "false" }, "active"), h("option", { value: "true" }, "paused"));
    const tag = h("input", { name: "tag", type: "text", size: 14 });
    const handler = h("input", { name: "handler", type: "text", size: 18 });
    state.value = queryParam("paused") || "";
    tag.value = queryParam("tag") || "";
    handler.value = queryParam("handler") || "";
    append(form, [field("State", state), field("Tag", tag), field("Handler", handler),
      h("button", { type: "submit" }, "Apply")]);
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      window.location.search = withQuery("", { paused: state.value, tag: tag.value, handler: handler.value });
    });
    const params = { paused: state.value, tag: tag.value, handler: handler.value, limit: 50, cursor: queryParam("cursor") };
    const listing = await get("/v1/schedules", params);
    const rows = listing.items || [];
    // The list carries next_fire_at; the next slots come from each schedule's own page.
    const details = await Promise.all(rows.map((row) =>
      get(`/v1/schedules/${enc(row.schedule_id)}`).catch(() => null)));
    rows.forEach((row, i) => { row.next_slots = (details[i] && details[i].next_slots) || []; });
    const pager = h("p", { class: "pager" });
    if (listing.next_cursor) {
      append(pager, [h("a", { href: withQuery("/ui/", { ...params, limit: null, cursor: listing.next_cursor }) }, "Next page")]);
    }
    show(
      form,
      table("Schedules and their next slots", [
        { label: "Schedule", cell: (r) => h("a", { href: `/ui/schedules/${enc(r.schedule_id)}` }, r.schedule_id) },
        { label: "Spec", cell: (r) => specText(r.spec), cls: "mono" },
        { label: "Handler", cell: (r) => text(r.handler), cls: "mono" },
        { label: "State", cell: (r) => [badge(scheduleState(r)), r.pause_reason ? ` ${r.pause_reason}` : ""] },
        { label: "Next slots", cell: (r) => r.next_slots.length
          ? h("ul", { class: "slots" }, r.next_slots.map(slotItem))
          : "none" },
        { label: "Tags", cell: (r) => (r.tags || []).join(", ") || "–" },
      ], rows, "No schedules yet. Create one with `slotflow schedule create` or POST /v1/schedules."),
      pager,
    );
  }

  async function schedulePage() {
    if (!subject) { window.location.assign("/ui/"); return; }
    let schedule;
    try {
      schedule = await get(`/v1/schedules/${enc(subject)}`);
    } catch (err) {
      if (err.status === 404) { show(h("p", {}, `Schedule ${subject} was not found.`)); return; }
      throw err;
    }
    const rangeSeconds = Number(queryParam("range")) || 86400;
    const to = queryParam("to") ? new Date(queryParam("to")) : new Date();
    const from = queryParam("from") ? new Date(queryParam("from")) : new Date(to.getTime() - rangeSeconds * 1000);
    const [runs, audit] = await Promise.all([
      allPages(`/v1/schedules/${enc(subject)}/runs`, { from: from.toISOString(), to: to.toISOString(), limit: 500 }, 4),
      get("/v1/audit", { schedule: subject, from: from.toISOString(), to: to.toISOString() }).catch(() => null),
    ]);

    const reason = h("input", { type: "text", name: "reason", size: 24 });
    const actions = h("div", { class: "actions" },
      h("button", { type: "button", class: "primary", onclick: (e) =>
        command(e.currentTarget, `/v1/schedules/${enc(subject)}/trigger`, {}, "Trigger") }, "Trigger now"),
      schedule.paused
        ? h("button", { type: "button", onclick: (e) =>
          command(e.currentTarget, `/v1/schedules/${enc(subject)}/resume`, {}, "Resume") }, "Resume")
        : [field("Pause reason", reason), h("button", { type: "button", onclick: (e) =>
          command(e.currentTarget, `/v1/schedules/${enc(subject)}/pause`, { reason: reason.value }, "Pause") }, "Pause")],
    );
    const nextSlots = schedule.next_slots || [];
    const rangeNav = h("p", { class: "pager" }, "Window: ", RANGES.map(([label, seconds]) => [
      seconds === rangeSeconds && !queryParam("from")
        ? h("strong", { "aria-current": "true" }, label)
        : h("a", { href: withQuery(window.location.pathname, { range: seconds }) }, label), " "]));
    const items = runs.items.slice().sort((a, b) => String(a.slot).localeCompare(String(b.slot)));
    show(
      facts([
        ["Spec", specText(schedule.spec)],
        ["Handler", text(schedule.handler)],
        ["State", [badge(scheduleState(schedule)), schedule.pause_reason ? ` ${schedule.pause_reason}` : ""]],
        ["Tags", (schedule.tags || []).join(", ") || "–"],
        ["Next fire", fmtTime(schedule.next_fire_at)],
        ["Runs so far", Object.entries(schedule.runs_by_state || {}).map(([state, n]) => `${n} ${state}`).join(", ") || "none"],
        ["Created", fmtTime(schedule.created_at)],
        ["Updated", fmtTime(schedule.updated_at)],
      ]),
      actions,
      h("h2", {}, "Next slots"),
      nextSlots.length
        ? h("ol", { class: "slots" }, nextSlots.map(slotItem))
        : h("p", { class: "empty" }, "No future slots."),
      h("h2", {}, "Runs timeline"),
      rangeNav,
      timeline(items, audit, from, to),
      legend(),
      runs.truncated ? h("p", { class: "empty" }, "Only the first 2000 runs of this window are shown.") : null,
      audit ? auditSummary(audit) : h("p", { class: "empty" }, "The audit is not available for this window."),
      h("h2", {}, "Runs"),
      table(`Runs of ${subject} from ${fmtTime(from)} to ${fmtTime(to)}`, [
        { label: "Slot", cell: (r) => h("time", { datetime: r.slot }, fmtTime(r.slot)) },
        { label: "State", cell: (r) => badge(r.state) },
        { label: "Attempts", cell: (r) => attemptList(r) },
        { label: "Fence", cell: (r) => text(r.fence_token) },
        { label: "Owner", cell: (r) => text(r.owner), cls: "mono" },
        { label: "Started", cell: (r) => fmtTime(started(r)) },
        { label: "Finished", cell: (r) => fmtTime(finished(r)) },
        { label: "Run id", cell: (r) => r.run_id, cls: "mono" },
      ], items.slice().reverse(), "No runs recorded in this window."),
    );
  }

  function attemptList(run) {
    const attempts = run.attempts || [];
    if (!attempts.length) return text(run.attempt);
    return h("ol", { class: "slots" }, attempts.map((a) => h("li", {},
      badge(a.outcome), ` #${text(a.attempt)} · fence ${text(a.fence_token)} · ${text(a.owner)}`,
      a.error ? ` · ${errorText(a.error)}` : "")));
  }

  function timeline(runs, audit, from, to) {
    const width = 1000;
    const left = 70;
    const right = 20;
    const span = Math.max(to.getTime() - from.getTime(), 1);
    const x = (value) => left + ((new Date(value).getTime() - from.getTime()) / span) * (width - left - right);
    const lanes = audit ? 2 : 1;
    const height = 60 + lanes * 50;
    const chart = svg("svg", {
      class: "timeline", viewBox: `0 0 ${width} ${height}`, role: "img",
      "aria-labelledby": "timeline-title timeline-desc",
    });
    const counts = {};
    runs.forEach((r) => { counts[r.state] = (counts[r.state] || 0) + 1; });
    chart.append(
      svg("title", { id: "timeline-title" }, `Runs of ${subject} on a time axis`),
      svg("desc", { id: "timeline-desc" },
        `${runs.length} runs: ${Object.entries(counts).map(([k, v]) => `${v} ${k}`).join(", ") || "none"}`),
    );
    const axisY = height - 28;
    chart.append(svg("line", { class: "axis", x1: left, x2: width - right, y1: axisY, y2: axisY }));
    const step = tickStep(span);
    const first = Math.ceil(from.getTime() / step) * step;
    for (let at = first; at <= to.getTime(); at += step) {
      const tx = x(at);
      const label = new Date(at).toISOString();
      chart.append(
        svg("line", { class: "axis", x1: tx, x2: tx, y1: 14, y2: axisY + 4 }),
        svg("text", { x: tx, y: axisY + 18, "text-anchor": "middle" },
          step >= 86400000 ? label.slice(5, 10) : `${label.slice(5, 10)} ${label.slice(11, 16)}`),
      );
    }
    const runsY = 44;
    chart.append(svg("text", { class: "lane", x: 4, y: runsY + 4 }, "Runs"));
    for (const run of runs) {
      const cx = x(run.slot);
      const group = svg("g", { class: "run", "data-state": run.state });
      group.append(svg("title", {}, `${run.run_id}: ${run.state}, ${(run.attempts || []).length || run.attempt || 0} attempt(s)`));
      group.append(svg("circle", { cx, cy: runsY, r: 6, fill: COLORS[run.state] || "#6e7781" }));
      (run.attempts || []).forEach((attempt, i) => {
        group.append(svg("rect", {
          class: "attempt", x: cx - 3, y: runsY - 14 - i * 7, width: 6, height: 5,
          fill: COLORS[attempt.outcome] || "#6e7781",
        }));
      });
      chart.append(group);
    }
    if (audit) {
      const auditY = runsY + 50;
      chart.append(svg("text", { class: "lane", x: 4, y: auditY + 4 }, "Expected"));
      for (const slot of audit.slots || []) {
        const missed = slot.status === "missed";
        const group = svg("g", { class: "expected", "data-status": slot.status });
        group.append(svg("title", {}, `${slot.slot}: ${slot.status}${slot.detail ? ` (${slot.detail})` : ""}`));
        group.append(svg("circle", {
          cx: x(slot.slot), cy: auditY, r: 5,
          fill: missed ? "#fff" : COLORS[slot.status] || "#6e7781",
          stroke: COLORS[slot.status] || "#6e7781", "stroke-width": 2,
        }));
        chart.append(group);
      }
    }
    return chart;
  }

  // Ticks on round times (every 15 min, hour, 6 h, day, ...), about six of them across the window.
  function tickStep(span) {
    const minute = 60000;
    const steps = [1, 5, 10, 15, 30, 60, 120, 180, 360, 720, 1440, 2880, 10080].map((m) => m * minute);
    return steps.find((candidate) => span / candidate <= 8) || steps[steps.length - 1];
  }

  function legend() {
    const states = ["completed", "running", "retrying", "failed", "dead_lettered", "skipped", "missed", "late", "duplicated_effect"];
    return h("ul", { class: "legend", "aria-label": "Colours" }, states.map((state) =>
      h("li", {}, h("span", { class: `swatch c-${state}`, "aria-hidden": "true" }), state.replace(/_/g, " "))));
  }

  function auditSummary(audit) {
    const summary = audit.summary || {};
    const pending = audit.pending ? ` (${audit.pending} too recent to judge)` : "";
    return h("p", { class: "audit" }, `Audit: ${text(audit.expected)} slots expected${pending} — `,
      ["fired", "missed", "skipped_by_policy", "late", "duplicated_effect"].map((name, i) =>
        [i ? ", " : "", h("span", { class: `s-${name}` }, `${summary[name] || 0} ${name.replace(/_/g, " ")}`)]));
  }

  // ---- workflows -----------------------------------------------------------------------------

  async function workflowsPage() {
    const form = h("form", { class: "filters", "aria-label": "Filter workflows" });
    const type = h("input", { name: "type", type: "text", size: 18 });
    const status = h("input", { name: "status", type: "text", size: 12 });
    type.value = queryParam("type") || "";
    status.value = queryParam("status") || "";
    append(form, [field("Type", type), field("Status", status), h("button", { type: "submit" }, "Apply")]);
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      window.location.search = withQuery("", { type: type.value, status: status.value });
    });
    const params = { type: type.value, status: status.value, limit: 50, cursor: queryParam("cursor") };
    const listing = await get("/v1/workflows", params);
    const pager = h("p", { class: "pager" });
    if (listing.next_cursor) {
      append(pager, [h("a", { href: withQuery("/ui/workflows", { ...params, limit: null, cursor: listing.next_cursor }) }, "Next page")]);
    }
    show(form, table("Workflows", [
      { label: "Workflow", cell: (r) => h("a", { href: `/ui/workflows/${enc(r.workflow_id)}` }, r.workflow_id) },
      { label: "Type", cell: (r) => text(r.workflow_type), cls: "mono" },
      { label: "Status", cell: (r) => badge(r.status) },
      { label: "Current step", cell: (r) => text(r.current_step) },
      { label: "Requested", cell: (r) => fmtTime(r.requested_at || r.started_at) },
      { label: "Updated", cell: (r) => fmtTime(r.updated_at) },
    ], listing.items || [], "No workflows yet."), pager);
  }

  function historyItems(history) {
    if (Array.isArray(history)) return history;
    return (history && (history.items || history.history)) || [];
  }

  function compensationItem(entry) {
    const data = (entry && entry.data) || {};
    const name = data.name || data.compensation || data.activity || data.handler || entry.type;
    return h("li", {}, entry.sequence !== null && entry.sequence !== undefined ? `#${entry.sequence} ` : "",
      h("span", { class: "mono" }, text(name)), data.status ? [" ", badge(data.status)] : "",
      ` · recorded ${fmtTime(entry.at)}`);
  }

  async function workflowPage() {
    if (!subject) { window.location.assign("/ui/workflows"); return; }
    let workflow;
    try {
      workflow = await get(`/v1/workflows/${enc(subject)}`);
    } catch (err) {
      if (err.status === 404) { show(h("p", {}, `Workflow ${subject} was not found.`)); return; }
      throw err;
    }
    const history = historyItems(await get(`/v1/workflows/${enc(subject)}/history`).catch(() => []));
    const compensations = workflow.compensations || [];
    const pendingActivities = workflow.pending_activities || [];
    const pendingTimers = workflow.pending_timers || [];
    const cancelReason = h("input", { type: "text", name: "cancel-reason", size: 24 });
    const signalName = h("input", { type: "text", name: "signal", size: 14 });
    const signalPayload = h("input", { type: "text", name: "payload", size: 24, placeholder: "{}" });
    const sendSignal = (event) => {
      let payload = {};
      try {
        payload = signalPayload.value.trim() ? JSON.parse(signalPayload.value) : {};
      } catch (err) {
        say(`The signal payload is not valid JSON: ${err.message}`, true);
        return;
      }
      command(event.currentTarget, `/v1/workflows/${enc(subject)}/signal`, { signal: signalName.value, payload }, "Signal");
    };
    show(
      facts([
        ["Type", text(workflow.workflow_type)],
        ["Status", badge(workflow.status)],
        ["Current step", text(workflow.current_step)],
        ["Requested", fmtTime(workflow.requested_at || workflow.started_at)],
        ["Updated", fmtTime(workflow.updated_at)],
        ["Input", jsonBlock(workflow.input)],
        workflow.cancel_requested ? ["Cancel requested", text(workflow.cancel_reason) ] : null,
      ].filter(Boolean)),
      h("div", { class: "actions" },
        field("Signal", signalName), field("Payload (JSON)", signalPayload),
        h("button", { type: "button", onclick: sendSignal }, "Send signal"),
        field("Cancel reason", cancelReason),
        h("button", { type: "button", class: "danger", onclick: (e) =>
          command(e.currentTarget, `/v1/workflows/${enc(subject)}/cancel`, { reason: cancelReason.value }, "Cancel") }, "Cancel workflow")),
      h("h2", {}, "Saga state"),
      h("p", {}, compensations.length
        ? `${compensations.length} compensation(s) recorded as forward steps succeeded; on failure or cancel they run in reverse order (last first):`
        : "No compensations recorded."),
      compensations.length
        ? h("ol", { class: "saga", "aria-label": "Compensations" }, compensations.map(compensationItem))
        : null,
      h("h2", {}, "Activities"),
      table(`Activities of ${subject}`, [
        { label: "#", cell: (a) => text(a.sequence) },
        { label: "Activity", cell: (a) => text(a.handler), cls: "mono" },
        { label: "State", cell: (a) => badge(a.state) },
        { label: "Attempts", cell: (a) => attemptList(a) },
        { label: "Run id", cell: (a) => text(a.run_id), cls: "mono" },
      ], workflow.activities || [], "No activities yet."),
      h("h2", {}, "Pending"),
      table("Pending activities", [
        { label: "#", cell: (a) => text(a.sequence) },
        { label: "Activity", cell: (a) => text(a.handler), cls: "mono" },
        { label: "State", cell: (a) => badge(a.state || "pending") },
        { label: "Run id", cell: (a) => text(a.run_id), cls: "mono" },
      ], pendingActivities, "No pending activities."),
      table("Pending timers", [
        { label: "Timer", cell: (t) => text(t.timer_id), cls: "mono" },
        { label: "Fires at", cell: (t) => fmtTime(t.fire_at) },
        { label: "Status", cell: (t) => badge(t.status || "pending") },
      ], pendingTimers, "No pending timers."),
      h("h2", {}, "History"),
      table(`History of ${subject}, in order`, [
        { label: "#", cell: (e) => text(e.sequence) },
        { label: "At", cell: (e) => fmtTime(e.at || e.occurred_at) },
        { label: "Origin", cell: (e) => text(e.origin) },
        { label: "Event", cell: (e) => text(e.type || e.event_type), cls: "mono" },
        { label: "Data", cell: (e) => jsonDetails(e.data), cls: "wrap" },
      ], history, "No history recorded yet."),
    );
  }

  // ---- dead letters --------------------------------------------------------------------------

  async function dlqPage() {
    const form = h("form", { class: "filters", "aria-label": "Filter dead letters" });
    const status = h("select", { name: "status" }, ["", "parked", "redriven", "discarded"].map((s) =>
      h("option", { value: s }, s || "any")));
    const reason = h("input", { name: "reason", type: "text", size: 14 });
    const source = h("input", { name: "source", type: "text", size: 12 });
    const topic = h("input", { name: "topic", type: "text", size: 22 });
    const job = h("input", { name: "job_id", type: "text", size: 14 });
    status.value = queryParam("status") ?? "parked";
    reason.value = queryParam("reason") || "";
    source.value = queryParam("source") || "";
    topic.value = queryParam("topic") || "";
    job.value = queryParam("job_id") || "";
    append(form, [field("Status", status), field("Reason", reason), field("Source", source), field("Topic", topic),
      field("Job", job), h("button", { type: "submit" }, "Apply")]);
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      window.location.search = withQuery("", {
        status: status.value, reason: reason.value, source: source.value, topic: topic.value, job_id: job.value,
      }) || "?status=";
    });
    const params = {
      status: status.value, reason: reason.value, source: source.value, topic: topic.value, job_id: job.value,
      limit: 50, cursor: queryParam("cursor"),
    };
    const listing = await get("/v1/dlq", params);
    const rows = listing.items || [];
    const discardReason = h("input", { type: "text", name: "discard-reason", size: 28 });
    const selected = () => Array.from(content.querySelectorAll("input[data-dead-letter]:checked"))
      .map((box) => box.dataset.deadLetter);

    const redrive = (button, ids) => {
      if (!ids.length) { say("Select at least one dead letter first.", true); return; }
      command(button, "/v1/dlq/redrive", { selection: { ids }, limit: ids.length },
        `Redrive of ${ids.length} dead letter(s)`);
    };
    const discard = (button, ids) => {
      if (!ids.length) { say("Select at least one dead letter first.", true); return; }
      if (!discardReason.value.trim()) { say("Give a discard reason first.", true); discardReason.focus(); return; }
      command(button, "/v1/dlq/discard", { selection: { ids }, reason: discardReason.value.trim(), limit: ids.length },
        `Discard of ${ids.length} dead letter(s)`);
    };
    const idOf = (r) => r.dead_letter_id || r.id;
    // A scheduled run is "{job}@{slot}", an activity "{workflow}/{sequence}": link to the right page.
    const jobLink = (r) => {
      if (!r.job_id) return "–";
      const run = String(r.run_id || "");
      if (run.includes("@")) return h("a", { href: `/ui/schedules/${enc(r.job_id)}` }, r.job_id);
      if (run.startsWith(`${r.job_id}/`)) return h("a", { href: `/ui/workflows/${enc(r.job_id)}` }, r.job_id);
      return r.job_id;
    };
    const pager = h("p", { class: "pager" });
    if (listing.next_cursor) {
      append(pager, [h("a", { href: withQuery("/ui/dlq", { ...params, limit: null, cursor: listing.next_cursor }) }, "Next page")]);
    }
    show(
      form,
      h("div", { class: "actions", "aria-label": "Act on selected dead letters", role: "group" },
        h("button", { type: "button", class: "primary", onclick: (e) => redrive(e.currentTarget, selected()) }, "Redrive selected"),
        field("Discard reason", discardReason),
        h("button", { type: "button", class: "danger", onclick: (e) => discard(e.currentTarget, selected()) }, "Discard selected")),
      table("Dead letters", [
        { label: "Select", cell: (r) => h("input", {
          type: "checkbox", "data-dead-letter": idOf(r), "aria-label": `Select ${idOf(r)}`,
        }) },
        { label: "Dead letter", cell: (r) => idOf(r), cls: "mono" },
        { label: "Status", cell: (r) => badge(r.status) },
        { label: "Reason", cell: (r) => text(r.reason) },
        { label: "Source", cell: (r) => text(r.source_service || r.source) },
        { label: "Topic", cell: (r) => text(r.topic), cls: "mono" },
        { label: "Job", cell: (r) => jobLink(r) },
        { label: "Error", cell: (r) => [r.error_type ? `${r.error_type}: ` : "", text(r.error)], cls: "wrap" },
        { label: "Redrives", cell: (r) => text(r.redrive_count) },
        { label: "Last seen", cell: (r) => fmtTime(r.last_seen || r.status_at) },
        { label: "Actions", cell: (r) => [
          h("button", { type: "button", "aria-label": `Redrive ${idOf(r)}`, "data-action": "redrive",
            onclick: (e) => redrive(e.currentTarget, [idOf(r)]) }, "Redrive"),
          " ",
          h("button", { type: "button", class: "danger", "aria-label": `Discard ${idOf(r)}`, "data-action": "discard",
            onclick: (e) => discard(e.currentTarget, [idOf(r)]) }, "Discard"),
        ] },
      ], rows, "No dead letters match.", "dlq"),
      pager,
    );
  }

  // ---- start ---------------------------------------------------------------------------------

  const PAGES = {
    schedules: schedulesPage, schedule: schedulePage, workflows: workflowsPage, workflow: workflowPage, dlq: dlqPage,
  };
  const navKey = { schedule: "schedules", workflow: "workflows" }[page] || page;
  const current = document.querySelector(`nav a[data-nav="${navKey}"]`);
  if (current) current.setAttribute("aria-current", "page");
  const render = PAGES[page];
  if (render) {
    render().catch((err) => {
      show(h("p", { class: "empty" }, "Could not load this page."));
      say(`Could not load data from the API: ${err.message}`, true);
    });
  }
})();
