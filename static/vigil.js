/* Vigil console: times in the viewer's timezone, live updates over WebSockets,
   the log view (batched, windowed, pause/resume, resume by byte offset).
   No build step; htmx does the server-rendered partial swaps. */
(function () {
  "use strict";

  var MAX_LINES = 2000;        // line nodes kept in the page
  var MAX_PENDING = 50000;     // lines held while paused

  // ---- times -------------------------------------------------------------
  function pad(n) { return (n < 10 ? "0" : "") + n; }
  function fmtAbs(d) {
    var now = new Date();
    var time = pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds());
    if (d.toDateString() === now.toDateString()) return time;
    return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " + time;
  }
  function ago(d) {
    var s = Math.round((Date.now() - d.getTime()) / 1000), future = s < 0, t;
    s = Math.abs(s);
    if (s < 60) t = s + "s";
    else if (s < 3600) t = Math.floor(s / 60) + "m";
    else if (s < 86400) t = Math.floor(s / 3600) + "h " + Math.floor((s % 3600) / 60) + "m";
    else t = Math.floor(s / 86400) + "d " + Math.floor((s % 86400) / 3600) + "h";
    return future ? "in " + t : t + " ago";
  }
  function localize(root) {
    (root || document).querySelectorAll("time[datetime]").forEach(function (el) {
      var d = new Date(el.getAttribute("datetime"));
      if (isNaN(d.getTime())) return;
      el.title = d.toLocaleString(undefined, { year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit", timeZoneName: "short" }) +
        "  ·  " + d.toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
      if (el.hasAttribute("data-abs")) el.textContent = fmtAbs(d);
      else if (el.hasAttribute("data-ago")) el.textContent = ago(d);
    });
  }
  function timeEl(iso) {
    var el = document.createElement("time");
    el.setAttribute("datetime", iso);
    el.setAttribute("data-abs", "");
    localize({ querySelectorAll: function () { return [el]; } });
    return el;
  }

  // ---- a WebSocket that comes back -----------------------------------------
  var banner = null, bannerTimer = null;
  function showBanner(text, keep) {
    banner = banner || document.getElementById("live-banner");
    if (!banner) return;
    clearTimeout(bannerTimer);
    banner.textContent = text;
    banner.hidden = false;
    if (!keep) bannerTimer = setTimeout(function () { banner.hidden = true; }, 2500);
  }

  // Close codes of monitoring.consumers when access ends while a socket is open.
  var REVOKED = {
    4401: "you logged out or your session ended",
    4403: "you are no longer a member of this workspace",
    4423: "your account was deactivated"
  };

  function Live(path, handlers) {
    this.path = path;
    this.handlers = handlers;
    this.delay = 500;
    this.wasOpen = false;
    this.refused = false;
    this.connect();
  }
  Live.prototype.connect = function () {
    var self = this;
    var url = (location.protocol === "https:" ? "wss://" : "ws://") + location.host + this.path;
    var ws = new WebSocket(url);
    this.ws = ws;
    ws.onopen = function () {
      if (self.wasOpen) showBanner("Live updates are back; nothing was missed.");
      self.wasOpen = true;
      self.delay = 500;
      if (self.handlers.open) self.handlers.open(self);
    };
    ws.onmessage = function (e) {
      var msg;
      try { msg = JSON.parse(e.data); } catch (err) { return; }
      if (msg.type === "revoked") { self.revoked = msg; return; }
      if (self.handlers.message) self.handlers.message(msg, self);
    };
    ws.onclose = function (e) {
      // The server ends a socket whose person lost access (see monitoring.consumers):
      // say why and stay closed, since reconnecting would only be refused.
      if (REVOKED[e.code]) {
        var why = (self.revoked && self.revoked.reason) || REVOKED[e.code];
        showBanner("Live updates stopped: " + why + " (code " + e.code + "). Reload the page or log in again.", true);
        return;
      }
      if (!self.wasOpen && e.code === 1006 && self.refusedOnce) {
        showBanner("Live updates are not available for this page (refused). Reload, or log in again.", true);
        return;
      }
      self.refusedOnce = !self.wasOpen;
      showBanner("Live updates lost — reconnecting…", true);
      setTimeout(function () { self.connect(); }, self.delay);
      self.delay = Math.min(self.delay * 2, 5000);
    };
  };
  Live.prototype.send = function (obj) {
    if (this.ws && this.ws.readyState === 1) this.ws.send(JSON.stringify(obj));
  };

  // ---- htmx helpers ----------------------------------------------------------
  var timers = {};
  function debounce(key, ms, fn) {
    clearTimeout(timers[key]);
    timers[key] = setTimeout(fn, ms);
  }
  function swap(url, target, how) {
    if (!window.htmx || !document.querySelector(target)) return;
    // Each part is its own request source: htmx drops a second request from a
    // source that has one in flight, and the default source is <body>.
    window.htmx.ajax("GET", url, { source: target, target: target, swap: how || "innerHTML" });
  }

  // ---- job list and dashboard --------------------------------------------------
  function initWorkspace(el) {
    var slug = el.getAttribute("data-live-workspace");
    new Live("/ws/workspaces/" + slug + "/", {
      message: function (msg) {
        if (msg.type !== "status" && msg.type !== "event") return;
        var dash = document.getElementById("dashboard");
        if (dash) {
          debounce("dash", 400, function () { swap(dash.getAttribute("data-refresh"), "#dashboard"); });
          return;
        }
        if (msg.type !== "status") return;
        var row = document.getElementById("job-" + msg.job_id);
        if (row) {
          debounce("row" + msg.job_id, 250, function () { swap(row.getAttribute("data-job-row"), "#job-" + msg.job_id, "outerHTML"); });
        } else if (document.getElementById("job-table")) {
          debounce("table", 500, function () { swap(location.pathname + location.search, "#job-table", "outerHTML"); });
        }
      }
    });
  }

  // ---- the log view -------------------------------------------------------------
  var ANSI = /\x1b\[([0-9;]*)m/g;
  function renderText(parent, text) {
    // A progress bar redrawn with \r shows its last state.
    var cr = text.lastIndexOf("\r", text.length - 2);
    if (cr >= 0) text = text.slice(cr + 1);
    text = text.replace(/\r$/, "");
    if (text.indexOf("\x1b") < 0) { parent.textContent = text; return; }
    var last = 0, cls = [], m;
    ANSI.lastIndex = 0;
    while ((m = ANSI.exec(text)) !== null) {
      if (m.index > last) addSpan(parent, text.slice(last, m.index), cls);
      cls = sgr(m[1], cls);
      last = ANSI.lastIndex;
    }
    if (last < text.length) addSpan(parent, text.slice(last), cls);
  }
  function addSpan(parent, s, cls) {
    s = s.replace(/\x1b\[[0-9;?]*[A-Za-z]/g, "");
    if (!s) return;
    if (!cls.length) { parent.appendChild(document.createTextNode(s)); return; }
    var span = document.createElement("span");
    span.className = cls.join(" ");
    span.textContent = s;
    parent.appendChild(span);
  }
  // SGR codes to classes; codes we do not render (and the arguments of 38/48
  // extended colours) are dropped, never shown as text.
  function sgr(codes, cls) {
    var out = cls.slice();
    var list = (codes || "0").split(";");
    function drop(re) { out = out.filter(function (k) { return !re.test(k); }); }
    for (var i = 0; i < list.length; i++) {
      var c = parseInt(list[i] || "0", 10);
      if (c === 0) out = [];
      else if (c === 1) out.push("a-bold");
      else if (c === 2) out.push("a-dim");
      else if (c === 3) out.push("a-italic");
      else if (c === 4) out.push("a-under");
      else if (c === 22) drop(/^a-(bold|dim)$/);
      else if (c === 23) drop(/^a-italic$/);
      else if (c === 24) drop(/^a-under$/);
      else if ((c >= 30 && c <= 37) || (c >= 90 && c <= 97)) { drop(/^a-\d/); out.push("a-" + (c === 37 ? 97 : c === 30 ? 90 : c)); }
      else if (c === 39) drop(/^a-\d/);
      else if ((c >= 40 && c <= 47) || (c >= 100 && c <= 107)) { drop(/^a-bg/); out.push("a-bg" + (c >= 100 ? c - 60 : c)); }
      else if (c === 49) drop(/^a-bg/);
      else if (c === 38 || c === 48) { i += list[i + 1] === "5" ? 2 : list[i + 1] === "2" ? 4 : 0; }
    }
    return out;
  }

  // ---- timestamps of lines ---------------------------------------------------------
  // A line that starts with an ISO time shows that time; others show when they arrived.
  // A time without a zone is taken as UTC (what training launchers usually write).
  var LEADING_ISO = /^\[?(\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?)(Z|[+-]\d\d:?\d\d)?/;
  function lineTime(text, arrived) {
    var m = LEADING_ISO.exec(text);
    if (m) {
      var iso = m[1].replace(" ", "T").replace(",", ".").replace(/(\.\d{3})\d+/, "$1") + (m[2] || "Z");
      var d = new Date(iso);
      if (!isNaN(d.getTime())) return { ms: d.getTime(), from: "written in the line" };
    }
    return { ms: arrived, from: "arrived" };
  }
  function pad3(n) { return n < 10 ? "00" + n : n < 100 ? "0" + n : "" + n; }
  function fmtLineTime(ms, mode) {
    var d = new Date(ms);
    if (mode === "utc") return d.toISOString().slice(11, 23) + "Z";
    return pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds()) + "." + pad3(d.getMilliseconds());
  }

  function LogView(root, opts) {
    this.root = root;
    this.opts = opts;
    this.queue = [];
    this.pending = [];
    this.skipped = 0;
    this.paused = false;
    this.count = 0;
    this.lastAttempt = null;
    this.programmatic = false;
    this.target = null;       // {i: instance, n: line} to highlight when it arrives
    this.times = "off";       // off | local | utc
    this.bar = document.getElementById("paused-bar");
    this.barText = document.getElementById("paused-text");
    var self = this;
    root.addEventListener("scroll", function () {
      if (self.programmatic) { self.programmatic = false; return; }
      var atBottom = root.scrollHeight - root.scrollTop - root.clientHeight < 6;
      if (!atBottom && !self.paused) self.pause();
      else if (atBottom && self.paused) self.resume();
    });
    root.addEventListener("keydown", function (e) {
      if (e.key === "End") { e.preventDefault(); self.resume(); }
    });
    document.getElementById("log-resume").addEventListener("click", function () { self.resume(); root.focus(); });
  }
  LogView.prototype.clear = function () {
    this.root.textContent = "";
    this.queue = []; this.pending = []; this.count = 0; this.skipped = 0; this.lastAttempt = null;
    this.paused = false;
    this.bar.hidden = true;
  };
  LogView.prototype.add = function (msg) {
    var items = [];
    if (this.opts.following() && this.lastAttempt !== null && msg.attempt !== this.lastAttempt) {
      items.push({ sep: "— attempt " + msg.attempt + " —" });
    }
    this.lastAttempt = msg.attempt;
    var now = Date.now(), first = typeof msg.line === "number" ? msg.line : null, hit = -1;
    for (var i = 0; i < msg.lines.length; i++) {
      var it = { i: msg.instance, a: msg.attempt, t: msg.lines[i], n: first === null ? null : first + i, at: now };
      if (this.target && it.n === this.target.n && it.i === this.target.i) { it.mark = true; hit = items.length; this.target = null; }
      items.push(it);
    }
    if (hit >= 0 && !this.paused) {
      // Show the target with some lines after it, then hold the rest as if paused.
      var shown = items.slice(0, hit + 300);
      Array.prototype.push.apply(this.queue, shown);
      this.pause();
      items = items.slice(hit + 300);
      this.schedule();
    }
    if (this.paused) {
      Array.prototype.push.apply(this.pending, items);
      if (this.pending.length > MAX_PENDING) {
        this.skipped += this.pending.length - MAX_PENDING;
        this.pending = this.pending.slice(-MAX_PENDING);
      }
      this.barText.textContent = "Paused, " + (this.pending.length + this.skipped).toLocaleString() + " new line" +
        (this.pending.length + this.skipped === 1 ? "" : "s");
      return;
    }
    Array.prototype.push.apply(this.queue, items);
    this.schedule();
  };
  LogView.prototype.schedule = function () {
    if (this.scheduled) return;
    this.scheduled = true;
    var self = this;
    requestAnimationFrame(function () { self.scheduled = false; self.flush(); });
  };
  LogView.prototype.lineHref = function (it) {
    return location.pathname + "?attempt=" + it.a + "&instance=" + encodeURIComponent(it.i) + "#L" + it.n;
  };
  LogView.prototype.setTime = function (ln) {
    var ts = ln.firstChild && ln.firstChild.nextSibling;
    if (!ts || ts.className !== "ts") return;
    if (this.times === "off") { ts.textContent = ""; return; }
    if (!ln._time) ln._time = lineTime(ln._text, ln._at);
    ts.textContent = fmtLineTime(ln._time.ms, this.times);
    ts.title = (this.times === "utc" ? "UTC, " : "local time, ") + ln._time.from;
  };
  LogView.prototype.setTimes = function (mode) {
    this.times = mode;
    this.root.classList.toggle("ts-on", mode !== "off");
    var self = this;
    this.root.querySelectorAll(".ln").forEach(function (ln) { if (ln._text !== undefined) self.setTime(ln); });
  };
  LogView.prototype.highlight = function (ln) {
    var old = document.getElementById("log-target");
    if (old) { old.removeAttribute("id"); old.classList.remove("hl"); }
    ln.classList.add("hl");
    ln.id = "log-target";
  };
  LogView.prototype.flush = function () {
    var items = this.queue;
    this.queue = [];
    if (!items.length) return;
    if (items.length > MAX_LINES) items = items.slice(-MAX_LINES);
    var empty = document.getElementById("log-empty");
    if (empty) empty.remove();
    var frag = document.createDocumentFragment();
    var mark = null;
    for (var k = 0; k < items.length; k++) {
      var it = items[k], ln = document.createElement("div");
      if (it.sep) { ln.className = "ln sep"; ln.textContent = it.sep; }
      else {
        ln.className = "ln";
        // The line number is a link to the line; tabindex -1 keeps the log one tab stop.
        var n = document.createElement("a"); n.className = "n"; n.tabIndex = -1;
        if (it.n !== null) { n.textContent = it.n; n.href = this.lineHref(it); }
        var ts = document.createElement("span"); ts.className = "ts";
        var g = document.createElement("span"); g.className = "g"; g.textContent = it.i;
        var t = document.createElement("span"); t.className = "t";
        renderText(t, it.t);
        if (/\b(error|traceback|exception|fatal)\b/i.test(it.t)) t.classList.add("err");
        ln.appendChild(n); ln.appendChild(ts); ln.appendChild(g); ln.appendChild(t);
        ln._text = t.textContent; ln._at = it.at; ln._i = it.i; ln._n = it.n;
        if (this.times !== "off") this.setTime(ln);
        if (this.highlightNext || it.mark) { this.highlightNext = false; ln.classList.add("hl"); ln.id = it.mark ? "log-target" : "classified-line"; mark = ln; }
      }
      frag.appendChild(ln);
    }
    this.root.appendChild(frag);
    this.count += items.length;
    var extra = this.count - MAX_LINES;
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
  };
  LogView.prototype.toBottom = function () {
    var target = this.root.scrollHeight - this.root.clientHeight;
    if (Math.abs(this.root.scrollTop - target) > 1) {
      this.programmatic = true;
      this.root.scrollTop = target;
    }
  };
  LogView.prototype.pause = function () {
    this.paused = true;
    this.barText.textContent = "Paused, 0 new lines";
    this.bar.hidden = false;
  };
  LogView.prototype.resume = function () {
    if (!this.paused) { this.toBottom(); return; }
    this.paused = false;
    this.bar.hidden = true;
    if (this.skipped) this.queue.push({ sep: "… " + this.skipped.toLocaleString() + " lines skipped while paused; download the log for all of them" });
    Array.prototype.push.apply(this.queue, this.pending);
    this.pending = []; this.skipped = 0;
    this.flush();
    this.toBottom();
  };

  // ---- the job page ---------------------------------------------------------------
  function initJob(el) {
    var jobId = el.getAttribute("data-job");
    var lastEvent = parseInt(el.getAttribute("data-last-event") || "0", 10);
    var status = el.getAttribute("data-status");
    var currentAttempt = parseInt(el.getAttribute("data-attempt") || "0", 10);
    var partsBase = el.getAttribute("data-parts").replace(/header\/$/, "");
    var attemptSel = document.getElementById("log-attempt");
    var instanceSel = document.getElementById("log-instance");
    var download = document.getElementById("log-download");
    var archive = document.getElementById("log-archive");
    var logRoot = document.getElementById("logview");
    var offsets = {}, nextLines = {};
    var live = null;
    var params = new URL(location.href).searchParams;
    var from = parseInt(params.get("from") || "", 10);
    var notice = document.getElementById("log-notice");
    var pendingTarget = null;   // sent with the next subscription: {instance, line|offset|first_error}
    var targetWhat = "";
    var failures = [];
    try { failures = JSON.parse(logRoot.getAttribute("data-failures") || "[]"); } catch (err) { failures = []; }
    var view = new LogView(logRoot, {
      following: function () { return !attemptSel.value; },
      marked: function (ln) {
        if (ln._n === null || ln._n === undefined) return;
        var u = new URL(location.href);
        u.hash = "L" + ln._n;
        history.replaceState(null, "", u.toString());
        if (targetWhat) say(targetWhat + ": line " + ln._n + " of " + ln._i + ".");
        targetWhat = "";
      }
    });
    function say(text) { notice.textContent = text; }

    function logSpec() {
      var spec = {
        attempt: attemptSel.value ? parseInt(attemptSel.value, 10) : null,
        instances: instanceSel.value ? [instanceSel.value] : null,
        offsets: offsets,
        lines: nextLines
      };
      if (pendingTarget) spec.target = pendingTarget;
      return spec;
    }
    function updateDownload() {
      var inst = instanceSel.value;
      if (!inst) { download.hidden = true; updateArchive(); return; }
      download.href = logRoot.getAttribute("data-download").replace("ATTEMPT", attemptSel.value || currentAttempt).replace("INSTANCE", encodeURIComponent(inst));
      download.textContent = "Download " + inst;
      download.hidden = false;
      updateArchive();
    }
    function updateArchive() {
      var n = attemptSel.value || currentAttempt;
      if (!n) { archive.hidden = true; return; }
      archive.href = logRoot.getAttribute("data-archive").replace("ATTEMPT", n);
      archive.textContent = "Download attempt " + n + " (zip)";
      archive.hidden = false;
    }
    function updateUrl(hash) {
      var u = new URL(location.href);
      // Always attempt, then instance: one line has one permalink.
      ["attempt", "instance", "from"].forEach(function (k) { u.searchParams.delete(k); });
      if (attemptSel.value) u.searchParams.set("attempt", attemptSel.value);
      if (instanceSel.value) u.searchParams.set("instance", instanceSel.value);
      u.hash = hash || "";
      history.replaceState(null, "", u.toString());
    }
    function resubscribe(hash) {
      offsets = {}; nextLines = {};
      view.clear();
      view.target = null;
      updateUrl(hash);
      updateDownload();
      if (live) live.send(Object.assign({ type: "logs" }, logSpec()));
    }
    function choose(sel, value) {
      if (value && !Array.prototype.some.call(sel.options, function (o) { return o.value === String(value); })) {
        var o = document.createElement("option"); o.value = value;
        o.textContent = sel === attemptSel ? "Attempt " + value : value;
        sel.appendChild(o);
      }
      sel.value = value ? String(value) : "";
    }
    // Open the log of one instance at a target: {line: N}, {offset: byte}, {first_error: true}.
    function openAt(attempt, instance, target, what) {
      choose(attemptSel, attempt);
      choose(instanceSel, instance);
      pendingTarget = Object.assign({ instance: instance }, target);
      targetWhat = what;
      resubscribe(target.line ? "L" + target.line : "");
      logRoot.focus();
    }
    attemptSel.addEventListener("change", function () { pendingTarget = null; say(""); resubscribe(); });
    instanceSel.addEventListener("change", function () { pendingTarget = null; say(""); resubscribe(); });
    // A link may name an attempt or instance the page did not list (an older attempt's
    // instance): keep it, and let the server say whether it exists.
    if (params.get("attempt") && /^\d+$/.test(params.get("attempt")) && !attemptSel.value) choose(attemptSel, params.get("attempt"));
    if (params.get("instance") && !instanceSel.value) choose(instanceSel, params.get("instance"));
    updateDownload();
    var lineHash = /^#L(\d+)$/.exec(location.hash);
    if (lineHash) {
      if (instanceSel.value) {
        pendingTarget = { instance: instanceSel.value, line: parseInt(lineHash[1], 10) };
        targetWhat = "Linked line";
      } else {
        say("Line " + lineHash[1] + " of which instance? A line link names one (instance=…); choose one above.");
      }
    } else if (!isNaN(from) && from >= 0 && attemptSel.value && instanceSel.value) {
      offsets[attemptSel.value + ":" + instanceSel.value] = from;
      view.highlightNext = true;
    }
    window.addEventListener("hashchange", function () {
      var m = /^#L(\d+)$/.exec(location.hash);
      if (m && instanceSel.value) openAt(attemptSel.value || currentAttempt, instanceSel.value, { line: parseInt(m[1], 10) }, "Linked line");
    });
    // A click on a line number: that line's permalink goes into the address bar.
    logRoot.addEventListener("click", function (e) {
      var a = e.target.closest && e.target.closest("a.n");
      if (!a || e.ctrlKey || e.metaKey || e.shiftKey || e.button !== 0) return;
      e.preventDefault();
      history.replaceState(null, "", a.href);
      view.highlight(a.parentNode);
      if (!view.paused) view.pause();
      say("Line " + a.textContent + " of " + a.parentNode._i + " is in the address bar: copy it to share this line.");
    });

    // "e": the line the classifier used for the shown attempt's latest failure,
    // else the first error-looking line of the chosen (or the failed) instance.
    function jumpToError() {
      var attempt = parseInt(attemptSel.value || currentAttempt, 10);
      var rows = Array.prototype.filter.call(document.querySelectorAll("#part-restarts tr[data-failure-attempt]"), function (r) {
        return parseInt(r.getAttribute("data-failure-attempt"), 10) === attempt;
      });
      if (rows.length) {
        var r = rows[rows.length - 1];
        openAt(attempt, r.getAttribute("data-failure-instance"), { offset: parseInt(r.getAttribute("data-failure-offset"), 10) },
          "The line the classifier used for attempt " + attempt + "'s failure");
        return;
      }
      var failed = failures.filter(function (f) { return f.attempt === attempt; });
      var instance = instanceSel.value || (failed.length ? failed[failed.length - 1].instance : "");
      var all = document.querySelectorAll("#part-restarts tr[data-failure-attempt]");
      if (!instance && all.length) {
        // Nothing in this attempt (a restarted job runs cleanly): the failure that restarted it.
        var last = all[all.length - 1], was = parseInt(last.getAttribute("data-failure-attempt"), 10);
        openAt(was, last.getAttribute("data-failure-instance"), { offset: parseInt(last.getAttribute("data-failure-offset"), 10) },
          "Attempt " + attempt + " has no failure; the line the classifier used for attempt " + was + "'s");
        return;
      }
      if (!instance) {
        say("Nothing to jump to: attempt " + attempt + " has no classified failure. Choose an instance and press e to find its first error line.");
        return;
      }
      openAt(attempt, instance, { first_error: true }, "First error line");
    }
    document.getElementById("log-first-error").addEventListener("click", jumpToError);
    var timesBtn = document.getElementById("log-times");
    timesBtn.addEventListener("click", function () {
      var next = { off: "local", local: "utc", utc: "off" }[view.times];
      view.setTimes(next);
      timesBtn.textContent = "Times: " + (next === "utc" ? "UTC" : next);
      timesBtn.setAttribute("aria-pressed", next === "off" ? "false" : "true");
    });
    document.getElementById("log-wrap").addEventListener("click", function () {
      var on = logRoot.classList.toggle("wrap");
      this.setAttribute("aria-pressed", on ? "true" : "false");
    });
    // Search in the shown lines: "k of N", Enter / Shift+Enter, "/" to focus, Esc to clear.
    var search = document.getElementById("log-search");
    var searchStatus = document.getElementById("log-search-status");
    var matches = [], current = -1;
    function runSearch() {
      logRoot.querySelectorAll(".ln.match").forEach(function (el) { el.classList.remove("match", "cur"); });
      matches = []; current = -1;
      search.removeAttribute("aria-invalid");
      var q = search.value;
      if (!q) { searchStatus.textContent = ""; return; }
      var re;
      try { re = new RegExp(q, "i"); } catch (err) {
        searchStatus.textContent = "Not a valid pattern: " + err.message.replace(/^Invalid regular expression: /, "");
        search.setAttribute("aria-invalid", "true");
        return;
      }
      logRoot.querySelectorAll(".ln").forEach(function (el) {
        var t = el.querySelector(".t");
        if (t && re.test(t.textContent)) { el.classList.add("match"); matches.push(el); }
      });
      searchStatus.textContent = matches.length ? matches.length + " match" + (matches.length === 1 ? "" : "es") : "No match in the shown lines";
    }
    function step(by) {
      if (!matches.length || !matches[0].isConnected) runSearch();
      if (!matches.length) return;
      current = (current + by + matches.length) % matches.length;
      matches.forEach(function (el) { el.classList.remove("cur"); });
      var el = matches[current];
      el.classList.add("cur");
      if (!view.paused) view.pause();
      view.programmatic = true;
      logRoot.scrollTop = el.offsetTop - logRoot.clientHeight / 2;
      searchStatus.textContent = (current + 1) + " of " + matches.length;
    }
    search.addEventListener("input", function () { debounce("search", 150, runSearch); });
    search.addEventListener("keydown", function (e) {
      if (e.key === "Enter") { e.preventDefault(); step(e.shiftKey ? -1 : 1); }
      else if (e.key === "Escape") { search.value = ""; runSearch(); logRoot.focus(); }
    });
    document.addEventListener("keydown", function (e) {
      var tag = (e.target.tagName || "").toLowerCase();
      if (tag === "input" || tag === "textarea" || tag === "select" || e.ctrlKey || e.metaKey || e.altKey) return;
      if (e.key === "w") document.getElementById("log-wrap").click();
      else if (e.key === "t") timesBtn.click();
      else if (e.key === "e") { e.preventDefault(); jumpToError(); }
      else if (e.key === "/") { e.preventDefault(); search.focus(); search.select(); }
    });
    document.addEventListener("click", function (e) {
      var a = e.target.closest && e.target.closest("[data-show-instance]");
      if (!a) return;
      e.preventDefault();
      instanceSel.value = a.getAttribute("data-show-instance");
      attemptSel.value = "";
      pendingTarget = null;
      resubscribe();
      logRoot.focus();
      logRoot.scrollIntoView({ block: "nearest" });
    });

    function refresh(parts) {
      parts.forEach(function (p) {
        debounce("part-" + p, 300, function () { swap(partsBase + p + "/", "#part-" + p); });
      });
    }
    function addEvent(msg) {
      if (document.getElementById("ev-" + msg.id)) return;
      var list = document.getElementById("events");
      var empty = document.getElementById("events-empty");
      if (empty) empty.remove();
      var li = document.createElement("li");
      li.className = "ev ev-" + msg.level;
      li.id = "ev-" + msg.id;
      li.setAttribute("data-id", msg.id);
      var lvl = document.createElement("span");
      lvl.className = "lvl lvl-" + msg.level;
      lvl.title = msg.level;
      lvl.textContent = msg.level === "error" ? "✕" : msg.level === "warning" ? "!" : "i";
      li.appendChild(lvl);
      li.appendChild(document.createTextNode(" "));
      li.appendChild(timeEl(msg.created_at));
      var type = document.createElement("span"); type.className = "ev-type"; type.textContent = " " + msg.label;
      li.appendChild(type);
      if (msg.attempt) { var a = document.createElement("span"); a.className = "muted"; a.textContent = " a" + msg.attempt; li.appendChild(a); }
      if (msg.instance) { var n = document.createElement("span"); n.className = "muted"; n.textContent = " " + msg.instance; li.appendChild(n); }
      var m = document.createElement("span"); m.className = "ev-msg"; m.textContent = " " + msg.message;
      li.appendChild(m);
      var near = list.scrollHeight - list.scrollTop - list.clientHeight < 30;
      list.appendChild(li);
      if (near) list.scrollTop = list.scrollHeight;
    }

    live = new Live(el.getAttribute("data-ws"), {
      open: function (sock) {
        sock.send({ type: "hello", after_event: lastEvent, logs: logSpec() });
      },
      message: function (msg) {
        if (msg.type === "log") {
          var key = msg.attempt + ":" + msg.instance;
          var have = offsets[key];
          if (have !== undefined && msg.next_offset <= have) return;  // already shown
          offsets[key] = msg.next_offset;
          if (typeof msg.next_line === "number") nextLines[key] = msg.next_line;
          view.add(msg);
        } else if (msg.type === "log_target") {
          if (!pendingTarget || msg.instance !== pendingTarget.instance) return;
          var asked = pendingTarget;
          pendingTarget = null;
          if (msg.line) { view.target = { i: msg.instance, n: msg.line }; return; }
          var what = asked.line ? "Line " + asked.line + " is not in " + msg.instance + "'s log of attempt " + msg.attempt
            : asked.first_error ? "No error line to jump to in " + msg.instance + "'s log of attempt " + msg.attempt
            : "The classified line is not in " + msg.instance + "'s log of attempt " + msg.attempt;
          say(what + (msg.why ? ": " + msg.why + "." : ".") + (msg.missing_instance ? "" : " Showing its end."));
          targetWhat = "";
        } else if (msg.type === "event") {
          addEvent(msg);
          if (msg.event_type === "job_failed" && msg.attempt && msg.payload && msg.payload.instance &&
              !failures.some(function (f) { return f.attempt === msg.attempt && f.instance === msg.payload.instance; })) {
            failures.push({ attempt: msg.attempt, instance: msg.payload.instance });
          }
          if (msg.id > lastEvent) lastEvent = msg.id;
          refresh(["instances", "timeline", "restarts"]);
        } else if (msg.type === "status") {
          if (msg.status !== status) {
            document.getElementById("status-announcer").textContent = "Job status: " + msg.status + (msg.reason ? ". " + msg.reason : "");
            document.title = document.title.replace(status, msg.status);
            status = msg.status;
            el.setAttribute("data-status", status);
            refresh(["header", "instances", "timeline"]);
          }
          if (msg.current_attempt && msg.current_attempt !== currentAttempt) {
            currentAttempt = msg.current_attempt;
            updateArchive();
            var opt = document.createElement("option");
            opt.value = currentAttempt; opt.textContent = "Attempt " + currentAttempt;
            attemptSel.appendChild(opt);
            refresh(["header", "instances", "timeline", "restarts"]);
          }
        } else if (msg.type === "live") {
          // Redis is not answering: logs still stream from files, events may be late.
          showBanner(msg.delayed ? "Live events are delayed: the console cannot reach Redis. Logs keep streaming."
            : "Live events are back; the ones missed meanwhile are listed.", msg.delayed);
        } else if (msg.type === "diagnosis") {
          addEvent({ id: "dg" + msg.id, level: "warning", label: msg.label, created_at: msg.created_at, attempt: msg.attempt, instance: "", message: msg.summary.split("\n")[0] });
          refresh(["diagnoses"]);
        }
      }
    });

    document.addEventListener("htmx:afterSwap", function (e) {
      if (e.target.id !== "part-instances") return;
      // keep the instance choices in step with the current attempt
      var names = Array.prototype.map.call(e.target.querySelectorAll("[data-show-instance]"), function (a) { return a.getAttribute("data-show-instance"); });
      var have = Array.prototype.map.call(instanceSel.options, function (o) { return o.value; });
      names.forEach(function (n) {
        if (have.indexOf(n) < 0) { var o = document.createElement("option"); o.value = n; o.textContent = n; instanceSel.appendChild(o); }
      });
    });
  }

  // ---- wiring ----------------------------------------------------------------------
  document.addEventListener("click", function (e) {
    var btn = e.target.closest && e.target.closest("[data-toggle-row]");
    if (!btn) return;
    var row = document.getElementById(btn.getAttribute("aria-controls"));
    var open = btn.getAttribute("aria-expanded") !== "true";
    btn.setAttribute("aria-expanded", open ? "true" : "false");
    if (row) row.hidden = !open;
  });
  document.addEventListener("htmx:afterSwap", function (e) { localize(e.target); });
  document.addEventListener("keydown", function (e) {
    var tag = (e.target.tagName || "").toLowerCase();
    if (e.key !== "?" || tag === "input" || tag === "textarea" || tag === "select") return;
    var keys = document.getElementById("keys");
    if (keys && keys.showModal && !keys.open) { e.preventDefault(); keys.showModal(); }
  });
  document.addEventListener("DOMContentLoaded", function () {
    localize(document);
    setInterval(function () { localize(document); }, 15000);
    var sw = document.querySelector("[data-switcher] select");
    if (sw) sw.addEventListener("change", function () { location.href = "/workspaces/" + encodeURIComponent(sw.value) + "/"; });
    var ws = document.querySelector("[data-live-workspace]");
    if (ws) initWorkspace(ws);
    var job = document.getElementById("job");
    if (job) initJob(job);
    var errs = document.getElementById("form-errors");
    if (errs) { var first = document.querySelector(".has-error input, .has-error select, .has-error textarea"); (first || errs).focus(); }
  });
  window.vigil = { localize: localize };
})();
