// The log view: lines batched per animation frame, at most MAX_LINES in the page,
// pause while the reader scrolls up (counting what arrives), resume with End.

import { AnsiUp } from "../vendor/ansi_up/ansi_up.js";
import { fmtLineTime, lineTime } from "./times.js";

const MAX_LINES = 2000;      // line nodes kept in the page
const MAX_PENDING = 50000;   // lines held while paused

const ansi = new AnsiUp();

// a before b: capture time, then instance name, then line number.
function before(a, b) {
  if (a._at !== b._at) return a._at < b._at;
  if (a._i !== b._i) return a._i < b._i;
  return (a._n || 0) <= (b._n || 0);
}
ansi.use_classes = true;     // the 16 colours as classes, styled for the dark log in vigil.css

// OSC 8 hyperlinks in job output are shown as their text, never as links: any job
// could otherwise put a link saying one thing and going elsewhere in front of the
// people reading its log (issue 31, finding 7).
ansi.process_hyperlink = (pkt) => ansi.escape_txt_for_html(pkt.text);

// ansi_up writes bold, italic and 24-bit colours as style="" attributes, which the
// Content-Security-Policy (style-src 'self') refuses in markup: classes instead, and
// the colours as data attributes set through the DOM by renderText.
ansi.transform_to_html = function (fragment) {
  let txt = fragment.text;
  if (txt.length === 0) return txt;
  txt = this.escape_txt_for_html(txt);
  const classes = [];
  const data = [];
  for (const k of ["bold", "faint", "italic", "underline"]) if (fragment[k]) classes.push(`ansi-${k}`);
  for (const [c, where] of [[fragment.fg, "fg"], [fragment.bg, "bg"]]) {
    if (!c) continue;
    if (c.class_name !== "truecolor") classes.push(`${c.class_name}-${where}`);
    else data.push(` data-${where}="${c.rgb.map(Number).join(",")}"`);
  }
  if (!classes.length && !data.length) return txt;
  return `<span class="${classes.join(" ")}"${data.join("")}>${txt}</span>`;
};

/** The text of one line into parent: ANSI colours rendered, markup escaped. */
function renderText(parent, text) {
  // A progress bar redrawn with \r shows its last state.
  const cr = text.lastIndexOf("\r", text.length - 2);
  if (cr >= 0) text = text.slice(cr + 1);
  text = text.replace(/\r$/, "");
  if (text.indexOf("\x1b") < 0) { parent.textContent = text; return; }
  parent.innerHTML = ansi.ansi_to_html(text);  // ansi_up escapes the text itself
  parent.querySelectorAll("[data-fg]").forEach((el) => { el.style.color = `rgb(${el.dataset.fg})`; });
  parent.querySelectorAll("[data-bg]").forEach((el) => { el.style.backgroundColor = `rgb(${el.dataset.bg})`; });
  ansi.ansi_to_html("\x1b[0m");               // a colour left open ends with its line
}

export class LogView {
  /** opts.following(): whether the view follows the current attempt;
      opts.marked(line): called when a targeted line is shown. */
  constructor(root, opts) {
    this.root = root;
    this.opts = opts;
    this.queue = [];
    this.pending = [];
    this.skipped = 0;
    this.paused = false;
    this.count = 0;
    this.lastAttempt = null;
    this.seps = {};           // attempt -> its separator line (live, between attempts)
    this.reasons = {};        // attempt -> why it was started (the restart's reason)
    this.folded = new Set();  // attempts whose lines are collapsed under their separator
    this.programmatic = false;
    this.scheduled = false;
    this.highlightNext = false;
    this.target = null;       // {i: instance, n: line} to highlight when it arrives
    this.times = "off";       // off | local | utc
    this.bar = document.getElementById("paused-bar");
    this.barText = document.getElementById("paused-text");
    root.addEventListener("scroll", () => {
      if (this.programmatic) { this.programmatic = false; return; }
      const atBottom = root.scrollHeight - root.scrollTop - root.clientHeight < 6;
      if (!atBottom && !this.paused) this.pause();
      else if (atBottom && this.paused) this.resume();
    });
    root.addEventListener("keydown", (e) => {
      if (e.key === "End") { e.preventDefault(); this.resume(); }
    });
    document.getElementById("log-resume").addEventListener("click", () => { this.resume(); root.focus(); });
  }

  clear() {
    this.root.textContent = "";
    this.queue = []; this.pending = []; this.count = 0; this.skipped = 0; this.lastAttempt = null;
    this.seps = {}; this.folded = new Set();
    this.paused = false;
    this.bar.hidden = true;
  }

  /** A "log" message of the socket: lines of one instance of one attempt. */
  add(msg) {
    let items = [];
    if (this.opts.following() && this.lastAttempt !== null && msg.attempt !== this.lastAttempt) {
      items.push({ sep: true, a: msg.attempt });
    }
    this.lastAttempt = msg.attempt;
    const now = Date.now();
    const first = typeof msg.line === "number" ? msg.line : null;
    let hit = -1;
    for (let i = 0; i < msg.lines.length; i++) {
      // The time the node captured the line (the shim's sidecar), else when it arrived here.
      const cap = msg.times && typeof msg.times[i] === "number";
      const it = { i: msg.instance, a: msg.attempt, t: msg.lines[i], n: first === null ? null : first + i,
                   at: cap ? Math.round(msg.times[i] * 1000) : now, cap: cap };
      if (this.target && it.n === this.target.n && it.i === this.target.i) { it.mark = true; hit = items.length; this.target = null; }
      items.push(it);
    }
    if (hit >= 0 && !this.paused) {
      // Show the target with some lines after it, then hold the rest as if paused.
      this.queue.push(...items.slice(0, hit + 300));
      this.pause();
      items = items.slice(hit + 300);
      this.schedule();
    }
    if (this.paused) {
      this.pending.push(...items);
      if (this.pending.length > MAX_PENDING) {
        this.skipped += this.pending.length - MAX_PENDING;
        this.pending = this.pending.slice(-MAX_PENDING);
      }
      const waiting = this.pending.length + this.skipped;
      this.barText.textContent = "Paused, " + waiting.toLocaleString() + " new line" + (waiting === 1 ? "" : "s");
      return;
    }
    this.queue.push(...items);
    this.schedule();
  }

  /** Why an attempt was started, for its separator; the status message that says so
      may come before or after the attempt's first lines. */
  setAttemptReason(attempt, reason) {
    if (!reason) return;
    this.reasons[attempt] = reason;
    if (this.seps[attempt]) this.sepText(this.seps[attempt], attempt);
  }

  sepText(sep, attempt) {
    const r = this.reasons[attempt];
    const btn = sep.firstChild;
    btn.lastChild.textContent = "Attempt " + attempt + " — restarted" + (r ? ": " + r : "");
  }

  /** A line between two attempts, a button that folds the lines of the attempt below it. */
  attemptSep(attempt) {
    const sep = document.createElement("div");
    sep.className = "ln sep attempt-sep";
    sep.setAttribute("data-attempt-sep", attempt);
    const btn = document.createElement("button");
    btn.type = "button";
    btn.className = "linklike";
    btn.setAttribute("aria-expanded", this.folded.has(attempt) ? "false" : "true");
    const icon = document.createElement("span"); icon.setAttribute("aria-hidden", "true"); icon.className = "fold";
    icon.textContent = this.folded.has(attempt) ? "▸ " : "▾ ";
    btn.appendChild(icon); btn.appendChild(document.createElement("span"));
    btn.addEventListener("click", () => this.fold(attempt, !this.folded.has(attempt)));
    sep.appendChild(btn);
    this.seps[attempt] = sep;
    this.sepText(sep, attempt);
    return sep;
  }

  fold(attempt, folded) {
    if (folded) this.folded.add(attempt); else this.folded.delete(attempt);
    const sep = this.seps[attempt];
    if (sep) {
      sep.firstChild.setAttribute("aria-expanded", folded ? "false" : "true");
      sep.firstChild.firstChild.textContent = folded ? "▸ " : "▾ ";
    }
    this.root.querySelectorAll(".ln").forEach((ln) => { if (ln._a === attempt && ln._text !== undefined) ln.hidden = folded; });
    if (!folded && !this.paused) this.toBottom();
  }

  schedule() {
    if (this.scheduled) return;
    this.scheduled = true;
    requestAnimationFrame(() => { this.scheduled = false; this.flush(); });
  }

  lineHref(it) {
    return location.pathname + "?attempt=" + it.a + "&instance=" + encodeURIComponent(it.i) + "#L" + it.n;
  }

  setTime(ln) {
    const ts = ln.firstChild && ln.firstChild.nextSibling;
    if (!ts || ts.className !== "ts") return;
    if (this.times === "off") { ts.textContent = ""; return; }
    if (!ln._time) ln._time = lineTime(ln._text, ln._at, ln._cap);
    ts.textContent = fmtLineTime(ln._time.ms, this.times);
    ts.title = (this.times === "utc" ? "UTC, " : "local time, ") + ln._time.from;
  }

  setTimes(mode) {
    this.times = mode;
    this.root.classList.toggle("ts-on", mode !== "off");
    this.root.querySelectorAll(".ln").forEach((ln) => { if (ln._text !== undefined) this.setTime(ln); });
  }

  highlight(ln) {
    const old = document.getElementById("log-target");
    if (old) { old.removeAttribute("id"); old.classList.remove("hl"); }
    ln.classList.add("hl");
    ln.id = "log-target";
  }

  flush() {
    let items = this.queue;
    this.queue = [];
    if (!items.length) return;
    if (items.length > MAX_LINES) items = items.slice(-MAX_LINES);
    const empty = document.getElementById("log-empty");
    if (empty) empty.remove();
    const frag = document.createDocumentFragment();
    let mark = null;
    for (const it of items) {
      const ln = document.createElement("div");
      if (it.sep === true) { this.place(frag, this.attemptSep(it.a)); continue; }
      if (it.sep) { ln.className = "ln sep"; ln.textContent = it.sep; }
      else {
        ln.className = "ln";
        // The line number is a link to the line; tabindex -1 keeps the log one tab stop.
        const n = document.createElement("a"); n.className = "n"; n.tabIndex = -1;
        if (it.n !== null) { n.textContent = it.n; n.href = this.lineHref(it); }
        const ts = document.createElement("span"); ts.className = "ts";
        const g = document.createElement("span"); g.className = "g"; g.textContent = it.i;
        const t = document.createElement("span"); t.className = "t";
        renderText(t, it.t);
        if (/\b(error|traceback|exception|fatal)\b/i.test(it.t)) t.classList.add("err");
        ln.appendChild(n); ln.appendChild(ts); ln.appendChild(g); ln.appendChild(t);
        ln._text = t.textContent; ln._at = it.at; ln._i = it.i; ln._n = it.n; ln._cap = it.cap; ln._a = it.a;
        if (this.folded.has(it.a)) ln.hidden = true;
        if (this.times !== "off") this.setTime(ln);
        if (this.highlightNext || it.mark) {
          this.highlightNext = false;
          ln.classList.add("hl");
          ln.id = it.mark ? "log-target" : "classified-line";
          mark = ln;
        }
      }
      this.place(frag, ln);
    }
    this.root.appendChild(frag);
    this.count += items.length;
    let extra = this.count - MAX_LINES;
    while (extra-- > 0 && this.root.firstChild) { this.root.removeChild(this.root.firstChild); this.count--; }
    if (mark) {
      // Opened at one line (a permalink, the classified line): show it and stop following.
      this.programmatic = true;
      this.root.scrollTop = mark.offsetTop - this.root.clientHeight / 3;
      if (!this.paused) this.pause();
      if (this.opts.marked) this.opts.marked(mark);
      return;
    }
    if (!this.paused) this.toBottom();
  }

  /** Lines of several instances in capture-time order (then instance, then line
      number), the same order whichever way they came: live batches per instance, or
      each instance's tail after a reload. A line older than the last one shown goes
      in its place (never past an attempt separator); the rest are appended. */
  place(frag, ln) {
    if (!ln._cap) { frag.appendChild(ln); return; }
    const tail = frag.lastChild || this.root.lastChild;
    if (!tail || !tail._cap || before(tail, ln)) { frag.appendChild(ln); return; }
    this.root.appendChild(frag);  // what is pending goes in first, then the line finds its place
    let at = this.root.lastChild;
    while (at && at.previousSibling && at.previousSibling._cap && !before(at.previousSibling, ln)) at = at.previousSibling;
    if (at && at._cap && !before(at, ln)) this.root.insertBefore(ln, at);
    else this.root.appendChild(ln);
  }

  toBottom() {
    const target = this.root.scrollHeight - this.root.clientHeight;
    if (Math.abs(this.root.scrollTop - target) > 1) {
      this.programmatic = true;
      this.root.scrollTop = target;
    }
  }

  pause() {
    this.paused = true;
    this.barText.textContent = "Paused, 0 new lines";
    this.bar.hidden = false;
  }

  resume() {
    if (!this.paused) { this.toBottom(); return; }
    this.paused = false;
    this.bar.hidden = true;
    if (this.skipped) this.queue.push({ sep: "… " + this.skipped.toLocaleString() + " lines skipped while paused; download the log for all of them" });
    this.queue.push(...this.pending);
    this.pending = []; this.skipped = 0;
    this.flush();
    this.toBottom();
  }
}
