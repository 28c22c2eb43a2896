// Vigil console, loaded as <script type="module"> (deferred: the document is parsed
// when this runs). Plain ES modules, no build step; htmx does the partial swaps.

import { initJobForm } from "./job-form.js";
import { initJob } from "./job-page.js";
import { initKeysDialog } from "./keys.js";
import { localize } from "./times.js";
import { followTimelines } from "./timeline.js";
import { initWorkspace } from "./workspace.js";

// A button that shows or hides the row it controls (restart records' details).
document.addEventListener("click", (e) => {
  const btn = e.target.closest && e.target.closest("[data-toggle-row]");
  if (!btn) return;
  const row = document.getElementById(btn.getAttribute("aria-controls"));
  const open = btn.getAttribute("aria-expanded") !== "true";
  btn.setAttribute("aria-expanded", open ? "true" : "false");
  if (row) row.hidden = !open;
});
// A form that asks first (data-confirm): a listener here, not an onsubmit attribute,
// which the Content-Security-Policy refuses as inline script.
document.addEventListener("submit", (e) => {
  const form = e.target.closest && e.target.closest("form[data-confirm]");
  if (form && !window.confirm(form.getAttribute("data-confirm"))) e.preventDefault();
});
// A table wider than the screen scrolls in its .scroll-x box; one without a link or
// button inside could not be scrolled from the keyboard: such a box becomes a tab
// stop, named by its table's caption or the heading before it (WCAG 2.1.1).
function keyboardScroll(root) {
  root.querySelectorAll(".scroll-x").forEach((box) => {
    const need = box.scrollWidth > box.clientWidth + 1 &&
      !box.querySelector("a[href], button, input, select, textarea, [tabindex]");
    if (need === box.hasAttribute("data-scroll-stop")) return;
    if (!need) {
      ["tabindex", "role", "aria-label", "data-scroll-stop"].forEach((a) => box.removeAttribute(a));
      return;
    }
    const caption = box.querySelector("caption");
    let heading = box.previousElementSibling;
    while (heading && !/^H[1-6]$/.test(heading.tagName)) heading = heading.previousElementSibling;
    const name = (caption || heading || { textContent: "Table" }).textContent.trim();
    box.setAttribute("tabindex", "0");
    box.setAttribute("role", "region");
    box.setAttribute("aria-label", name + " (scrolls sideways)");
    box.setAttribute("data-scroll-stop", "");
  });
}
document.addEventListener("htmx:afterSwap", (e) => { localize(e.target); keyboardScroll(document); });
// A back-test panel (a rule tried on the past before it is kept) shows its 400: the
// refusal names the field, and htmx 2 swaps no 4xx by default.
document.addEventListener("htmx:beforeSwap", (e) => {
  if (e.detail.xhr.status === 400 && e.detail.target.matches("[data-backtest]")) {
    e.detail.shouldSwap = true;
    e.detail.isError = false;
  }
});
window.addEventListener("resize", () => keyboardScroll(document));
keyboardScroll(document);
initKeysDialog();
followTimelines();

localize(document);
setInterval(() => localize(document), 15000);
const switcher = document.querySelector("[data-switcher] select");
if (switcher) {
  // Each option carries its workspace's URL, reversed by the server.
  switcher.addEventListener("change", () => {
    location.href = switcher.selectedOptions[0].getAttribute("data-url");
  });
}
const workspace = document.querySelector("[data-live-workspace]");
if (workspace) initWorkspace(workspace);
const jobForm = document.getElementById("job-form");
if (jobForm) initJobForm(jobForm);
const job = document.getElementById("job");
if (job) initJob(job);
const errs = document.getElementById("form-errors");
if (errs) {
  const first = document.querySelector(".has-error input, .has-error select, .has-error textarea");
  (first || errs).focus();
}
