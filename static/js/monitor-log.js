// The job page's monitor log: events pushed over the socket, appended once each.

import { timeEl } from "./times.js";

const LEVEL_MARK = { error: "✕", warning: "!" };

/** msg: {id, level, label, created_at, attempt, instance, message} (an "event" message,
    or a diagnosis shaped like one). The same markup as templates/jobs/_event.html. */
export function addEvent(msg) {
  if (document.getElementById("ev-" + msg.id)) return;
  const list = document.getElementById("events");
  const empty = document.getElementById("events-empty");
  if (empty) empty.remove();
  const li = document.createElement("li");
  li.className = "ev ev-" + msg.level;
  li.id = "ev-" + msg.id;
  li.setAttribute("data-id", msg.id);
  const lvl = document.createElement("span");
  lvl.className = "lvl lvl-" + msg.level;
  lvl.title = msg.level;
  lvl.textContent = LEVEL_MARK[msg.level] || "i";
  li.appendChild(lvl);
  li.appendChild(document.createTextNode(" "));
  li.appendChild(timeEl(msg.created_at));
  const type = document.createElement("span"); type.className = "ev-type"; type.textContent = " " + msg.label;
  li.appendChild(type);
  if (msg.attempt) { const a = document.createElement("span"); a.className = "muted"; a.textContent = " a" + msg.attempt; li.appendChild(a); }
  if (msg.instance) { const n = document.createElement("span"); n.className = "muted"; n.textContent = " " + msg.instance; li.appendChild(n); }
  const m = document.createElement("span"); m.className = "ev-msg"; m.textContent = " " + msg.message;
  li.appendChild(m);
  const near = list.scrollHeight - list.scrollTop - list.clientHeight < 30;
  list.appendChild(li);
  if (near) list.scrollTop = list.scrollHeight;
}
