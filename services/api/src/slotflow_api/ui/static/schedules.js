// slotflow dashboard: the schedules list and one schedule with its runs timeline.
"use strict";

(() => {
  const {
    body, page, subject, content, COLORS, RANGES, h, append, svg, enc, ApiError, get, post, request, withQuery, allPages, say, fmtTime, text, badge, specText, durationText, scheduleState, slotValue, slotItem, errorText, started, finished, table, facts, jsonBlock, jsonDetails, field, queryParam, command, bulkCommand, previewDialog, leftOutList, done, show, attemptList, runHref, runLink,
  } = window.slotflowUi;

  async function schedulesPage() {
    const form = h("form", { class: "filters", "aria-label": "Filter schedules" });
    const state = h("select", { name: "state" },
      h("option", { value: "" }, "all"), h("option", { value: "false" }, "active"), h("option", { value: "true" }, "paused"));
    const prefix = h("input", { name: "id_prefix", type: "search", size: 16 });
    const tag = h("input", { name: "tag", type: "text", size: 14 });
    const handler = h("input", { name: "handler", type: "text", size: 18 });
    prefix.value = queryParam("id_prefix") || "";
    state.value = queryParam("paused") || "";
    tag.value = queryParam("tag") || "";
    handler.value = queryParam("handler") || "";
    append(form, [field("Id starts with", prefix), field("State", state), field("Tag", tag), field("Handler", handler),
      h("button", { type: "submit" }, "Apply")]);
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      window.location.search = withQuery("", {
        id_prefix: prefix.value, paused: state.value, tag: tag.value, handler: handler.value,
      });
    });
    const params = {
      id_prefix: prefix.value, paused: state.value, tag: tag.value, handler: handler.value,
      limit: 50, cursor: queryParam("cursor"),
    };
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
    const reason = h("input", { type: "text", name: "bulk-reason", size: 24 });
    const bulkCatchUp = h("input", { type: "checkbox", name: "bulk-catch-up" });
    const selected = () => Array.from(content.querySelectorAll("input[data-schedule]:checked"))
      .map((box) => box.dataset.schedule);
    const bulk = (button, verb) => {
      const ids = selected();
      if (!ids.length) { say("Select at least one schedule first.", true); return; }
      const payload = verb === "pause"
        ? { schedule_ids: ids, reason: reason.value.trim() }
        : { schedule_ids: ids, catch_up: bulkCatchUp.checked };
      bulkCommand(button, `/v1/schedules/${verb}`, payload,
        `${verb === "pause" ? "Pause" : "Resume"} of ${ids.length} schedule(s)`);
    };
    show(
      form,
      createForm(),
      rows.length ? h("div", { class: "actions", "aria-label": "Act on selected schedules", role: "group" },
        field("Pause reason", reason),
        h("button", { type: "button", onclick: (e) => bulk(e.currentTarget, "pause") }, "Pause selected"),
        field("Catch up on paused slots", bulkCatchUp),
        h("button", { type: "button", onclick: (e) => bulk(e.currentTarget, "resume") }, "Resume selected")) : null,
      table("Schedules and their next slots", [
        { label: "Select", cell: (r) => r.deleted ? "" : h("input", {
          type: "checkbox", "data-schedule": r.schedule_id, "aria-label": `Select ${r.schedule_id}`,
        }) },
        { label: "Schedule", cell: (r) => h("a", { href: `/ui/schedules/${enc(r.schedule_id)}` }, r.schedule_id) },
        { label: "Spec", cell: (r) => specText(r.spec), cls: "mono" },
        { label: "Handler", cell: (r) => text(r.handler), cls: "mono" },
        { label: "State", cell: (r) => [badge(scheduleState(r)), r.pause_reason ? ` ${r.pause_reason}` : "",
          r.resume_at ? ` (resumes ${fmtTime(r.resume_at)})` : ""] },
        { label: "Next fire", cell: (r) => fmtTime(r.next_fire_at) },
        { label: "Last run", cell: (r) => r.last_run
          ? [badge(r.last_run.state), " ", h("a", { href: runHref(r.last_run.run_id), "data-last-run": r.last_run.run_id },
            fmtTime(r.last_run.slot))]
          : "none yet" },
        { label: "Failing", cell: (r) => r.failure_streak
          ? h("span", { class: "badge s-failed", "data-streak": r.failure_streak }, `${r.failure_streak} in a row`)
          : "–" },
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
    // Without it the slots that passed while paused are skipped (reason paused), never run.
    const catchUp = h("input", { type: "checkbox", name: "catch-up" });
    const actions = h("div", { class: "actions" },
      h("button", { type: "button", class: "primary", onclick: (e) =>
        command(e.currentTarget, `/v1/schedules/${enc(subject)}/trigger`, {}, "Trigger") }, "Trigger now"),
      schedule.paused
        ? [field("Catch up on paused slots (misfire policy)", catchUp), h("button", { type: "button", onclick: (e) =>
          command(e.currentTarget, `/v1/schedules/${enc(subject)}/resume`, { catch_up: catchUp.checked }, "Resume") }, "Resume")]
        : [field("Pause reason", reason), h("button", { type: "button", onclick: (e) =>
          command(e.currentTarget, `/v1/schedules/${enc(subject)}/pause`, { reason: reason.value }, "Pause") }, "Pause")],
    );
    const nextSlots = schedule.next_slots || [];
    // The runs table: a state filter and pages of 50, both in the URL (?state=&page=).
    const stateFilter = queryParam("state") || "";
    const pageNo = Math.max(Number(queryParam("page")) || 1, 1);
    const newestFirst = runs.items.slice().sort((a, b) => String(b.slot).localeCompare(String(a.slot)));
    const filtered = stateFilter ? newestFirst.filter((r) => r.state === stateFilter) : newestFirst;
    const perPage = Math.min(Math.max(Number(queryParam("per_page")) || RUNS_PER_PAGE, 5), 500);
    const pageCount = Math.max(Math.ceil(filtered.length / perPage), 1);
    const shown = filtered.slice((pageNo - 1) * perPage, pageNo * perPage);
    const here = (changes) => withQuery(window.location.pathname, {
      window: queryParam("window"), from: queryParam("from"), to: queryParam("to"),
      state: stateFilter, page: pageNo > 1 ? pageNo : null, per_page: queryParam("per_page"), ...changes,
    });
    const runFilter = h("select", { name: "run-state", onchange: (e) => window.location.assign(here({ state: e.currentTarget.value, page: null })) },
      ["", ...RUN_STATES].map((st) => h("option", { value: st }, st || "any")));
    runFilter.value = stateFilter;
    const runPager = h("div", { class: "pager", role: "group", "aria-label": "Pages of runs" },
      field("Runs in state", runFilter),
      pageNo > 1 ? h("a", { href: here({ page: pageNo > 2 ? pageNo - 1 : null }), rel: "prev" }, "Newer") : null,
      ` Page ${pageNo} of ${pageCount} (${filtered.length} runs) `,
      pageNo < pageCount ? h("a", { href: here({ page: pageNo + 1 }), rel: "next" }, "Older") : null);
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
        ["Next fire", fmtTime(schedule.next_fire_at)],
        ["Runs so far", Object.entries(schedule.runs_by_state || {}).map(([state, n]) => `${n} ${state}`).join(", ") || "none"],
        ["Created", fmtTime(schedule.created_at)],
        ["Updated", fmtTime(schedule.updated_at)],
      ]),
      actions,
      editForm(schedule),
      backfillForm(schedule),
      deleteForm(schedule),
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
      runs.truncated ? h("p", { class: "empty" }, "Only the newest 2000 runs of this window are shown.") : null,
      audit ? auditSummary(audit) : h("p", { class: "empty" }, "The audit is not available for this window."),
      repairSection(audit, from, to),
      h("h2", {}, "Runs"),
      runPager,
      table(`Runs of ${subject} from ${fmtTime(from)} to ${fmtTime(to)}`, [
        { label: "Slot", cell: (r) => h("time", { datetime: r.slot }, fmtTime(r.slot)) },
        { label: "State", cell: (r) => badge(r.state) },
        { label: "Attempts", cell: (r) => attemptList(r) },
        { label: "Fence", cell: (r) => text(r.fence_token) },
        { label: "Owner", cell: (r) => text(r.owner), cls: "mono" },
        { label: "Started", cell: (r) => fmtTime(started(r)) },
        { label: "Finished", cell: (r) => fmtTime(finished(r)) },
        { label: "Run id", cell: (r) => runLink(r.run_id), cls: "mono" },
        { label: "Repair", cell: (r) => repairButtons(r.slot, r.state) },
      ], shown, stateFilter ? `No ${stateFilter} runs in this window.` : "No runs recorded in this window."),
    );
  }

  // ---- an operator's repairs: re-run or mark a slot or a range ----------------------------------
  // Each opens the preview dialog (common.js): the route's dry run says what it would touch and
  // leave out, and why, before Confirm sends it (POST /v1/schedules/{id}/rerun and /mark).

  // Where no repair applies, no button: a slot whose run is in progress is never re-run or marked.
  const IN_PROGRESS = new Set(["due", "running", "retrying", "in_flight"]);

  function repairButtons(slot, state) {
    if (IN_PROGRESS.has(state)) return "–";
    const completed = state === "completed" || state === "succeeded";
    return h("span", { class: "actions" },
      h("button", { type: "button", "data-repair": "rerun", onclick: () => repairDialog("rerun", slot, slot) }, "Re-run…"),
      // A completed slot did its work: marking it would say nothing new (the api leaves it out).
      completed ? null : [" ", h("button", { type: "button", "data-repair": "mark", onclick: () => repairDialog("mark", slot, slot) }, "Mark…")]);
  }

  // The audit's slots that may need a hand (failed, missed, skipped), each with its repairs; and
  // the whole window's range, for a repair of many slots at once.
  function repairSection(audit, from, to) {
    const flagged = ((audit && audit.slots) || []).filter((s) => ["failed", "missed", "skipped"].includes(s.outcome));
    return h("div", { class: "repairs" },
      h("h2", {}, "Repair slots"),
      h("p", { class: "actions" },
        h("button", { type: "button", "data-repair-range": "rerun", onclick: () => repairDialog("rerun", isoWholeSeconds(from), isoWholeSeconds(to)) }, "Re-run…"),
        " ",
        h("button", { type: "button", "data-repair-range": "mark", onclick: () => repairDialog("mark", isoWholeSeconds(from), isoWholeSeconds(to)) }, "Mark…"),
        h("span", { class: "muted" }, " a range of slots (this window, to narrow in the dialog)")),
      table("Slots the audit flags in this window", [
        { label: "Slot", cell: (r) => h("time", { datetime: r.slot }, fmtTime(r.slot)) },
        { label: "Outcome", cell: (r) => badge(r.outcome) },
        { label: "Detail", cell: (r) => text(r.detail) },
        { label: "Repairs", cell: (r) => (r.repairs || []).length
          ? h("ul", { class: "slots" }, r.repairs.map((x) => h("li", {}, text(x.said || x.action))))
          : "–" },
        { label: "Repair", cell: (r) => repairButtons(r.slot, r.outcome) },
      ], flagged, "No failed, missed or skipped slot in this window."));
  }

  function repairDialog(verb, start, end) {
    const rerun = verb === "rerun";
    const from = h("input", { name: "repair-from", type: "text", size: 26, value: start });
    const to = h("input", { name: "repair-to", type: "text", size: 26, value: end || start });
    const force = h("input", { type: "checkbox", name: "repair-force" });
    const mark = h("select", { name: "repair-mark" }, ["done", "skipped"].map((m) => h("option", { value: m }, m)));
    const fields = [field("From (the first slot, ISO 8601)", from), field("To (the last slot, inclusive)", to)];
    fields.push(rerun
      ? field("Force: also re-run COMPLETED slots. Their effect runs AGAIN, as a new run <run id>#rerun-n", force)
      : field("Mark as", mark));
    const what = rerun ? "re-run" : "mark";
    previewDialog({
      title: rerun ? `Re-run slots of ${subject}` : `Mark slots of ${subject}`,
      warning: rerun
        ? "Re-runs each failed, dead-lettered, missed or skipped slot with the schedule's current definition; "
          + "a running slot is never re-run, and a completed one only with Force."
        : "Records the slots as done (handled by hand) or skipped, with your reason; no effect runs.",
      fields,
      confirmLabel: rerun ? "Confirm re-run" : "Confirm mark",
      body: () => ({ from: from.value.trim(), to: to.value.trim() || null, ...(rerun ? { force: force.checked } : { mark: mark.value }) }),
      send: (body, dryRun) => post(`/v1/schedules/${enc(subject)}/${verb}`, { ...body, dry_run: dryRun }),
      preview: (a) => [
        h("p", { "data-count": String(a.count) }, `Would ${what} ${a.count} slot(s); nothing is published until you confirm.`),
        h("ul", { class: "slots", "data-touch": "" }, a.slots.map((x) => h("li", {},
          `${fmtTime(x.slot)} · ${x.state} · `,
          x.action === "forced_rerun"
            ? h("strong", {}, "forced: its effect runs AGAIN as a new run")
            : text(x.action)))),
        a.count > a.slots.length ? h("p", { class: "muted" }, `… and ${a.count - a.slots.length} more`) : null,
        leftOutList(`Left out: ${a.left_out_count} slot(s), and why`,
          a.left_out.map((x) => `${fmtTime(x.slot)} · ${x.state}: ${x.reason}`)),
        a.pending ? h("p", { class: "muted" }, `${a.pending} slot(s) too recent to judge: untouched.`) : null,
      ],
      can: (a) => a.count > 0,
      sent: (a) => `${rerun ? "Re-run" : `Mark ${mark.value}`} sent: ${a.count} slot(s) touched (command ${a.command_id}).`,
    });
  }

  const RUNS_PER_PAGE = 50;
  const RUN_STATES = ["due", "running", "retrying", "failed", "completed", "dead_lettered", "skipped"];
  const OVERLAPS = ["buffer_all", "allow", "skip", "buffer_one", "cancel_previous"];

  // The value a spec is written with in the forms: a cron expression, an interval (15m) or a time.
  function specValue(spec) {
    if (!spec) return "";
    if (spec.kind === "cron") return spec.expression || "";
    if (spec.kind === "interval") return durationText(spec.every);
    return spec.at || "";
  }

  function specFrom(kind, value, timezone) {
    const v = value.trim();
    if (kind === "cron") return { kind, expression: v, timezone: timezone.trim() || "UTC" };
    if (kind === "interval") return { kind, every: v };
    return { kind, at: v };
  }

  // A JSON object from a textarea; null (after saying why) when it is not one.
  function jsonObject(input, label) {
    const raw = input.value.trim();
    if (!raw) return {};
    try {
      const value = JSON.parse(raw);
      if (value && typeof value === "object" && !Array.isArray(value)) return value;
    } catch (err) {
      say(`${label} is not valid JSON: ${err.message}`, true);
      return null;
    }
    say(`${label} must be a JSON object`, true);
    return null;
  }

  function kindSelect(value) {
    const select = h("select", { name: "kind" },
      h("option", { value: "cron" }, "cron"), h("option", { value: "interval" }, "interval"), h("option", { value: "once" }, "once"));
    select.value = value || "cron";
    return select;
  }

  function createForm() {
    const id = h("input", { name: "schedule_id", type: "text", size: 22, required: true });
    const kind = kindSelect("cron");
    const when = h("input", { name: "when", type: "text", size: 22, placeholder: "0 2 * * *  /  15m  /  2030-01-01T00:00:00Z" });
    const zone = h("input", { name: "timezone", type: "text", size: 16, value: "UTC" });
    const handler = h("input", { name: "handler", type: "text", size: 22 });
    const handlerNote = handlerWarning(handler);
    const payload = h("textarea", { name: "payload", rows: 2, cols: 40 });
    const create = (event) => {
      event.preventDefault();
      const data = jsonObject(payload, "Payload");
      if (data === null) return;
      const sid = id.value.trim();
      const body = {
        schedule_id: sid,
        definition: { spec: specFrom(kind.value, when.value, zone.value), handler: handler.value.trim(), payload: data },
      };
      command(event.submitter || event.currentTarget.querySelector("button"), "/v1/schedules", body, `Create ${sid}`, "POST",
        () => window.location.assign(`/ui/schedules/${enc(sid)}`));
    };
    return h("details", { class: "form" }, h("summary", {}, "New schedule"),
      h("form", { class: "filters", "aria-label": "New schedule", onsubmit: create },
        field("Schedule id", id), field("Kind", kind), field("Cron expression, interval or time", when),
        field("Time zone (cron)", zone), field("Handler", handler), field("Payload (JSON object)", payload),
        h("button", { type: "submit", class: "primary" }, "Create schedule")), handlerNote);
  }

  // The warning the CLI prints and the API answers for a handler no live claimer serves, asked of
  // the API (GET /v1/handlers?handler=) as the operator types: one source of truth for all three.
  function handlerWarning(input) {
    // Announced as it changes, but not a second status region: the page has one (#status).
    const note = h("p", { class: "warning", "aria-live": "polite", "data-handler-warning": "" });
    note.hidden = true;
    let timer = null;
    let asked = "";
    const check = async () => {
      const name = input.value.trim();
      asked = name;
      if (!name) { note.hidden = true; note.textContent = ""; return; }
      try {
        const answer = await get("/v1/handlers", { handler: name });
        if (asked !== name) return;  // a newer check is under way
        const warnings = answer.warnings || [];
        note.textContent = warnings.length ? `Warning: ${warnings.join("; ")}` : "";
        note.hidden = !warnings.length;
      } catch (err) {
        note.textContent = `Could not check the handler: ${err.message}`;
        note.hidden = false;
      }
    };
    input.addEventListener("input", () => { clearTimeout(timer); timer = setTimeout(check, 300); });
    input.addEventListener("change", () => { clearTimeout(timer); check(); });
    return note;
  }

  // Sends only what changed, as a merge patch (PATCH keeps every field it does not name).
  function editForm(schedule) {
    const spec = schedule.spec || {};
    const definition = schedule.definition || {};
    const kind = kindSelect(spec.kind);
    const when = h("input", { name: "edit-when", type: "text", size: 22, value: specValue(spec) });
    const zone = h("input", { name: "edit-timezone", type: "text", size: 16, value: spec.timezone || "UTC" });
    const handler = h("input", { name: "edit-handler", type: "text", size: 22, value: schedule.handler || "" });
    const handlerNote = handlerWarning(handler);
    const payload = h("textarea", { name: "edit-payload", rows: 3, cols: 40 });
    payload.value = JSON.stringify(definition.payload || {}, null, 1);
    const tags = h("input", { name: "edit-tags", type: "text", size: 22, value: (schedule.tags || []).join(", ") });
    const save = (event) => {
      event.preventDefault();
      const patch = {};
      const newSpec = specFrom(kind.value, when.value, zone.value);
      if (kind.value !== spec.kind || when.value.trim() !== specValue(spec)
        || (kind.value === "cron" && (zone.value.trim() || "UTC") !== (spec.timezone || "UTC"))) patch.spec = newSpec;
      if (handler.value.trim() !== schedule.handler) patch.handler = handler.value.trim();
      const data = jsonObject(payload, "Payload");
      if (data === null) return;
      if (JSON.stringify(data) !== JSON.stringify(definition.payload || {})) patch.payload = data;
      const newTags = tags.value.split(",").map((t) => t.trim()).filter(Boolean);
      if (newTags.join(",") !== (schedule.tags || []).join(",")) patch.tags = newTags;
      if (!Object.keys(patch).length) { say("Nothing changed.", true); return; }
      command(event.submitter || event.currentTarget.querySelector("button"), `/v1/schedules/${enc(subject)}`, patch,
        `Edit (${Object.keys(patch).join(", ")})`, "PATCH");
    };
    return h("details", { class: "form" }, h("summary", {}, "Edit"),
      h("form", { class: "filters", "aria-label": "Edit schedule", onsubmit: save },
        field("Kind", kind), field("Cron expression, interval or time", when), field("Time zone (cron)", zone),
        field("Handler", handler), field("Payload (JSON object)", payload), field("Tags (comma-separated)", tags),
        h("button", { type: "submit", class: "primary" }, "Save changes")), handlerNote);
  }

  function backfillForm(schedule) {
    const now = new Date();
    const start = h("input", { name: "backfill-start", type: "text", size: 24,
      value: isoWholeSeconds(new Date(now.getTime() - 86400000)) });
    const end = h("input", { name: "backfill-end", type: "text", size: 24, value: isoWholeSeconds(now) });
    const overlap = h("select", { name: "backfill-overlap" }, OVERLAPS.map((o) => h("option", { value: o }, o)));
    const concurrent = h("input", { name: "backfill-concurrent", type: "number", min: 1, max: 100, value: 1, size: 4 });
    const plan = h("div", { class: "plan", "aria-live": "polite" });
    const range = () => ({ start: start.value.trim(), end: end.value.trim() });
    const dryRun = async (event) => {
      const { start: from, end: to } = range();
      try {
        const report = await get(`/v1/schedules/${enc(schedule.schedule_id)}/backfill`, { from, to });
        const slots = report.slots || [];
        plan.replaceChildren(...[
          h("p", { class: report.refused ? "alert" : null }, report.refused
            ? `Dry run: refused: ${report.refused}`
            : `Dry run: ${report.expected} slot(s) from ${fmtTime(from)} to ${fmtTime(to)}; nothing was published.`),
          slots.length ? h("ul", { class: "slots", "aria-label": "Slots it would run" }, slots.slice(0, 20).map((slot) =>
            h("li", { class: "mono" }, slot.run_id, slot.state ? ` (already ${slot.state})` : ""))) : null,
          slots.length > 20 ? h("p", { class: "empty" }, `… and ${slots.length - 20} more`) : null,
        ].filter(Boolean));
      } catch (err) {
        say(`Dry run failed: ${err.message}`, true);
      }
    };
    const run = (event) => {
      event.preventDefault();
      const body = { ...range(), overlap: overlap.value, max_concurrent: Number(concurrent.value) || 1 };
      command(event.submitter || event.currentTarget.querySelector("button.primary"), `/v1/schedules/${enc(schedule.schedule_id)}/backfill`, body, "Backfill");
    };
    return h("details", { class: "form" }, h("summary", {}, "Backfill"),
      h("form", { class: "filters", "aria-label": "Backfill", onsubmit: run },
        field("From (ISO 8601)", start), field("To (ISO 8601)", end), field("Overlap", overlap),
        field("At most at once", concurrent),
        h("button", { type: "button", onclick: dryRun }, "Dry run"),
        h("button", { type: "submit", class: "primary" }, "Run backfill")),
      plan);
  }

  function deleteForm(schedule) {
    const confirmId = h("input", { name: "delete-confirm", type: "text", size: 22 });
    const remove = (event) => {
      event.preventDefault();
      if (confirmId.value.trim() !== schedule.schedule_id) {
        say(`Type ${schedule.schedule_id} to confirm the delete.`, true);
        confirmId.focus();
        return;
      }
      command(event.submitter || event.currentTarget.querySelector("button"), `/v1/schedules/${enc(schedule.schedule_id)}`, undefined,
        `Delete ${schedule.schedule_id}`, "DELETE", () => window.location.assign("/ui/"));
    };
    return h("details", { class: "form" }, h("summary", {}, "Delete"),
      h("form", { class: "filters", "aria-label": "Delete schedule", onsubmit: remove },
        field(`Type ${schedule.schedule_id} to confirm`, confirmId),
        h("button", { type: "submit", class: "danger" }, "Delete schedule")));
  }

  function isoWholeSeconds(date) {
    return date.toISOString().replace(/\.\d{3}Z$/, "Z");
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

  // The headline counts outcomes (a slot that fired is a success only once its run completed),
  // each in its state's colour; how the slots fired (on time, late) follows in plain text.
  const OUTCOME_LABELS = [
    ["succeeded", "fired and succeeded"], ["failed", "fired and failed or dead-lettered"],
    ["in_flight", "fired, still running"], ["held", "held"], ["missed", "missed"],
    ["skipped", "skipped"], ["duplicated_effect", "duplicated effect"],
  ];

  function auditSummary(audit) {
    const outcomes = audit.outcomes || {};
    const summary = audit.summary || {};
    const pending = audit.pending ? ` (${audit.pending} too recent to judge)` : "";
    return h("div", { class: "audit" },
      h("p", { "data-audit": "outcomes" }, `Audit: ${text(audit.expected)} slots expected${pending} — `,
        OUTCOME_LABELS.map(([name, label], i) => [i ? ", " : "",
          h("span", { class: `s-${name}`, "data-outcome": name }, `${outcomes[name] || 0} ${label}`)])),
      h("p", { class: "muted", "data-audit": "timing" }, "How they fired: ",
        ["fired", "late", "missed", "skipped_by_policy", "held", "duplicated_effect"].map((name, i) =>
          [i ? ", " : "", `${summary[name] || 0} ${name === "fired" ? "on time" : name.replace(/_/g, " ")}`])));
  }

  // Every schedule's firings in the next hours (24 by default, ?hours= in the URL), soonest first.
  async function calendarPage() {
    const hours = Math.min(Math.max(Number(queryParam("hours")) || 24, 1), 168);
    const answer = await get("/v1/calendar", { hours, limit: 500 });
    const items = answer.items || [];
    const nav = h("p", { class: "pager" }, "Next: ", [6, 24, 72, 168].map((n) => [
      n === hours ? h("strong", { "aria-current": "true" }, `${n} h`)
        : h("a", { href: withQuery("/ui/calendar", { hours: n }) }, `${n} h`), " "]));
    // One group per hour, so a glance shows where the load sits.
    const byHour = new Map();
    for (const item of items) {
      const hour = String(item.fire_at).slice(0, 13);
      if (!byHour.has(hour)) byHour.set(hour, []);
      byHour.get(hour).push(item);
    }
    show(
      nav,
      h("p", {}, `${items.length} firing(s) from ${fmtTime(answer.from)} to ${fmtTime(answer.to)}`
        + (answer.truncated ? "; only the first 500 are shown." : ".")),
      items.length ? h("ul", { class: "hours", "aria-label": "Firings per hour" }, Array.from(byHour.entries()).map(
        ([hour, group]) => h("li", {}, h("strong", {}, `${hour.replace("T", " ")}:00 UTC`), ` ${group.length}`))) : null,
      table("Firings, soonest first", [
        { label: "Fires at", cell: (r) => h("time", { datetime: r.fire_at }, fmtTime(r.fire_at)) },
        { label: "Local time", cell: (r) => text(r.local), cls: "mono" },
        { label: "Schedule", cell: (r) => h("a", { href: `/ui/schedules/${enc(r.schedule_id)}` }, r.schedule_id) },
        { label: "State", cell: (r) => badge(r.status) },
        { label: "Handler", cell: (r) => text(r.handler), cls: "mono" },
        { label: "Run id", cell: (r) => text(r.run_id), cls: "mono" },
      ], items, `Nothing fires in the next ${hours} hours.`),
    );
  }

  Object.assign(window.slotflowUi.pages, { schedules: schedulesPage, schedule: schedulePage, calendar: calendarPage });
})();
