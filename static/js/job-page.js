// The job page: the log view subscribed over the job's socket (attempt, instance,
// resume by byte offset, open at a line), the monitor log, and the server-rendered
// parts refreshed when the socket reports a change.

import { bindKeys } from "./keys.js";
import { LiveSocket, showBanner } from "./live-socket.js";
import { initLogSearch } from "./log-search.js";
import { LogView } from "./log-view.js";
import { addEvent } from "./monitor-log.js";
import { refreshPart } from "./parts.js";
import { localize } from "./times.js";

// The glyph of each status, as jobs/templatetags/vigil.py STATUS_ICONS draws it.
const STATUS_ICONS = {
  Creating: "○", Queuing: "◔", Pending: "◔", Starting: "◑", Running: "▶", Restarting: "↻",
  Succeeded: "✓", Failed: "✕", Stopping: "◼", Stopped: "■", Lost: "?",
};

function readJson(id, fallback) {
  const el = document.getElementById(id);
  try { return el ? JSON.parse(el.textContent) : fallback; } catch (err) { return fallback; }
}

export function initJob(el) {
  let lastEvent = parseInt(el.getAttribute("data-last-event") || "0", 10);
  let status = el.getAttribute("data-status");
  let currentAttempt = parseInt(el.getAttribute("data-attempt") || "0", 10);
  const attemptSel = document.getElementById("log-attempt");
  const instanceSel = document.getElementById("log-instance");
  const download = document.getElementById("log-download");
  const archive = document.getElementById("log-archive");
  const logRoot = document.getElementById("logview");
  // Download URLs reversed by the server: {archive: {attempt: url}, download: {attempt: {instance: url}}}.
  const urls = readJson("log-urls", { archive: {}, download: {} });
  let offsets = {};
  let nextLines = {};
  let live = null;
  const params = new URL(location.href).searchParams;
  const from = parseInt(params.get("from") || "", 10);
  const notice = document.getElementById("log-notice");
  // Numbers each log subscription; the server echoes it, so batches of a stream the
  // page already left (in flight when it chose another instance) are not shown.
  let sub = 0;
  let pendingTarget = null;   // sent with the next subscription: {instance, line|offset|first_error}
  let targetWhat = "";
  let failures = [];
  try { failures = JSON.parse(logRoot.getAttribute("data-failures") || "[]"); } catch (err) { failures = []; }
  const view = new LogView(logRoot, {
    following: () => !attemptSel.value,
    marked: (ln) => {
      if (ln._n === null || ln._n === undefined) return;
      const u = new URL(location.href);
      u.hash = "L" + ln._n;
      history.replaceState(null, "", u.toString());
      if (targetWhat) say(targetWhat + ": line " + ln._n + " of " + ln._i + ".");
      targetWhat = "";
    },
  });
  function say(text) { notice.textContent = text; }

  function logSpec() {
    const spec = {
      attempt: attemptSel.value ? parseInt(attemptSel.value, 10) : null,
      instances: instanceSel.value ? [instanceSel.value] : null,
      offsets: offsets,
      lines: nextLines,
      sub: sub,
    };
    if (pendingTarget) spec.target = pendingTarget;
    return spec;
  }
  function updateDownload() {
    const inst = instanceSel.value;
    const href = inst && (urls.download[attemptSel.value || currentAttempt] || {})[inst];
    const withTimes = document.getElementById("log-download-times");
    if (!href) { download.hidden = true; withTimes.hidden = true; updateArchive(); return; }
    download.href = href;
    download.textContent = "Download " + inst;
    download.hidden = false;
    withTimes.href = href + "?times=1";  // the server's URL, with the capture time before each line
    withTimes.hidden = false;
    updateArchive();
  }
  function updateArchive() {
    const n = attemptSel.value || currentAttempt;
    const href = n && urls.archive[n];
    if (!href) { archive.hidden = true; return; }
    archive.href = href;
    archive.textContent = "Download attempt " + n + " (zip)";
    archive.hidden = false;
  }
  function updateUrl(hash) {
    const u = new URL(location.href);
    // Always attempt, then instance: one line has one permalink.
    ["attempt", "instance", "from"].forEach((k) => u.searchParams.delete(k));
    if (attemptSel.value) u.searchParams.set("attempt", attemptSel.value);
    if (instanceSel.value) u.searchParams.set("instance", instanceSel.value);
    u.hash = hash || "";
    history.replaceState(null, "", u.toString());
  }
  function resubscribe(hash) {
    sub += 1;
    offsets = {}; nextLines = {};
    view.clear();
    view.target = null;
    updateUrl(hash);
    updateDownload();
    if (live) live.send(Object.assign({ type: "logs" }, logSpec()));
  }
  function choose(sel, value) {
    if (value && !Array.prototype.some.call(sel.options, (o) => o.value === String(value))) {
      const o = document.createElement("option"); o.value = value;
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
  attemptSel.addEventListener("change", () => { pendingTarget = null; say(""); resubscribe(); });
  instanceSel.addEventListener("change", () => { pendingTarget = null; say(""); resubscribe(); });
  // A link may name an attempt or instance the page did not list (an older attempt's
  // instance): keep it, and let the server say whether it exists.
  if (params.get("attempt") && /^\d+$/.test(params.get("attempt")) && !attemptSel.value) choose(attemptSel, params.get("attempt"));
  if (params.get("instance") && !instanceSel.value) choose(instanceSel, params.get("instance"));
  updateDownload();
  const lineHash = /^#L(\d+)$/.exec(location.hash);
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
  // A reload while following: the ends of the attempts before the current one come
  // first, with their separators and reasons, as a page that watched them live had them.
  const earlier = readJson("log-earlier", { offsets: {}, reasons: {} });
  Object.keys(earlier.reasons || {}).forEach((n) => view.setAttemptReason(parseInt(n, 10), earlier.reasons[n]));
  if (!attemptSel.value && !pendingTarget && !lineHash) {
    Object.keys(earlier.offsets || {}).forEach((key) => {
      if (!instanceSel.value || key.split(":").slice(1).join(":") === instanceSel.value) offsets[key] = earlier.offsets[key];
    });
  }
  window.addEventListener("hashchange", () => {
    const m = /^#L(\d+)$/.exec(location.hash);
    if (m && instanceSel.value) openAt(attemptSel.value || currentAttempt, instanceSel.value, { line: parseInt(m[1], 10) }, "Linked line");
  });
  // A click on a line number: that line's permalink goes into the address bar.
  logRoot.addEventListener("click", (e) => {
    const a = e.target.closest && e.target.closest("a.n");
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
    const attempt = parseInt(attemptSel.value || currentAttempt, 10);
    const classified = document.querySelectorAll("#part-restarts tr[data-failure-attempt]");
    const rows = Array.prototype.filter.call(classified, (r) => parseInt(r.getAttribute("data-failure-attempt"), 10) === attempt);
    if (rows.length) {
      const r = rows[rows.length - 1];
      openAt(attempt, r.getAttribute("data-failure-instance"), { offset: parseInt(r.getAttribute("data-failure-offset"), 10) },
        "The line the classifier used for attempt " + attempt + "'s failure");
      return;
    }
    const failed = failures.filter((f) => f.attempt === attempt);
    const instance = instanceSel.value || (failed.length ? failed[failed.length - 1].instance : "");
    if (!instance && classified.length) {
      // Nothing in this attempt (a restarted job runs cleanly): the failure that restarted it.
      const last = classified[classified.length - 1];
      const was = parseInt(last.getAttribute("data-failure-attempt"), 10);
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
  const timesBtn = document.getElementById("log-times");
  timesBtn.addEventListener("click", () => {
    const next = { off: "local", local: "utc", utc: "off" }[view.times];
    view.setTimes(next);
    timesBtn.textContent = "Times: " + (next === "utc" ? "UTC" : next);
    timesBtn.setAttribute("aria-pressed", next === "off" ? "false" : "true");
  });
  const wrapBtn = document.getElementById("log-wrap");
  wrapBtn.addEventListener("click", () => {
    const on = logRoot.classList.toggle("wrap");
    wrapBtn.setAttribute("aria-pressed", on ? "true" : "false");
  });
  // On a phone a log line wider than the screen is cut at its edge (issue 15): wrap there from the start;
  // the button still turns it off.
  if (window.matchMedia("(max-width: 640px)").matches) wrapBtn.click();
  const focusSearch = initLogSearch(view, logRoot);
  bindKeys({
    w: () => wrapBtn.click(),
    t: () => timesBtn.click(),
    e: (e) => { e.preventDefault(); jumpToError(); },
    "/": (e) => { e.preventDefault(); focusSearch(); },
  });
  document.addEventListener("click", (e) => {
    const a = e.target.closest && e.target.closest("[data-show-instance]");
    if (!a) return;
    e.preventDefault();
    instanceSel.value = a.getAttribute("data-show-instance");
    attemptSel.value = "";
    pendingTarget = null;
    resubscribe();
    logRoot.focus();
    logRoot.scrollIntoView({ block: "nearest" });
  });

  // "Last output" of each instance of the current attempt, from the socket's "output"
  // messages (the log files' last writes): {instance: epoch ms}. Kept across the
  // panel's re-renders, which carry the monitor's older value.
  let lastOutput = {};
  let lastOutputAttempt = currentAttempt;
  function showLastOutput() {
    document.querySelectorAll("#part-instances [data-last-output]").forEach((td) => {
      const ms = lastOutput[td.getAttribute("data-last-output")];
      if (ms === undefined) return;
      const have = td.querySelector("time[datetime]");
      if (have && new Date(have.getAttribute("datetime")).getTime() >= ms) return;
      const t = document.createElement("time");
      t.setAttribute("datetime", new Date(ms).toISOString());
      t.setAttribute("data-ago", "");
      td.textContent = "";
      td.appendChild(t);
    });
    localize(document.getElementById("part-instances"));
  }
  // "5s ago" stays true between messages.
  setInterval(() => localize(document.getElementById("part-instances")), 1000);

  let lastStatus = null;
  // A fetched header older than the last status message (a fetch in flight while
  // the status moved on) does not take the status back.
  function keepNewerStatus() {
    const header = document.getElementById("job-header");
    if (!header || !lastStatus || !lastStatus.updated_at) return;
    const rendered = Date.parse(header.getAttribute("data-updated") || "");
    if (isNaN(rendered) || Date.parse(lastStatus.updated_at) > rendered) showStatus(lastStatus);
  }
  function showStatus(msg) {
    lastStatus = msg;
    const badge = document.querySelector("#job-header .title .badge");
    if (badge && msg.status) {
      badge.className = "badge st-" + String(msg.status).toLowerCase();
      const icon = document.createElement("span");
      icon.className = "icon"; icon.setAttribute("aria-hidden", "true");
      icon.textContent = STATUS_ICONS[msg.status] || "•";
      badge.textContent = "";
      badge.appendChild(icon);
      badge.appendChild(document.createTextNode(" " + msg.status));
    }
    const header = document.getElementById("job-header");
    if (header && msg.status) header.setAttribute("data-status", msg.status);
    const used = document.querySelector("#job-header .restarts");
    if (used && typeof msg.restart_count === "number") {
      const budget = used.textContent.split("/")[1];
      used.textContent = msg.restart_count + "/" + budget;
    }
  }

  function refresh(parts) {
    parts.forEach((p) => refreshPart("part-" + p, 300));
  }

  live = new LiveSocket(el.getAttribute("data-ws"), {
    open: (sock) => {
      sock.send({ type: "hello", after_event: lastEvent, logs: logSpec() });
    },
    message: (msg) => {
      if ((msg.type === "log" || msg.type === "log_target") && typeof msg.sub === "number" && msg.sub !== sub) return;
      if (msg.type === "log") {
        const key = msg.attempt + ":" + msg.instance;
        const have = offsets[key];
        if (have !== undefined && msg.next_offset <= have) return;  // already shown
        offsets[key] = msg.next_offset;
        if (typeof msg.next_line === "number") nextLines[key] = msg.next_line;
        view.add(msg);
      } else if (msg.type === "output") {
        if (msg.attempt !== lastOutputAttempt) { lastOutput = {}; lastOutputAttempt = msg.attempt; }
        Object.keys(msg.instances || {}).forEach((name) => {
          lastOutput[name] = Math.max(lastOutput[name] || 0, Math.round(msg.instances[name] * 1000));
        });
        showLastOutput();
        // New output may carry new step lines or follow new report_progress calls: the
        // progress part is fetched again at most every 5 s, not per line.
        refreshPart("part-progress", 5000);
      } else if (msg.type === "progress") {
        // A report_progress step (also from a job that prints nothing): at most one fetch in 2 s.
        refreshPart("part-progress", 2000);
      } else if (msg.type === "log_target") {
        if (!pendingTarget || msg.instance !== pendingTarget.instance) return;
        const asked = pendingTarget;
        pendingTarget = null;
        if (msg.line) { view.target = { i: msg.instance, n: msg.line }; return; }
        const what = asked.line ? "Line " + asked.line + " is not in " + msg.instance + "'s log of attempt " + msg.attempt
          : asked.first_error ? "No error line to jump to in " + msg.instance + "'s log of attempt " + msg.attempt
            : "The classified line is not in " + msg.instance + "'s log of attempt " + msg.attempt;
        say(what + (msg.why ? ": " + msg.why + "." : ".") + (msg.missing_instance ? "" : " Showing its end."));
        targetWhat = "";
      } else if (msg.type === "event") {
        addEvent(msg);
        if (msg.event_type === "job_failed" && msg.attempt && msg.payload && msg.payload.instance &&
            !failures.some((f) => f.attempt === msg.attempt && f.instance === msg.payload.instance)) {
          failures.push({ attempt: msg.attempt, instance: msg.payload.instance });
        }
        if (msg.id > lastEvent) lastEvent = msg.id;
        refresh(["instances", "timeline", "restarts"]);
      } else if (msg.type === "status") {
        // The header's status comes with the message, in the socket's order (right
        // after the event that changed it), not from a later fetch of the header,
        // which could already show the status after it (Restarting never seen).
        showStatus(msg);
        if (msg.status !== status) {
          document.getElementById("status-announcer").textContent = "Job status: " + msg.status + (msg.reason ? ". " + msg.reason : "");
          document.title = document.title.replace(status, msg.status);
          status = msg.status;
          el.setAttribute("data-status", status);
          refresh(["header", "instances", "timeline", "diagnoses"]);
        }
        if (msg.current_attempt && msg.current_attempt !== currentAttempt) {
          currentAttempt = msg.current_attempt;
          // The move to a new attempt carries the restart's reason: the log's separator says it.
          if (msg.status === "Restarting") view.setAttemptReason(currentAttempt, msg.reason);
          updateArchive();
          const opt = document.createElement("option");
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
    },
  });

  // "Dump stacks now" posts to the API; its snapshot arrives through the socket
  // ("diagnosis") and refreshes the Diagnoses part. Here: say what is happening.
  function dumpStatus(e, text) {
    const button = e.detail.elt;
    if (!button || !button.hasAttribute || !button.hasAttribute("data-dump-stacks")) return;
    const status = button.parentNode.querySelector("[data-dump-stacks-status]");
    if (status) status.textContent = text(e.detail.xhr);
  }
  document.addEventListener("htmx:beforeRequest", (e) => dumpStatus(e, () => "Dumping every instance's stacks…"));
  document.addEventListener("htmx:afterRequest", (e) => dumpStatus(e, (xhr) => {
    if (xhr && xhr.status === 201) return "Snapshot taken; it is listed below.";
    let why = "";
    try { why = JSON.stringify(JSON.parse(xhr.responseText)); } catch (err) { why = xhr ? xhr.statusText : ""; }
    return "No snapshot: " + (why || "the console did not answer") + ".";
  }));

  document.addEventListener("htmx:afterSwap", (e) => {
    if (e.target.id === "part-header") keepNewerStatus();
    if (e.target.id !== "part-instances") return;
    showLastOutput();
    // Keep the instance choices and the download links in step with the current attempt.
    const have = Array.prototype.map.call(instanceSel.options, (o) => o.value);
    e.target.querySelectorAll("[data-show-instance]").forEach((a) => {
      const n = a.getAttribute("data-show-instance");
      if (have.indexOf(n) < 0) { const o = document.createElement("option"); o.value = n; o.textContent = n; instanceSel.appendChild(o); }
    });
    e.target.querySelectorAll("a[data-log-download]").forEach((a) => {
      const n = a.getAttribute("data-attempt");
      urls.download[n] = urls.download[n] || {};
      urls.download[n][a.getAttribute("data-log-download")] = a.getAttribute("href");
    });
    const zip = e.target.querySelector("#attempt-archive");
    if (zip) urls.archive[zip.getAttribute("data-attempt")] = zip.getAttribute("href");
    updateDownload();
  });
}
