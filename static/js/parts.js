// Server-rendered parts of a page, fetched again with htmx when the socket says
// they changed. Each part's URL is in the page (rendered by Django's {% url %}).

const timers = {};

export function debounce(key, ms, fn) {
  clearTimeout(timers[key]);
  timers[key] = setTimeout(fn, ms);
}

export function swap(url, target, how) {
  if (!window.htmx || !url || !document.querySelector(target)) return;
  // Each part is its own request source: htmx drops a second request from a
  // source that has one in flight, and the default source is <body>.
  window.htmx.ajax("GET", url, { source: target, target: target, swap: how || "innerHTML" });
}

const lastSwap = {};

/** Refresh the element #id from its own data-src: at once when it was not refreshed
    in the last `ms`, else once at the end of that window. A throttle, not a debounce:
    messages arriving in a burst (a restart's events) cannot keep postponing it, so a
    part shows what the message that triggered it describes. */
export function refreshPart(id, ms) {
  const go = () => {
    lastSwap[id] = Date.now();
    const el = document.getElementById(id);
    if (el) swap(el.getAttribute("data-src"), "#" + id);
  };
  const wait = (lastSwap[id] || 0) + ms - Date.now();
  if (wait <= 0 && !timers["part-" + id]) { go(); return; }
  if (timers["part-" + id]) return;  // a refresh is already due at the end of the window
  timers["part-" + id] = setTimeout(() => { delete timers["part-" + id]; go(); }, Math.max(wait, 0));
}
