// The dashboard and the job list follow their workspace's socket: the dashboard
// refreshes as a whole, the job list the row of the job whose status changed.

import { LiveSocket } from "./live-socket.js";
import { debounce, swap } from "./parts.js";

const rowSwapped = {};

function throttleRow(jobId) {
  const wait = (rowSwapped[jobId] || 0) + 3000 - Date.now();
  debounce("progress" + jobId, Math.max(wait, 0), () => {
    rowSwapped[jobId] = Date.now();
    const now = document.getElementById("job-" + jobId);
    if (now) swap(now.getAttribute("data-job-row"), "#job-" + jobId, "outerHTML");
  });
}

// A running job without report_progress draws its sparkline from its log's step
// lines, which the workspace's socket does not carry: while the list shows such a
// job, the table is read again every LOG_PROGRESS_MS (one request for all of them),
// not while the page is hidden or the reader is inside the table.
const LOG_PROGRESS_MS = 10000;

function followLogProgress() {
  setInterval(() => {
    const table = document.getElementById("job-table");
    if (!table || document.visibilityState !== "visible" || table.contains(document.activeElement)) return;
    if (!table.querySelector("[data-progress-from-log]")) return;
    swap(location.pathname + location.search, "#job-table", "outerHTML");
  }, LOG_PROGRESS_MS);
}

export function initWorkspace(el) {
  if (document.getElementById("job-table")) followLogProgress();
  new LiveSocket(el.getAttribute("data-ws"), {
    message: (msg) => {
      if (msg.type === "progress") {
        // A job's report_progress: its row (and sparkline) again, at most every 3 s.
        const row = document.getElementById("job-" + msg.job_id);
        if (row) throttleRow(msg.job_id);
        return;
      }
      if (msg.type !== "status" && msg.type !== "event") return;
      const dash = document.getElementById("dashboard");
      if (dash) {
        debounce("dash", 400, () => swap(dash.getAttribute("data-refresh"), "#dashboard"));
        return;
      }
      if (msg.type !== "status") return;
      const row = document.getElementById("job-" + msg.job_id);
      if (row) {
        debounce("row" + msg.job_id, 250, () => swap(row.getAttribute("data-job-row"), "#job-" + msg.job_id, "outerHTML"));
      } else if (document.getElementById("job-table")) {
        // A job this page does not list yet: the page itself, filters and all.
        debounce("table", 500, () => swap(location.pathname + location.search, "#job-table", "outerHTML"));
      }
    },
  });
}
