// slotflow dashboard: the workflows list and one workflow with its saga state and history.
"use strict";

(() => {
  const {
    body, page, subject, content, COLORS, RANGES, h, append, svg, enc, ApiError, get, post, withQuery, allPages, say, fmtTime, text, badge, specText, durationText, scheduleState, slotValue, slotItem, errorText, started, finished, table, facts, jsonBlock, jsonDetails, field, queryParam, command, done, show, attemptList,
  } = window.slotflowUi;

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

  Object.assign(window.slotflowUi.pages, { workflows: workflowsPage, workflow: workflowPage });
})();
