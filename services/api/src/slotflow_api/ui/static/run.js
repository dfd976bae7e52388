// slotflow dashboard: one run, with its payload, result and every attempt's error, log lines and traceback.
"use strict";

(() => {
  const {
    subject, h, enc, ApiError, get, fmtTime, text, badge, errorText, facts, jsonBlock, show, runHref,
  } = window.slotflowUi;

  // A scheduled run is "{job}@{slot}", an activity "{workflow}/{sequence}".
  function jobLink(run) {
    if (run.workflow_id) return h("a", { href: `/ui/workflows/${enc(run.workflow_id)}` }, run.workflow_id);
    return h("a", { href: `/ui/schedules/${enc(run.job_id)}` }, run.job_id);
  }

  function millis(value) {
    return value === null || value === undefined ? "–" : `${Math.round(value)} ms`;
  }

  function attemptSection(a) {
    const title = `Attempt ${text(a.attempt)} · fence ${text(a.fence_token)} · ${text(a.owner)}`;
    const logs = a.logs || [];
    return h("section", { class: "attempt", "aria-label": title, "data-outcome": a.outcome },
      h("h3", {}, badge(a.outcome), " ", title),
      facts([
        ["Started", fmtTime(a.started_at)],
        ["Finished", fmtTime(a.finished_at)],
        a.retry_at ? ["Retry at", fmtTime(a.retry_at)] : null,
        a.error ? ["Error", errorText(a.error)] : null,
      ].filter(Boolean)),
      h("h4", {}, "Log"),
      logs.length
        ? h("pre", { class: "log", "aria-label": `Log of attempt ${a.attempt}` }, logs.join("\n"))
        : h("p", { class: "empty" }, "The handler logged nothing in this attempt."),
      a.traceback
        ? [h("h4", {}, "Traceback"), h("pre", { class: "traceback", "aria-label": `Traceback of attempt ${a.attempt}` }, a.traceback)]
        : null,
    );
  }

  async function runPage() {
    let run;
    try {
      run = await get(`/v1/runs/${enc(subject)}`);
    } catch (err) {
      if (err instanceof ApiError && err.status === 404) {
        show(h("p", { class: "empty" }, `Run ${subject} was not found.`));
        return;
      }
      throw err;
    }
    const t = run.timings || {};
    const letters = run.state === "dead_lettered"
      ? h("a", { href: `/ui/dlq?status=&job_id=${enc(run.job_id)}` }, "its dead letters")
      : null;
    show(
      facts([
        ["State", [badge(run.state), letters ? [" ", letters] : ""]],
        [run.workflow_id ? "Workflow" : "Schedule", jobLink(run)],
        ["Slot", h("time", { datetime: run.slot }, fmtTime(run.slot))],
        ["Kind", text(run.kind)],
        ["Handler", text(run.handler)],
        ["Tags", (run.tags || []).join(", ") || "–"],
        ["Fence token", text(run.fence_token)],
        ["Owner", text(run.owner)],
        ["Fire at", fmtTime(t.fire_at)],
        ["Started", fmtTime(t.started_at)],
        ["Finished", fmtTime(t.finished_at)],
        ["Lateness", millis(t.lateness_ms)],
        ["Duration", millis(t.duration_ms)],
        run.error ? ["Error", errorText(run.error)] : null,
      ].filter(Boolean)),
      h("h2", {}, "Payload"),
      jsonBlock(run.payload),
      h("h2", {}, "Result"),
      run.result === null || run.result === undefined ? h("p", { class: "empty" }, "No result (yet).") : jsonBlock(run.result),
      h("h2", {}, `Attempts (${(run.attempts || []).length})`),
      (run.attempts || []).length
        ? (run.attempts || []).map(attemptSection)
        : h("p", { class: "empty" }, "No attempt recorded yet."),
      h("p", {}, h("a", { href: runHref(run.run_id, true) }, "This run as JSON")),
    );
  }

  Object.assign(window.slotflowUi.pages, { run: runPage });
})();
