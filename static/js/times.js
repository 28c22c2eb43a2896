// Times in the viewer's timezone: <time datetime> elements rendered by the server
// (the `when` template tag) and the capture times of log lines.

function pad(n) { return (n < 10 ? "0" : "") + n; }
function pad3(n) { return n < 10 ? "00" + n : n < 100 ? "0" + n : "" + n; }

function fmtAbs(d) {
  const now = new Date();
  const time = pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds());
  if (d.toDateString() === now.toDateString()) return time;
  return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " + time;
}

function ago(d) {
  let s = Math.round((Date.now() - d.getTime()) / 1000);
  const future = s < 0;
  let t;
  s = Math.abs(s);
  if (s < 60) t = s + "s";
  else if (s < 3600) t = Math.floor(s / 60) + "m";
  else if (s < 86400) t = Math.floor(s / 3600) + "h " + Math.floor((s % 3600) / 60) + "m";
  else t = Math.floor(s / 86400) + "d " + Math.floor((s % 86400) / 3600) + "h";
  return future ? "in " + t : t + " ago";
}

function localizeOne(el) {
  const d = new Date(el.getAttribute("datetime"));
  if (isNaN(d.getTime())) return;
  el.title = d.toLocaleString(undefined, { year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit", timeZoneName: "short" }) +
    "  ·  " + d.toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
  if (el.hasAttribute("data-abs")) el.textContent = fmtAbs(d);
  else if (el.hasAttribute("data-ago")) el.textContent = ago(d);
}

/** Every <time datetime> under root: local text, and the exact UTC value on hover. */
export function localize(root) {
  (root || document).querySelectorAll("time[datetime]").forEach(localizeOne);
}

/** A <time> for an ISO string, shown as an absolute local time. */
export function timeEl(iso) {
  const el = document.createElement("time");
  el.setAttribute("datetime", iso);
  el.setAttribute("data-abs", "");
  localizeOne(el);
  return el;
}

// A line that starts with an ISO time shows that time; others show when the node
// captured them (`captured`), else when they arrived in the page.
// A time without a zone is taken as UTC (what training launchers usually write).
const LEADING_ISO = /^\[?(\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?)(Z|[+-]\d\d:?\d\d)?/;

export function lineTime(text, arrived, captured) {
  const m = LEADING_ISO.exec(text);
  if (m) {
    const iso = m[1].replace(" ", "T").replace(",", ".").replace(/(\.\d{3})\d+/, "$1") + (m[2] || "Z");
    const d = new Date(iso);
    if (!isNaN(d.getTime())) return { ms: d.getTime(), from: "written in the line" };
  }
  return { ms: arrived, from: captured ? "captured" : "arrived in this page" };
}

export function fmtLineTime(ms, mode) {
  const d = new Date(ms);
  if (mode === "utc") return d.toISOString().slice(11, 23) + "Z";
  return pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds()) + "." + pad3(d.getMilliseconds());
}
