// slotflow dashboard: mark the current page in the navigation, render it, and keep the lists live.
"use strict";

(() => {
  const { page, pages, h, show, say, content, queryParam } = window.slotflowUi;
  // The lists: what an operator leaves open on a screen.
  const LIVE_PAGES = new Set(["schedules", "workflows", "dlq", "downstreams", "calendar"]);
  const navKey = { schedule: "schedules", workflow: "workflows", run: "schedules" }[page] || page;
  const current = document.querySelector(`nav a[data-nav="${navKey}"]`);
  if (current) current.setAttribute("aria-current", "page");
  const render = pages[page];
  if (render) {
    render().then(() => { if (LIVE_PAGES.has(page)) live(render); }).catch((err) => {
      show(h("p", { class: "empty" }, "Could not load this page."));
      say(`Could not load data from the API: ${err.message}`, true);
    });
  }

  // The lists render themselves again every REFRESH seconds (?refresh=N, 2..300, in the URL), with
  // "Updated N s ago" on screen, so a stale list never passes for a current one. The refresh waits
  // while the tab is hidden (nothing is fetched for nobody) and while the operator is in the middle
  // of something on the page: a field in focus, a row selected, a form open, a command in flight.
  function live(renderPage) {
    const every = Math.min(Math.max(Number(queryParam("refresh")) || 10, 2), 300);
    const line = h("p", { class: "live muted", id: "live", "data-live": "" });
    document.getElementById("status").after(line);
    let updated = Date.now();
    let busy = false;
    const editing = () => {
      const active = document.activeElement;
      if (active && content.contains(active) && /^(INPUT|SELECT|TEXTAREA)$/.test(active.tagName)) return true;
      // A preview dialog open (common.js previewDialog): the operator is deciding on what it shows.
      if (document.querySelector("dialog[open]")) return true;
      return Boolean(content.querySelector("input[type=checkbox]:checked, details[open], button:disabled"));
    };
    const tell = () => {
      const age = Math.round((Date.now() - updated) / 1000);
      line.dataset.age = String(age);
      if (document.hidden) line.textContent = `Updated ${age} s ago; refreshing paused while this tab is hidden.`;
      else if (editing()) line.textContent = `Updated ${age} s ago; refreshing paused while you edit.`;
      else line.textContent = `Updated ${age} s ago; refreshes every ${every} s.`;
    };
    const refresh = async () => {
      if (busy || document.hidden || editing()) return;
      busy = true;
      try {
        await renderPage();
        updated = Date.now();
        line.dataset.refreshes = String(Number(line.dataset.refreshes || 0) + 1);
      } catch (err) {
        say(`Could not refresh from the API: ${err.message}`, true);
      } finally {
        busy = false;
        tell();
      }
    };
    let timer = setInterval(refresh, every * 1000);
    const ticker = setInterval(tell, 1000);
    document.addEventListener("visibilitychange", () => {
      clearInterval(timer);
      if (!document.hidden) {
        // Back in view: show what is current at once, then keep the pace.
        refresh();
        timer = setInterval(refresh, every * 1000);
      }
      tell();
    });
    window.addEventListener("pagehide", () => { clearInterval(timer); clearInterval(ticker); });
    tell();
  }
})();
