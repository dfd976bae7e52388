// slotflow dashboard: mark the current page in the navigation and render it.
"use strict";

(() => {
  const { page, pages, h, show, say } = window.slotflowUi;
  const navKey = { schedule: "schedules", workflow: "workflows", run: "schedules" }[page] || page;
  const current = document.querySelector(`nav a[data-nav="${navKey}"]`);
  if (current) current.setAttribute("aria-current", "page");
  const render = pages[page];
  if (render) {
    render().catch((err) => {
      show(h("p", { class: "empty" }, "Could not load this page."));
      say(`Could not load data from the API: ${err.message}`, true);
    });
  }
})();
