// The attempt timeline keeps moving between server renders: while an attempt is
// open (svg[data-live]) its right edge is now, so every second the open stage grows
// and every bar, label and restart mark is placed again on the longer scale.
// Times are epoch ms from the server (data-from/data-to/data-at); the server's
// "now" at render (data-now) sets how far the browser's clock is off.

function pad(n) { return (n < 10 ? "0" : "") + n; }

function utcTime(ms) {
  const d = new Date(ms);
  return pad(d.getUTCHours()) + ":" + pad(d.getUTCMinutes()) + ":" + pad(d.getUTCSeconds());
}

function num(el, name) { return parseFloat(el.getAttribute(name)); }

/** Redraw one live timeline at the browser's now (less its offset from the server). */
export function redrawTimeline(svg) {
  if (!svg.hasAttribute("data-live")) return;
  if (svg._skew === undefined) svg._skew = Date.now() - num(svg, "data-now");
  const now = Date.now() - svg._skew;
  const t0 = num(svg, "data-t0");
  const t1 = Math.max(now, num(svg, "data-t1"));
  const span = Math.max(t1 - t0, 1000);
  const px = num(svg, "data-plot-x");
  const pw = num(svg, "data-plot-w");
  const x = (t) => px + pw * ((t - t0) / span);
  svg.querySelectorAll("rect.seg[data-from]").forEach((r) => {
    const from = num(r, "data-from");
    const to = r.hasAttribute("data-open") ? now : num(r, "data-to");
    const x0 = x(from);
    const w = Math.max(x(to) - x0, 2);
    r.setAttribute("x", x0.toFixed(1));
    r.setAttribute("width", w.toFixed(1));
    const label = r.parentNode && r.parentNode.nextElementSibling;
    if (label && label.classList.contains("seg-text")) {
      label.setAttribute("x", (x0 + 4).toFixed(1));
      label.setAttribute("visibility", w > 44 ? "visible" : "hidden");
    }
  });
  svg.querySelectorAll("g.restart-mark[data-at]").forEach((g) => {
    g.setAttribute("transform", "translate(" + x(num(g, "data-at")).toFixed(1) + " 0)");
  });
  const end = svg.querySelector(".tl-end");
  if (end) end.textContent = utcTime(t1) + " (now)";
}

/** Keep every live timeline on the page moving, once a second. */
export function followTimelines() {
  setInterval(() => document.querySelectorAll("svg.timeline[data-live]").forEach(redrawTimeline), 1000);
}
