// slotflow dashboard: the workflows list and one workflow with its saga state and history.
"use strict";

(() => {
  const {
    body, page, subject, content, COLORS, RANGES, h, append, svg, enc, ApiError, get, post, withQuery, allPages, say, fmtTime, text, badge, specText, durationText, scheduleState, slotValue, slotItem, errorText, started, finished, table, facts, jsonBlock, jsonDetails, field, queryParam, command, previewDialog, leftOutList, done, show, attemptList, runHref, runLink,
  } = window.slotflowUi;

  // Mirrors the api's closed statuses (slotflow_api.routes.workflows.CLOSED_STATUSES).
  const CLOSED_STATUSES = new Set(["completed", "failed", "terminated", "cancelled", "rejected"]);

  async function workflowsPage() {
    const form = h("form", { class: "filters", "aria-label": "Filter workflows" });
    const type = h("input", { name: "type", type: "text", size: 18 });
    const status = h("input", { name: "status", type: "text", size: 12 });
    // Needs attention: stuck on a non-determinism, waiting on a parked activity (at any age), or
    // waiting on a signal longer than this age.
    const attention = h("input", { name: "attention", type: "text", size: 6, placeholder: "1h" });
    // A condition in the api's filter language (docs/api.md, "Listing workflows by a query"):
    // built-in fields and search attributes, e.g. Customer = 'acme' AND ExecutionStatus = 'Running'.
    const query = h("input", {
      name: "query", type: "search", size: 56, spellcheck: "false", "aria-describedby": "query-error",
      placeholder: "Customer = 'acme' AND ExecutionStatus = 'Running'",
    });
    type.value = queryParam("type") || "";
    status.value = queryParam("status") || "";
    attention.value = queryParam("attention") || "";
    query.value = queryParam("query") || "";
    const queryError = h("p", { id: "query-error", class: "error", role: "alert", hidden: true });
    append(form, [
      field("Type", type), field("Status", status),
      field("Needs attention (waiting longer than)", attention),
      field("Query", query),
      h("button", { type: "submit" }, "Apply"),
    ]);
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      window.location.search = withQuery("", { type: type.value, status: status.value, attention: attention.value, query: query.value.trim() });
    });
    const params = { type: type.value, status: status.value, attention: attention.value, query: query.value.trim(), limit: 50, cursor: queryParam("cursor") };
    let listing;
    try {
      listing = await get("/v1/workflows", params);
    } catch (err) {
      // A query that does not parse or type: the api's 400 says where; show it under the box.
      if (!(err instanceof ApiError) || err.status !== 400) throw err;
      queryError.textContent = err.message;
      queryError.hidden = false;
      query.setAttribute("aria-invalid", "true");
      show(form, queryError);
      query.focus();
      return;
    }
    const pager = h("p", { class: "pager" });
    if (listing.next_cursor) {
      append(pager, [h("a", { href: withQuery("/ui/workflows", { ...params, limit: null, cursor: listing.next_cursor }) }, "Next page")]);
    }
    // Bulk cancel and terminate: the rows ticked, or else the applied filter (type, status).
    const picked = new Set();
    const openRows = (listing.items || []).filter((r) => !CLOSED_STATUSES.has(r.status));
    // A bulk selection cannot carry a query: under one, "the filter" means the open rows listed.
    const selection = () => (picked.size
      ? { workflow_ids: [...picked] }
      : params.query ? { workflow_ids: openRows.map((r) => r.workflow_id) }
        : { type: queryParam("type") || null, status: queryParam("status") || null });
    const bulk = h("p", { class: "actions", role: "group", "aria-label": "Bulk actions" },
      h("button", { type: "button", "data-bulk": "cancel", onclick: () => bulkDialog("cancel", selection()) }, "Cancel…"),
      " ",
      h("button", { type: "button", "data-bulk": "terminate", onclick: () => bulkDialog("terminate", selection()) }, "Terminate…"),
      h("span", { class: "muted" }, params.query
        ? " the ticked workflows, or else every open one listed below (a bulk action cannot carry the query)"
        : " the ticked workflows, or else every open one the filter above selects"));
    show(form, openRows.length ? bulk : null, table("Workflows", [
      { label: "", cell: (r) => (CLOSED_STATUSES.has(r.status) ? "" : h("input", {
        type: "checkbox", name: "pick", "aria-label": `select ${r.workflow_id}`,
        onchange: (e) => (e.currentTarget.checked ? picked.add(r.workflow_id) : picked.delete(r.workflow_id)) })) },
      { label: "Workflow", cell: (r) => h("a", { href: `/ui/workflows/${enc(r.workflow_id)}` }, r.workflow_id) },
      { label: "Type", cell: (r) => text(r.workflow_type), cls: "mono" },
      { label: "Status", cell: (r) => badge(r.status) },
      { label: "Current step", cell: (r) => text(r.current_step) },
      { label: "Waiting since", cell: (r) => (r.waiting_since ? fmtTime(r.waiting_since) : "–") },
      { label: "Requested", cell: (r) => fmtTime(r.requested_at || r.started_at) },
      { label: "Updated", cell: (r) => fmtTime(r.updated_at) },
    ], listing.items || [], attention.value ? "No workflow needs attention." : "No workflows yet."), pager);
  }

  // A bulk cancel or terminate (POST /v1/workflows/cancel|terminate), previewed before it is sent.
  function bulkDialog(action, chosen) {
    const cancel = action === "cancel";
    const narrows = Boolean((chosen.workflow_ids && chosen.workflow_ids.length) || chosen.type);
    const everything = h("input", { type: "checkbox", name: "bulk-all" });
    const what = chosen.workflow_ids
      ? `${chosen.workflow_ids.length} ticked workflow(s)`
      : `every open workflow${chosen.type ? ` of type ${chosen.type}` : ""}${chosen.status ? ` in status ${chosen.status}` : ""}`;
    previewDialog({
      title: `${cancel ? "Cancel" : "Terminate"} ${what}`,
      warning: cancel
        ? "Each workflow gets its own CancelWorkflow: its code stops and its saga compensates. Closed "
          + "workflows, and those compensating already, are left out."
        : "Each workflow gets its own TerminateWorkflow: it ends NOW, its code and compensations unrun; a "
          + "compensating one ends with its compensations unfinished.",
      fields: narrows ? [] : [field("Every one: no id or type narrows this selection", everything)],
      confirmLabel: cancel ? "Confirm cancel" : "Confirm terminate",
      body: () => ({ ...chosen, all: !narrows && everything.checked }),
      send: (body, dryRun) => post(`/v1/workflows/${action}`, { ...body, dry_run: dryRun }),
      preview: (a) => [
        h("p", { "data-count": String(a.count) }, `Would ${action} ${a.count} workflow(s); nothing is published until you confirm.`),
        h("ul", { class: "slots", "data-touch": "" }, a.workflows.map((w) => h("li", {},
          h("span", { class: "mono" }, w.workflow_id), ` · ${text(w.workflow_type)} · `, badge(w.status)))),
        a.count > a.workflows.length ? h("p", { class: "muted" }, `… and ${a.count - a.workflows.length} more`) : null,
        a.more ? h("p", { class: "muted" }, `${a.more} more open workflow(s) match beyond the limit: untouched.`) : null,
        leftOutList(`Left out: ${a.left_out_count} workflow(s), and why`,
          Object.entries(a.left_out).map(([why, n]) => `${n} · ${why}`)),
        (a.left_out_workflows || []).length
          ? h("ul", { class: "slots", "data-left-out-workflows": "" }, a.left_out_workflows.map((w) => h("li", {},
            h("span", { class: "mono" }, w.workflow_id), ` · ${w.status}: ${w.reason}`)))
          : null,
        !cancel && a.compensating
          ? h("p", { class: "alert" }, `${a.compensating} of them are compensating: they end with their compensations unfinished.`)
          : null,
      ],
      can: (a) => a.count > 0,
      sent: (a) => `${cancel ? "Cancel" : "Terminate"} sent to ${a.count} workflow(s), one command each.`,
    });
  }

  function historyItems(history) {
    if (Array.isArray(history)) return history;
    return (history && (history.items || history.history)) || [];
  }

  // One compensation, in the order it runs on failure or cancel (the newest registration first).
  function compensationItem(c) {
    return h("li", { "data-state": c.state },
      h("span", { class: "mono" }, text(c.activity)), " ", badge(c.state),
      h("br"),
      `undoes #${text(c.for_step)} ${text(c.step_activity)} · registered #${text(c.registered_sequence)}`,
      c.run_id ? ` · run ${c.run_id}` : "",
      c.error ? ` · ${errorText(c.error)}` : "");
  }

  const js = (value) => JSON.stringify(value === undefined ? null : value);

  // A typed history event in words; other entries (commands, run events, timers) as their data.
  function describe(entry) {
    const d = entry.data || {};
    const kind = String(entry.type || "");
    if (entry.origin !== "history" || !kind.startsWith("workflow.")) return jsonDetails(entry.data);
    switch (kind.slice("workflow.".length)) {
      case "started": return `started ${d.workflow_type} with input ${js(d.input)}`;
      case "activity_scheduled":
        return `schedule ${d.activity} (run ${d.run_id})${d.compensates ? `, compensating #${d.compensates}` : ""}`;
      case "activity_completed": return `#${d.scheduled_sequence} completed: ${js(d.result)}`;
      case "activity_failed":
        return `#${d.scheduled_sequence} failed: ${d.error_type}: ${d.message}${d.permanent ? " (permanent)" : " (out of attempts)"}`;
      case "activity_parked":
        return `#${d.scheduled_sequence} parked (${d.reason}): ${d.error_type}: ${d.message}; waits for a retry`;
      case "activity_retried":
        return `#${d.scheduled_sequence} retried by ${d.command_id} (redrive ${d.redrive})`;
      case "timer_started": return `timer ${d.timer_id} until ${fmtTime(d.fire_at)}`;
      case "timer_fired": return `timer #${d.started_sequence} fired at ${fmtTime(d.fired_at)}`;
      case "signal_received": return `signal ${d.signal} ${js(d.payload)}`;
      case "compensation_registered": return `to undo #${d.for_step}: ${d.activity} ${js(d.payload)}`;
      case "cancel_requested": return `cancel requested: ${d.reason || "–"}`;
      case "completed": return `completed: ${js(d.result)}`;
      case "failed": return `failed: ${d.error_type}: ${d.message} (${d.compensated ? "compensated" : "not compensated"})`;
      case "cancelled": return `cancelled: ${d.reason || "–"} (${d.compensated ? "compensated" : "not compensated"})`;
      case "non_determinism_detected":
        return `NON-DETERMINISM at #${d.at_sequence}: expected ${d.expected}, got ${d.got}`;
      case "search_attributes_upserted":
        return `search attributes: ${Object.entries(d.search_attributes || {}).sort(([a], [b]) => (a < b ? -1 : 1))
          .map(([name, a]) => `${name}=${a ? js(a.value) : "removed"}`).join(", ")}`;
      case "memo_upserted":
        return `memo: ${Object.entries(d.memo || {}).sort(([a], [b]) => (a < b ? -1 : 1))
          .map(([name, v]) => `${name}=${v === null ? "removed" : js(v)}`).join(", ")}`;
      default: return jsonDetails(entry.data);
    }
  }

  function divergenceNote(nd) {
    if (!nd) return null;
    const what = `the replay diverged at #${nd.at_sequence}: the history has ${nd.expected}, the code did ${nd.got}`;
    return h("p", { class: nd.open ? "alert" : "empty", role: nd.open ? "alert" : null },
      nd.open ? `Stopped (non-determinism, #${nd.sequence}): ${what}. Deploy code that matches the history.`
        : `Resolved non-determinism (#${nd.sequence}): ${what}.`);
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
    const history = historyItems((await allPages(`/v1/workflows/${enc(subject)}/history`, { limit: 500 }, 5).catch(() => ({ items: [] }))).items);
    const compensations = workflow.compensations || [];
    const steps = workflow.steps || [];
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
    const doneCount = compensations.filter((c) => c.state === "done").length;
    show(
      divergenceNote(workflow.non_determinism),
      facts([
        ["Type", text(workflow.workflow_type)],
        ["Status", badge(workflow.status)],
        workflow.rejection ? ["Rejected", text(workflow.rejection)] : null,
        ["Current step", text(workflow.current_step)],
        workflow.waiting_for ? ["Waiting on", `${workflow.waiting_for}, since ${fmtTime(workflow.waiting_since)}`] : null,
        ["History", workflow.last_sequence ? `${workflow.last_sequence} event(s) recorded` : "no typed history yet"],
        ["Requested", fmtTime(workflow.requested_at)],
        ["Started", fmtTime(workflow.started_at)],
        workflow.ended_at ? ["Ended", fmtTime(workflow.ended_at)] : null,
        workflow.error ? ["Error", errorText(workflow.error)] : null,
        workflow.result !== null && workflow.result !== undefined ? ["Result", jsonBlock(workflow.result)] : null,
        workflow.compensated !== null && workflow.compensated !== undefined ? ["Compensated", workflow.compensated ? "yes" : "no"] : null,
        ["Input", jsonBlock(workflow.input)],
        Object.keys(workflow.memo || {}).length ? ["Memo", jsonBlock(workflow.memo)] : null,
        Object.keys(workflow.search_attributes || {}).length ? ["Search attributes", h("dl", { class: "search-attributes" },
          ...Object.entries(workflow.search_attributes).sort(([a], [b]) => (a < b ? -1 : 1)).flatMap(([name, a]) => [
            h("dt", {}, name), h("dd", {}, `${JSON.stringify(a.value)} `, h("span", { class: "muted" }, a.type))]))] : null,
        workflow.cancel_requested ? ["Cancel requested", text(workflow.cancel_reason)] : null,
        workflow.gap_at ? ["Waiting for", `history event #${workflow.gap_at}`] : null,
        // A parked activity waits on a person: say so, with the retry (RetryActivity) beside it.
        workflow.waiting ? ["Waiting", [h("strong", {}, `waiting: ${workflow.waiting}`), " ",
          ...(workflow.actions || []).filter((a) => a.action === "retry_activity").map((a) =>
            h("button", { type: "button", class: "primary", "data-action": "retry-activity",
              "aria-label": `Retry activity #${a.sequence} ${a.activity}`,
              onclick: (e) => command(e.currentTarget, a.path, { reason: "" }, `Retry of #${a.sequence} ${a.activity}`) },
            `Retry #${a.sequence} ${a.activity}`))]] : null,
      ].filter(Boolean)),
      // A closed workflow takes no signal, cancel or terminate (the API answers them 409): no buttons.
      CLOSED_STATUSES.has(workflow.status)
        ? h("p", { class: "empty", "data-closed": workflow.status },
          `This workflow is ${workflow.status}: it takes no signal, cancel or terminate.`)
        : h("div", { class: "actions" },
        field("Signal", signalName), field("Payload (JSON)", signalPayload),
        h("button", { type: "button", onclick: sendSignal }, "Send signal"),
        field("Reason", cancelReason),
        // Cancel asks the code to stop: it gets CancelledError and its saga compensates.
        h("button", { type: "button", class: "danger", title: "The workflow's code stops and undoes what it did (its saga's compensations)", onclick: (e) =>
          command(e.currentTarget, `/v1/workflows/${enc(subject)}/cancel`, { reason: cancelReason.value }, "Cancel") }, "Cancel workflow"),
        // Terminate ends the run at once: no code runs, no compensation (the operator's last resort).
        h("button", { type: "button", class: "danger", title: "Ends the run now: no code, no compensation", onclick: (e) =>
          command(e.currentTarget, `/v1/workflows/${enc(subject)}/terminate`, { reason: cancelReason.value }, "Terminate") }, "Terminate workflow")),
      h("h2", {}, "Saga state"),
      h("p", {}, compensations.length
        ? `${compensations.length} compensation(s) registered as forward steps succeeded, ${doneCount} done. The workflow's code runs them in this order (newest first) when the saga stops early: a failed step, or a cancel (a saga written as \`async with Saga()\` undoes every step done, one in flight included). Terminate runs none:`
        : "No compensations registered."),
      compensations.length
        ? h("ol", { class: "saga", "aria-label": "Compensations" }, compensations.map(compensationItem))
        : null,
      h("h2", {}, "Steps"),
      table(`Steps of ${subject}`, [
        { label: "#", cell: (s) => text(s.sequence) },
        { label: "Activity", cell: (s) => text(s.activity), cls: "mono" },
        { label: "Kind", cell: (s) => (s.compensates ? `undoes #${s.compensates}` : "forward") },
        { label: "Outcome", cell: (s) => badge(s.state) },
        { label: "Run", cell: (s) => [runLink(s.run_id), s.run_state ? [" ", badge(s.run_state)] : ""] },
        { label: "Result or error", cell: (s) => (s.error ? errorText(s.error) : jsonDetails(s.result)), cls: "wrap" },
      ], steps, "No steps recorded in the history."),
      h("h2", {}, "Pending"),
      table("Pending activities", [
        { label: "#", cell: (a) => text(a.sequence) },
        { label: "Activity", cell: (a) => text(a.handler), cls: "mono" },
        { label: "State", cell: (a) => badge(a.state || "pending") },
        { label: "Run id", cell: (a) => runLink(a.run_id), cls: "mono" },
      ], pendingActivities, "No pending activities."),
      table("Pending timers", [
        { label: "Timer", cell: (t) => text(t.timer_id), cls: "mono" },
        { label: "Fires at", cell: (t) => fmtTime(t.fire_at) },
        { label: "Status", cell: (t) => badge(t.status || "pending") },
      ], pendingTimers, "No pending timers."),
      h("h2", {}, "Activity runs"),
      table(`Activities of ${subject}`, [
        { label: "#", cell: (a) => text(a.sequence) },
        { label: "Activity", cell: (a) => text(a.handler), cls: "mono" },
        { label: "State", cell: (a) => badge(a.state) },
        { label: "Attempts", cell: (a) => attemptList(a) },
        { label: "Run id", cell: (a) => runLink(a.run_id), cls: "mono" },
      ], workflow.activities || [], "No activity runs yet."),
      h("h2", {}, "History"),
      table(`History of ${subject}, in order`, [
        { label: "#", cell: (e) => text(e.sequence) },
        { label: "At", cell: (e) => fmtTime(e.at || e.occurred_at) },
        { label: "Origin", cell: (e) => text(e.origin) },
        { label: "Event", cell: (e) => text(e.type || e.event_type), cls: "mono" },
        { label: "Detail", cell: describe, cls: "wrap" },
      ], history, "No history recorded yet."),
    );
  }

  Object.assign(window.slotflowUi.pages, { workflows: workflowsPage, workflow: workflowPage });
})();
