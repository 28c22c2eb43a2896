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

/** Refresh the element #id from its own data-src, at most every `ms`. */
export function refreshPart(id, ms) {
  debounce("part-" + id, ms, () => {
    const el = document.getElementById(id);
    if (el) swap(el.getAttribute("data-src"), "#" + id);
  });
}
