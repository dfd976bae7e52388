// slotflow dashboard: the workflows list and one workflow with its saga state and history.
"use strict";

(() => {
  const {
    body, page, subject, content, COLORS, RANGES, h, append, svg, enc, ApiError, get, post, withQuery, allPages, say, fmtTime, text, badge, specText, durationText, scheduleState, slotValue, slotItem, errorText, started, finished, table, facts, jsonBlock, jsonDetails, field, queryParam, command, done, show, attemptList, runHref, runLink,
  } = window.slotflowUi;

  async function workflowsPage() {
    const form = h("form", { class: "filters", "aria-label": "Filter workflows" });
    const type = h("input", { name: "type", type: "text", size: 18 });
    const status = h("input", { name: "status", type: "text", size: 12 });
    // Needs attention: stuck on a non-determinism, or waiting on a signal longer than this age.
    const attention = h("input", { name: "attention", type: "text", size: 6, placeholder: "1h" });
    type.value = queryParam("type") || "";
    status.value = queryParam("status") || "";
    attention.value = queryParam("attention") || "";
    append(form, [
      field("Type", type), field("Status", status),
      field("Needs attention (waiting longer than)", attention),
      h("button", { type: "submit" }, "Apply"),
    ]);
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      window.location.search = withQuery("", { type: type.value, status: status.value, attention: attention.value });
    });
    const params = { type: type.value, status: status.value, attention: attention.value, limit: 50, cursor: queryParam("cursor") };
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
      { label: "Waiting since", cell: (r) => (r.waiting_since ? fmtTime(r.waiting_since) : "–") },
      { label: "Requested", cell: (r) => fmtTime(r.requested_at || r.started_at) },
      { label: "Updated", cell: (r) => fmtTime(r.updated_at) },
    ], listing.items || [], attention.value ? "No workflow needs attention." : "No workflows yet."), pager);
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
        return `#${d.scheduled_sequence} parked in the DLQ (${d.reason}): ${d.error_type}: ${d.message}; waits for a redrive`;
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
        workflow.cancel_requested ? ["Cancel requested", text(workflow.cancel_reason)] : null,
        workflow.gap_at ? ["Waiting for", `history event #${workflow.gap_at}`] : null,
      ].filter(Boolean)),
      h("div", { class: "actions" },
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
