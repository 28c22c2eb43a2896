// The dashboard and the job list follow their workspace's socket: the dashboard
// refreshes as a whole, the job list the row of the job whose status changed.

import { LiveSocket } from "./live-socket.js";
import { debounce, swap } from "./parts.js";

export function initWorkspace(el) {
  new LiveSocket(el.getAttribute("data-ws"), {
    message: (msg) => {
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
