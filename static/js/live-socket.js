// A WebSocket that comes back after a drop, and the banner that says what happened.

let banner = null;
let bannerTimer = null;

export function showBanner(text, keep) {
  banner = banner || document.getElementById("live-banner");
  if (!banner) return;
  clearTimeout(bannerTimer);
  banner.textContent = text;
  banner.hidden = false;
  if (!keep) bannerTimer = setTimeout(() => { banner.hidden = true; }, 2500);
}

// Close codes of monitoring.consumers when access ends while a socket is open.
const REVOKED = {
  4401: "you logged out or your session ended",
  4403: "you are no longer a member of this workspace",
  4423: "your account was deactivated",
};

/** A socket to `path` (rendered by the server into the page) that reconnects with
    backoff; handlers.open(socket) on each (re)connection, handlers.message(msg, socket)
    for each JSON message. */
export class LiveSocket {
  constructor(path, handlers) {
    this.path = path;
    this.handlers = handlers;
    this.delay = 500;
    this.wasOpen = false;
    this.refusedOnce = false;
    this.revoked = null;
    this.connect();
  }

  connect() {
    const url = (location.protocol === "https:" ? "wss://" : "ws://") + location.host + this.path;
    const ws = new WebSocket(url);
    this.ws = ws;
    ws.onopen = () => {
      if (this.wasOpen) showBanner("Live updates are back; nothing was missed.");
      this.wasOpen = true;
      this.delay = 500;
      if (this.handlers.open) this.handlers.open(this);
    };
    ws.onmessage = (e) => {
      let msg;
      try { msg = JSON.parse(e.data); } catch (err) { return; }
      if (msg.type === "revoked") { this.revoked = msg; return; }
      if (this.handlers.message) this.handlers.message(msg, this);
    };
    ws.onclose = (e) => {
      // The server ends a socket whose person lost access (see monitoring.consumers):
      // say why and stay closed, since reconnecting would only be refused.
      if (REVOKED[e.code]) {
        const why = (this.revoked && this.revoked.reason) || REVOKED[e.code];
        showBanner("Live updates stopped: " + why + " (code " + e.code + "). Reload the page or log in again.", true);
        return;
      }
      if (!this.wasOpen && e.code === 1006 && this.refusedOnce) {
        showBanner("Live updates are not available for this page (refused). Reload, or log in again.", true);
        return;
      }
      this.refusedOnce = !this.wasOpen;
      showBanner("Live updates lost — reconnecting…", true);
      setTimeout(() => this.connect(), this.delay);
      this.delay = Math.min(this.delay * 2, 5000);
    };
  }

  send(obj) {
    if (this.ws && this.ws.readyState === 1) this.ws.send(JSON.stringify(obj));
  }
}
