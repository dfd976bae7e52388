// slotflow dashboard: the dead-letter queue with redrive and discard. A redrive asks each letter's
// owner (docs/decisions/0009): a letter reads `redriving` until its owner answers, then `redriven`
// or `redrive_failed` with the reason (its note).
"use strict";

(() => {
  const {
    body, page, subject, content, COLORS, RANGES, h, append, svg, enc, ApiError, get, post, withQuery, allPages, say, fmtTime, text, badge, specText, durationText, scheduleState, slotValue, slotItem, errorText, started, finished, table, facts, jsonBlock, jsonDetails, field, queryParam, command, previewDialog, leftOutList, done, show, attemptList, runHref, runLink,
  } = window.slotflowUi;

  async function dlqPage() {
    const form = h("form", { class: "filters", "aria-label": "Filter dead letters" });
    const status = h("select", { name: "status" },
      ["", "parked", "redriving", "redriven", "redrive_failed", "discarded"].map((s) => h("option", { value: s }, s || "any")));
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
    // A schedule's run: re-issue the JobDue it ran with, or the schedule's current definition.
    const definition = h("select", { name: "definition" }, [
      h("option", { value: "as_run" }, "as it ran"),
      h("option", { value: "current" }, "current definition"),
    ]);
    const selected = () => Array.from(content.querySelectorAll("input[data-dead-letter]:checked"))
      .map((box) => box.dataset.deadLetter);

    // Several letters at once: the ticked ones, or else every one the applied filter selects; a
    // preview dialog (common.js) shows the route's dry run before Confirm sends the command.
    const filterSelection = () => {
      const chosen = {};
      for (const [name, value] of [["status", queryParam("status") ?? "parked"], ["reason", reason.value], ["source_service", source.value], ["topic", topic.value], ["job_id", job.value]]) {
        if (value) chosen[name] = value;
      }
      return chosen;
    };
    const bulkDialog = (action) => {
      const ids = selected();
      const chosen = ids.length ? { ids } : filterSelection();
      const isRedrive = action === "redrive";
      const how = h("select", { name: "bulk-definition" }, [
        h("option", { value: "as_run" }, "as it ran"),
        h("option", { value: "current" }, "current definition"),
      ]);
      how.value = definition.value;
      const what = ids.length ? `${ids.length} ticked dead letter(s)` : "every dead letter the filter selects";
      previewDialog({
        title: `${isRedrive ? "Redrive" : "Discard"} ${what}`,
        warning: isRedrive
          ? "Each letter's owner is asked to redrive it: its consumer takes the record through every check again."
          : "Discarded letters are kept, marked discarded with your reason; nothing runs.",
        fields: isRedrive ? [field("Redrive with", how)] : [],
        noReason: isRedrive,
        confirmLabel: isRedrive ? "Confirm redrive" : "Confirm discard",
        body: () => ({ selection: chosen, limit: ids.length || 1000, ...(isRedrive ? { definition: how.value } : {}) }),
        send: async (payload, dryRun) => {
          if (dryRun) return post(withQuery(`/v1/dlq/${action}`, { dry_run: true }), payload);
          const reply = await post(`/v1/dlq/${action}`, payload);
          // The dlq says what it did ("redrove 3 dead letter(s); ..."): wait for that answer.
          const status = await get(`/v1/commands/${enc(reply.command_id)}`, { wait: 10 }).catch(() => ({}));
          return { ...reply, ...status };
        },
        preview: (a) => [
          h("p", { "data-count": String(a.would_touch) }, `Would ${action} ${a.would_touch} of ${a.matching} matching dead letter(s); nothing is published until you confirm.`),
          isRedrive && Object.keys(a.owners || {}).length
            ? h("p", {}, `Owners asked: ${Object.entries(a.owners).map(([o, n]) => `${o} ${n}`).join(", ")}`) : null,
          h("ul", { class: "slots", "data-touch": "" }, (a.items || []).map((x) => h("li", {},
            h("span", { class: "mono" }, x.dead_letter_id), ` · ${text(x.reason)}`,
            x.refusal ? ` · refused: ${x.refusal}` : (x.owner ? ` · asks ${x.owner}` : "")))),
          leftOutList("Left out, and why", [
            a.refused ? `${a.refused} no owner can take: they read redrive_failed at once` : null,
            a.left_out ? `${a.left_out} ${a.left_out_reason || "left out"}` : null,
          ].filter(Boolean)),
        ],
        can: (a) => a.would_touch > 0,
        sent: (a) => `${isRedrive ? "Redrive" : "Discard"} sent as command ${a.command_id}`
          + (a.summary ? `: ${a.summary}` : (a.status === "rejected" ? `: rejected: ${a.reason}` : ".")),
      });
    };
    const redrive = (button, ids) => {
      if (!ids.length) { say("Select at least one dead letter first.", true); return; }
      command(button, "/v1/dlq/redrive", { selection: { ids }, limit: ids.length, definition: definition.value },
        `Redrive of ${ids.length} dead letter(s)`);
    };
    const discard = (button, ids) => {
      if (!ids.length) { say("Select at least one dead letter first.", true); return; }
      if (!discardReason.value.trim()) { say("Give a discard reason first.", true); discardReason.focus(); return; }
      command(button, "/v1/dlq/discard", { selection: { ids }, reason: discardReason.value.trim(), limit: ids.length },
        `Discard of ${ids.length} dead letter(s)`);
    };
    const idOf = (r) => r.dead_letter_id || r.id;
    // How long a request has waited for its owner's answer (nobody answered: it stays redriving).
    const since = (at) => {
      const seconds = Math.max(0, Math.round((Date.now() - Date.parse(at)) / 1000));
      return seconds < 120 ? `${seconds} s` : seconds < 7200 ? `${Math.round(seconds / 60)} min` : `${Math.round(seconds / 3600)} h`;
    };
    const statusCell = (r) => [
      badge(r.status),
      r.status === "redriving" ? ` asked of the ${r.redrive_target || "owner"} ${since(r.status_at)} ago` : "",
      r.redrive_count && r.status !== "redriving" ? ` (${r.redrive_count} redrive${r.redrive_count > 1 ? "s" : ""} asked)` : "",
    ];
    // A workflow's parked activity is retried through its workflow: say so, and link to it.
    const workflowNote = (r) => (r.workflow_id
      ? [h("br"), "retried through ", h("a", { href: `/ui/workflows/${enc(r.workflow_id)}` }, `${r.workflow_id} #${r.sequence}`)]
      : "");
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
        field("Redrive with", definition),
        h("button", { type: "button", class: "primary", "data-bulk": "redrive", onclick: () => bulkDialog("redrive") }, "Redrive…"),
        h("button", { type: "button", class: "danger", "data-bulk": "discard", onclick: () => bulkDialog("discard") }, "Discard…"),
        h("span", { class: "muted" }, " the ticked letters, or else every one the filter selects (previewed first)"),
        // One letter's own Discard button takes its reason from here.
        field("Discard reason (one letter)", discardReason)),
      table("Dead letters", [
        { label: "Select", cell: (r) => h("input", {
          type: "checkbox", "data-dead-letter": idOf(r), "aria-label": `Select ${idOf(r)}`,
        }) },
        { label: "Dead letter", cell: (r) => idOf(r), cls: "mono" },
        { label: "Actions", cell: (r) => [
          h("button", { type: "button", "aria-label": `Redrive ${idOf(r)}`, "data-action": "redrive",
            onclick: (e) => redrive(e.currentTarget, [idOf(r)]) }, "Redrive"),
          " ",
          h("button", { type: "button", class: "danger", "aria-label": `Discard ${idOf(r)}`, "data-action": "discard",
            onclick: (e) => discard(e.currentTarget, [idOf(r)]) }, "Discard"),
        ] },
        { label: "Status", cell: statusCell },
        { label: "Reason", cell: (r) => text(r.reason) },
        { label: "Origin", cell: (r) => [text(r.source_service || r.source), h("br"), h("span", { class: "mono" }, text(r.topic))] },
        { label: "Job", cell: (r) => [jobLink(r), r.run_id ? [h("br"), runLink(r.run_id)] : "", workflowNote(r)] },
        { label: "Error", cell: (r) => [r.error_type ? `${r.error_type}: ` : "", text(r.error)], cls: "wrap" },
        { label: "Note", cell: (r) => text(r.note || "–"), cls: "wrap" },
        { label: "Last seen", cell: (r) => fmtTime(r.last_seen || r.status_at), cls: "when" },
      ], rows, "No dead letters match.", "dlq"),
      pager,
    );
  }

  Object.assign(window.slotflowUi.pages, { dlq: dlqPage });
})();
