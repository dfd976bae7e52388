// slotflow dashboard, shared part: DOM building, the JSON API, formatting. Plain JavaScript, no
// dependencies. The DOM is built with textContent, never innerHTML, so nothing from the read model
// is ever parsed as markup. Page scripts (schedules.js, workflows.js, dlq.js) register a renderer in
// slotflowUi.pages; main.js runs the one for the current page.
"use strict";

window.slotflowUi = (() => {
  const body = document.body;
  const page = body.dataset.page;
  const subject = body.dataset.subject || "";
  const content = document.getElementById("content");
  const statusBox = document.getElementById("status");
  const pages = {};

  const COLORS = {
    completed: "#1a7f37", fired: "#1a7f37", succeeded: "#1a7f37",
    running: "#0969da", due: "#0969da", started: "#0969da",
    // Each state its own colour: a retry in progress is not a late firing, and a failed attempt
    // that will be retried is not a dead letter (state is written out beside it too).
    retrying: "#9a6700", late: "#bc4c00", held: "#9a6700",
    failed: "#cf222e", dead_lettered: "#82071e", missed: "#cf222e",
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

  // ---- the operator's API token -------------------------------------------------------------
  // Entered once per browser tab (sessionStorage: gone when the tab closes) and sent as
  // `Authorization: Bearer`, never as a cookie, so no other site's page can make the browser send
  // it (the API's CSRF rule still applies on top). The scope decides what the buttons may do.

  const TOKEN_KEY = "slotflow.token";
  const signIn = document.getElementById("signin");
  const signOut = document.getElementById("signout");

  function storedToken() {
    try {
      return window.sessionStorage.getItem(TOKEN_KEY) || "";
    } catch (err) {
      return "";
    }
  }

  function askForToken(why) {
    if (!signIn) return;
    signIn.hidden = false;
    const reason = document.getElementById("signin-why");
    if (reason) reason.textContent = why;
    const input = document.getElementById("signin-token");
    if (input) input.focus();
  }

  if (signIn) {
    signIn.addEventListener("submit", (event) => {
      event.preventDefault();
      const value = document.getElementById("signin-token").value.trim();
      if (!value) return;
      window.sessionStorage.setItem(TOKEN_KEY, value);
      window.location.reload();
    });
  }
  if (signOut) {
    signOut.hidden = !storedToken();
    signOut.addEventListener("click", () => {
      window.sessionStorage.removeItem(TOKEN_KEY);
      window.location.reload();
    });
  }

  async function request(method, path, payload) {
    // X-Slotflow-Client: the API refuses state-changing requests without it or a JSON body (CSRF).
    const init = { method, headers: { Accept: "application/json", "X-Slotflow-Client": "dashboard" } };
    const token = storedToken();
    if (token) init.headers.Authorization = `Bearer ${token}`;
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
    if (response.status === 401) {
      askForToken(token ? "The API refused this token (unknown, revoked or expired)." : "The API needs a token.");
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

  let said = 0;

  function say(message, isError) {
    said += 1;
    statusBox.textContent = message;
    statusBox.classList.toggle("error", Boolean(isError));
    return said;
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
    if (row.status) return row.status;
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
    // `local` is when it fires; a shifted slot also says which local time (that did not exist) it stands for.
    const shifted = slot && typeof slot === "object" && slot.nominal ? `, stands for ${slot.nominal.slice(11, 16)}` : "";
    const dst = slot && typeof slot === "object" && slot.dst ? ` [${slot.dst}${shifted}]` : "";
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
    // Wide tables scroll inside their own box instead of widening the page.
    return h("div", { class: "scroll" }, h(
      "table",
      { class: className || null },
      h("caption", {}, caption),
      h("thead", {}, h("tr", {}, columns.map((c) => h("th", { scope: "col" }, c.label)))),
      h(
        "tbody",
        {},
        rows.map((row) => h("tr", {}, columns.map((c) => h("td", { class: c.cls || null }, c.cell(row))))),
      ),
    ));
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

  // How long a page waits for the owning service to apply a command before it stops waiting.
  const APPLY_WAIT_SECONDS = 10;

  // Publish, say so at once, then wait for the owning service's answer (read-your-writes: once
  // it is `accepted` the read model shows the change) and render the page again from the API, so
  // a paused schedule shows paused and a redriven letter is no longer parked, without a reload.
  // `method` for PATCH and DELETE; `after`, when given, runs once the command is applied instead
  // of rendering the page again (a created schedule opens its page, a deleted one the list).
  async function command(button, path, payload, what, method = "POST", after = null) {
    button.disabled = true;
    let reply;
    try {
      reply = await request(method, path, payload);
    } catch (err) {
      say(`${what} failed: ${err.message}`, true);
      button.disabled = false;
      return null;
    }
    const published = say(`${what}: command ${reply.command_id} published; waiting for it to be applied…`);
    let status;
    try {
      status = await get(`/v1/commands/${enc(reply.command_id)}`, { wait: APPLY_WAIT_SECONDS });
    } catch (err) {
      status = { status: "unknown", reason: err.message };
    }
    if (said !== published) return reply; // the user has moved on: a newer message stays
    if (status.status === "rejected") {
      say(`${what}: command ${reply.command_id} published and rejected: ${status.reason || "no reason given"}`, true);
      button.disabled = false;
      return reply;
    }
    if (status.status !== "accepted" && status.status !== "published") {
      say(`${what}: command ${reply.command_id} published; not applied after ${APPLY_WAIT_SECONDS} s `
        + "(is the owning service running?). Reload to see it once it is.");
      return reply;
    }
    if (after) {
      say(`${what}: command ${reply.command_id} published and applied.`);
      after(reply);
      return reply;
    }
    const render = pages[page];
    if (render) {
      await render().catch((err) => say(`Could not load data from the API: ${err.message}`, true));
    }
    // A DLQ command says what it did ("redrove 3 dead letter(s); ..."): show that.
    if (said === published) say(`${what}: command ${reply.command_id} published and applied${status.summary ? `: ${status.summary}` : "."}`);
    return reply;
  }

  // The same for a command on several schedules at once (POST /v1/schedules/pause|resume): the
  // api publishes one command per schedule and, with ?wait=, answers with each one's status.
  async function bulkCommand(button, path, payload, what) {
    button.disabled = true;
    let reply;
    const published = say(`${what}: publishing…`);
    try {
      reply = await post(withQuery(path, { wait: APPLY_WAIT_SECONDS }), payload);
    } catch (err) {
      say(`${what} failed: ${err.message}`, true);
      button.disabled = false;
      return null;
    }
    if (said !== published) return reply;
    const commands = reply.commands || [];
    const refused = commands.filter((c) => c.status === "rejected");
    const waiting = commands.filter((c) => c.status !== "accepted" && c.status !== "rejected");
    const render = pages[page];
    if (render) await render().catch((err) => say(`Could not load data from the API: ${err.message}`, true));
    if (refused.length) {
      say(`${what}: ${refused.map((c) => `${c.schedule_id}: ${c.reason || "rejected"}`).join("; ")}`, true);
    } else if (waiting.length) {
      say(`${what}: ${commands.length - waiting.length} of ${commands.length} applied; `
        + `${waiting.map((c) => c.schedule_id).join(", ")} not yet (reload later).`);
    } else {
      say(`${what}: ${commands.length} command(s) published and applied.`);
    }
    return reply;
  }

  // Preview, then confirm: the operator's repairs and bulk actions (a schedule's re-run and mark,
  // a bulk cancel or terminate of workflows, a bulk redrive or discard) open a modal dialog that
  // first sends the route's dry run and shows what it would touch and leave out, and why; only
  // then is Confirm enabled, and it sends the same body for real. Changing a field after the
  // preview asks for a new one, so what is confirmed is always what was previewed. A reason is
  // required unless `opts.noReason` (a redrive records none). `opts`: title, a warning line,
  // fields (extra labelled inputs), body() the request
  // body without dry_run, send(body, dryRun) the call, preview(answer) the nodes that show a dry
  // run's answer and can(answer) whether it touches anything, sent(answer) the line for the real one.
  function previewDialog(opts) {
    const reason = h("input", { type: "text", name: "repair-reason", size: 40, required: true });
    const result = h("div", { class: "plan", "aria-live": "polite", "data-preview": "" });
    const confirm = h("button", { type: "button", class: "primary", disabled: true, "data-confirm": "" }, opts.confirmLabel || "Confirm");
    const previewButton = h("button", { type: "button", "data-preview-button": "" }, "Preview");
    const close = h("button", { type: "button" }, "Close");
    const dialog = h("dialog", { class: "repair", "aria-label": opts.title },
      h("h2", {}, opts.title),
      opts.warning ? h("p", { class: "muted" }, opts.warning) : null,
      h("div", { class: "filters" }, ...(opts.fields || []),
        opts.noReason ? null : field("Reason (required, recorded with the command)", reason)),
      h("p", {}, previewButton, " ", confirm, " ", close),
      result);
    let previewed = null;
    const stale = () => {
      if (previewed === null) return;
      previewed = null;
      confirm.disabled = true;
      result.replaceChildren(h("p", { class: "muted" }, "Changed since the preview: preview again before confirming."));
    };
    dialog.addEventListener("input", stale);
    dialog.addEventListener("change", stale);
    const body = () => {
      if (opts.noReason) return opts.body();
      const why = reason.value.trim();
      if (!why) throw new ApiError(0, "a reason is required: it is recorded with the command and shown beside what it touched");
      return { ...opts.body(), reason: why };
    };
    previewButton.addEventListener("click", async () => {
      previewButton.disabled = true;
      try {
        const sent = body();
        const answer = await opts.send(sent, true);
        result.replaceChildren(...[opts.preview(answer)].flat().filter(Boolean));
        previewed = sent;
        confirm.disabled = !opts.can(answer);
      } catch (err) {
        result.replaceChildren(h("p", { class: "alert", role: "alert" }, `Preview refused: ${err.message}`));
      } finally {
        previewButton.disabled = false;
      }
    });
    confirm.addEventListener("click", async () => {
      if (previewed === null) return;
      confirm.disabled = true;
      previewButton.disabled = true;
      try {
        const answer = await opts.send(previewed, false);
        const line = opts.sent(answer);
        result.replaceChildren(h("p", { "data-sent": "" }, line));
        say(line);
      } catch (err) {
        result.replaceChildren(h("p", { class: "alert", role: "alert" }, `Refused: ${err.message}`));
        say(`${opts.title} failed: ${err.message}`, true);
      } finally {
        previewButton.disabled = false;
        previewed = null;
      }
    });
    close.addEventListener("click", () => dialog.close());
    // Closed: the dialog goes, and the page renders again from the API (what it touched shows).
    dialog.addEventListener("close", () => {
      dialog.remove();
      const render = pages[page];
      if (render) render().catch((err) => say(`Could not load data from the API: ${err.message}`, true));
    });
    document.body.append(dialog);
    dialog.showModal();
    (opts.noReason ? previewButton : reason).focus();
    return dialog;
  }

  // A dry run's "what it leaves out, and why" as a list (the first of them; the count says all).
  function leftOutList(label, items) {
    if (!items.length) return null;
    return h("div", {}, h("p", {}, label), h("ul", { class: "slots", "data-left-out": "" }, items.map((item) => h("li", {}, item))));
  }

  function done() {
    content.setAttribute("aria-busy", "false");
  }

  function show(...nodes) {
    content.replaceChildren(...nodes.flat().filter(Boolean));
    done();
  }

  // The run page (or, with json, the API's answer for it); run ids hold "@", ":" and "/".
  function runHref(runId, json) {
    return json ? `/v1/runs/${enc(runId)}` : `/ui/runs/${enc(runId)}`;
  }

  function runLink(runId) {
    if (!runId) return "–";
    return h("a", { href: runHref(runId), class: "mono" }, runId);
  }

  function attemptList(run) {
    const attempts = run.attempts || [];
    if (!attempts.length) return text(run.attempt);
    return h("ol", { class: "slots" }, attempts.map((a) => h("li", {},
      badge(a.outcome), ` #${text(a.attempt)} · fence ${text(a.fence_token)} · ${text(a.owner)}`,
      a.error ? ` · ${errorText(a.error)}` : "")));
  }

  return {
    body, page, subject, content, COLORS, RANGES, h, append, svg, enc, ApiError, get, post, request, withQuery, allPages, say, fmtTime, text, badge, specText, durationText, scheduleState, slotValue, slotItem, errorText, started, finished, table, facts, jsonBlock, jsonDetails, field, queryParam, command, bulkCommand, previewDialog, leftOutList, done, show, attemptList, runHref, runLink,
    pages,
  };
})();
