// Search in the shown log lines: "k of N", Enter / Shift+Enter, Esc clears.

import { debounce } from "./parts.js";

/** Wires #log-search to the log view; returns focus() for the "/" key. */
export function initLogSearch(view, logRoot) {
  const search = document.getElementById("log-search");
  const status = document.getElementById("log-search-status");
  let matches = [];
  let current = -1;
  let ranFor = null;  // the query `matches` were found for

  function run() {
    logRoot.querySelectorAll(".ln.match").forEach((el) => el.classList.remove("match", "cur"));
    matches = []; current = -1;
    search.removeAttribute("aria-invalid");
    const q = search.value;
    ranFor = q;
    if (!q) { status.textContent = ""; return; }
    let re;
    try { re = new RegExp(q, "i"); } catch (err) {
      status.textContent = "Not a valid pattern: " + err.message.replace(/^Invalid regular expression: /, "");
      search.setAttribute("aria-invalid", "true");
      return;
    }
    logRoot.querySelectorAll(".ln").forEach((el) => {
      const t = el.querySelector(".t");
      if (t && re.test(t.textContent)) { el.classList.add("match"); matches.push(el); }
    });
    status.textContent = matches.length ? matches.length + " match" + (matches.length === 1 ? "" : "es") : "No match in the shown lines";
  }

  function step(by) {
    // Enter before the typing's debounced run: search now, for what is typed now
    if (search.value !== ranFor || !matches.length || !matches[0].isConnected) run();
    if (!matches.length) return;
    current = (current + by + matches.length) % matches.length;
    matches.forEach((el) => el.classList.remove("cur"));
    const el = matches[current];
    if (el.hidden && el._a !== undefined) view.fold(el._a, false);  // a match in a folded attempt unfolds it
    el.classList.add("cur");
    if (!view.paused) view.pause();
    view.programmatic = true;
    logRoot.scrollTop = el.offsetTop - logRoot.clientHeight / 2;
    status.textContent = (current + 1) + " of " + matches.length;
  }

  // The debounced run is skipped when Enter already searched for the same text: it would
  // clear the match Enter just went to.
  search.addEventListener("input", () => debounce("search", 150, () => { if (search.value !== ranFor) run(); }));
  search.addEventListener("keydown", (e) => {
    if (e.key === "Enter") { e.preventDefault(); step(e.shiftKey ? -1 : 1); }
    else if (e.key === "Escape") { search.value = ""; run(); logRoot.focus(); }
  });
  return () => { search.focus(); search.select(); };
}
