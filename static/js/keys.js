// Keyboard: "?" opens the list of keys on every page; the log view's single-letter
// keys (bound by the job page) act unless the person is typing in a field.

function typing(e) {
  const tag = (e.target.tagName || "").toLowerCase();
  return tag === "input" || tag === "textarea" || tag === "select";
}

export function initKeysDialog() {
  document.addEventListener("keydown", (e) => {
    if (e.key !== "?" || typing(e)) return;
    const keys = document.getElementById("keys");
    if (keys && keys.showModal && !keys.open) { e.preventDefault(); keys.showModal(); }
  });
}

/** bindings: {key: handler(event)}, called for a key pressed without Ctrl, Meta or Alt. */
export function bindKeys(bindings) {
  document.addEventListener("keydown", (e) => {
    if (typing(e) || e.ctrlKey || e.metaKey || e.altKey) return;
    const handler = bindings[e.key];
    if (handler) handler(e);
  });
}
