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

export function initWorkspace(el) {
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
