// slotflow dashboard: the claimers' downstreams (circuit, retry budget, held runs), open and close.
"use strict";

(() => {
  const { h, enc, get, fmtTime, text, badge, table, facts, field, queryParam, command, show, runLink } =
    window.slotflowUi;

  const circuit = (d) => [badge(d.state), d.manual ? " opened by an operator" : ""];
  const budget = (d) => (d.retry_allowance === null || d.retry_allowance === undefined)
    ? "–" : `${d.retries} of ${d.retry_allowance} retries (${Math.round((d.budget_used || 0) * 100)} %)`;

  function heldCaption(d) {
    const shown = (d.held_runs || []).length;
    const all = Math.max(d.held_runs_count || 0, shown);
    return all > shown ? `${shown} of ${all} shown` : String(shown);
  }

  async function downstreamsPage() {
    const rows = await get("/v1/downstreams");
    const reason = h("input", { type: "text", name: "reason", size: 32 });
    const act = (button, name, verb) => {
      if (!reason.value.trim()) { window.slotflowUi.say("Give a reason first (kept with the change).", true); reason.focus(); return; }
      command(button, `/v1/downstreams/${enc(name)}/${verb}`, { reason: reason.value.trim() }, `${verb} ${name}`);
    };
    const nodes = [
      h("p", {}, "Each downstream is a dependency handlers declare. While its circuit is open, runs that need it "
        + "are held (not failed, their attempts kept) and resume in slot order when it closes."),
      h("div", { class: "actions", role: "group", "aria-label": "Open or close a downstream" }, field("Reason", reason)),
      table("Downstreams", [
        { label: "Downstream", cell: (d) => h("a", { href: `/ui/downstreams?name=${enc(d.name)}` }, d.name), cls: "mono" },
        { label: "Circuit", cell: circuit },
        { label: "Retry budget (window)", cell: budget },
        { label: "Calls ok / failed", cell: (d) => `${text(d.successes)} / ${text(d.failures)}` },
        // Counted from the read model's held runs, the rows the downstream's own page lists.
        { label: "Held runs", cell: (d) => h("span", { "data-held": d.held_runs_count }, String(d.held_runs_count)) },
        { label: "Changed", cell: (d) => fmtTime(d.changed_at) },
        { label: "Actions", cell: (d) => [
          h("button", { type: "button", class: "danger", "aria-label": `Open ${d.name}`, "data-action": "open",
            onclick: (e) => act(e.currentTarget, d.name, "open") }, "Open"),
          " ",
          h("button", { type: "button", "aria-label": `Close ${d.name}`, "data-action": "close",
            onclick: (e) => act(e.currentTarget, d.name, "close") }, "Close"),
        ] },
      ], rows, "No downstream reported yet: no handler has declared one.", "downstreams"),
    ];
    const name = queryParam("name");
    if (name) {
      const d = await get(`/v1/downstreams/${enc(name)}`);
      nodes.push(
        h("h2", {}, `Downstream ${d.name}`),
        facts([
          ["Circuit", circuit(d)],
          ["Retry budget", budget(d)],
          ["Window", d.window_seconds ? `${d.window_seconds} s` : "–"],
          ["Own settings", Object.keys(d.settings || {}).length ? JSON.stringify(d.settings) : "the claimers' defaults"],
          ["Reported", fmtTime(d.reported_at)],
        ]),
        // The caption counts the rows it heads (and says when there are more than it shows): the
        // claimers' reported figure is another moment's and once read 8 above 9 rows.
        table(`Held runs (${heldCaption(d)}), in slot order`, [
          { label: "Run", cell: (r) => runLink(r.run_id) },
          { label: "Slot", cell: (r) => fmtTime(r.slot) },
          { label: "Reason", cell: (r) => text(r.held_reason) },
          { label: "Next try", cell: (r) => fmtTime(r.retry_at) },
        ], d.held_runs || [], "No run is held for it."),
        table("Changes, newest first", [
          { label: "At", cell: (c) => fmtTime(c.at) },
          { label: "Change", cell: (c) => [badge(c.from_state), " → ", badge(c.to_state)] },
          { label: "Cause", cell: (c) => c.cause },
          { label: "Reason", cell: (c) => text(c.reason), cls: "wrap" },
          { label: "By", cell: (c) => text(c.by_claimer), cls: "mono" },
        ], d.changes || [], "No change recorded."),
      );
    }
    show(nodes);
  }

  Object.assign(window.slotflowUi.pages, { downstreams: downstreamsPage });
})();
