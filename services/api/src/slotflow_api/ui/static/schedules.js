// slotflow dashboard: the schedules list and one schedule with its runs timeline.
"use strict";

(() => {
  const {
    body, page, subject, content, COLORS, RANGES, h, append, svg, enc, ApiError, get, post, withQuery, allPages, say, fmtTime, text, badge, specText, durationText, scheduleState, slotValue, slotItem, errorText, started, finished, table, facts, jsonBlock, jsonDetails, field, queryParam, command, done, show, attemptList, runHref, runLink,
  } = window.slotflowUi;

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
        { label: "State", cell: (r) => [badge(scheduleState(r)), r.pause_reason ? ` ${r.pause_reason}` : "",
          r.resume_at ? ` (resumes ${fmtTime(r.resume_at)})` : ""] },
        { label: "Next fire", cell: (r) => fmtTime(r.next_fire_at) },
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
    // The window lives in the URL (?window=7d) so a link shows what its sender saw; without one
    // it fits the schedule: about 50 of its intervals, between 1 h and 30 d.
    const rangeSeconds = windowSeconds(queryParam("window")) || Number(queryParam("range")) || defaultWindow(schedule);
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
        : h("a", { href: withQuery(window.location.pathname, { window: label }) }, label), " "]));
    const items = runs.items.slice().sort((a, b) => String(a.slot).localeCompare(String(b.slot)));
    show(
      facts([
        ["Spec", specText(schedule.spec)],
        ["Handler", text(schedule.handler)],
        ["State", [badge(scheduleState(schedule)), schedule.pause_reason ? ` ${schedule.pause_reason}` : ""]],
        ["Tags", (schedule.tags || []).join(", ") || "–"],
        ["Resumes at", schedule.resume_at ? fmtTime(schedule.resume_at) : "–"],
        ["Next fire", [fmtTime(schedule.next_fire_at),
          schedule.catch_up_at_resume ? " (catch-up of the slots missed while paused)" : ""]],
        ["Runs so far", Object.entries(schedule.runs_by_state || {}).map(([state, n]) => `${n} ${state}`).join(", ") || "none"],
        ["Created", fmtTime(schedule.created_at)],
        ["Updated", fmtTime(schedule.updated_at)],
      ]),
      actions,
      h("h2", {}, "Next slots"),
      nextSlots.length
        ? h("ol", { class: "slots" }, nextSlots.map(slotItem))
        : h("p", { class: "empty" }, schedule.paused && !schedule.resume_at
          ? "None while paused: nothing fires until it is resumed."
          : "No future slots."),
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
        { label: "Run id", cell: (r) => runLink(r.run_id), cls: "mono" },
      ], items.slice().reverse(), "No runs recorded in this window."),
    );
  }

  // "7d", "12h", "30m", "90s" or a number of seconds; null for anything else.
  function windowSeconds(value) {
    const match = /^(\d+)([smhdw]?)$/.exec(String(value || "").trim());
    if (!match) return null;
    const unit = { "": 1, s: 1, m: 60, h: 3600, d: 86400, w: 604800 }[match[2]];
    const seconds = Number(match[1]) * unit;
    return seconds > 0 ? seconds : null;
  }

  function defaultWindow(schedule) {
    const spec = schedule.spec || {};
    let interval = null;
    if (spec.kind === "interval") interval = windowSeconds(String(spec.every || "").replace(/^PT?/, "").toLowerCase())
      || isoSeconds(spec.every);
    const slots = schedule.next_slots || [];
    if (!interval && slots.length > 1) interval = (new Date(slots[1].at) - new Date(slots[0].at)) / 1000;
    if (!interval) return 86400;
    return Math.min(Math.max(interval * 50, 3600), 2592000);
  }

  // PT15M, PT1H30M, P1D as seconds (the API's durations).
  function isoSeconds(value) {
    const match = /^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:([\d.]+)S)?)?$/.exec(String(value || ""));
    if (!match) return null;
    const [, d, hh, mm, ss] = match.map((v) => Number(v || 0));
    const seconds = d * 86400 + hh * 3600 + mm * 60 + ss;
    return seconds > 0 ? seconds : null;
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
      // Each marker opens its run's page.
      chart.append(svg("a", { href: runHref(run.run_id), "aria-label": `Run ${run.run_id}` }, group));
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
    const states = ["completed", "running", "retrying", "held", "failed", "dead_lettered", "skipped", "missed", "late", "duplicated_effect"];
    return h("ul", { class: "legend", "aria-label": "Colours" }, states.map((state) =>
      h("li", {}, h("span", { class: `swatch c-${state}`, "aria-hidden": "true" }), state.replace(/_/g, " "))));
  }

  function auditSummary(audit) {
    const summary = audit.summary || {};
    const pending = audit.pending ? ` (${audit.pending} too recent to judge)` : "";
    return h("p", { class: "audit" }, `Audit: ${text(audit.expected)} slots expected${pending} — `,
      ["fired", "missed", "skipped_by_policy", "late", "held", "duplicated_effect"].map((name, i) =>
        [i ? ", " : "", h("span", { class: `s-${name}` }, `${summary[name] || 0} ${name.replace(/_/g, " ")}`)]));
  }

  Object.assign(window.slotflowUi.pages, { schedules: schedulesPage, schedule: schedulePage });
})();
