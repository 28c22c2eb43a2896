// The submit form's fault-tolerance fields and its "Other configuration" box kept in step
// (issue 15). The server stays the judge (jobs.forms: the box wins for every flag it names);
// this only makes what a person sees agree with what will be submitted.
//  - Typing a flag in the box sets the field that flag belongs to (data-flag on the field).
//  - Changing a field whose flag the box names rewrites that flag's value in the box.
//  - Switching fault tolerance on in Sync mode switches whole-job restarts on (the restart
//    budget would otherwise look active and do nothing); the API's default stays off.

const FLAG = /(^|\s)(--[a-z0-9-]+)(?:=(\S*)|\s+(?!--)(\S+))?/g;

function flagsIn(text) {
  const out = new Map();
  for (const m of text.matchAll(FLAG)) out.set(m[2], m[3] !== undefined ? m[3] : m[4] !== undefined ? m[4] : "");
  return out;
}

function boolOf(value) {
  return /^(true|1|yes|on)$/i.test(value);
}

function fieldValue(el) {
  return el.type === "checkbox" ? (el.checked ? "True" : "False") : el.value;
}

export function initJobForm(form) {
  const box = form.querySelector("#id_error_monitoring_args");
  const fields = new Map([...form.querySelectorAll("[data-flag]")].map((el) => [el.dataset.flag, el]));
  let syncing = false;

  function boxToFields() {
    syncing = true;
    try {
      for (const [flag, value] of flagsIn(box.value)) {
        const el = fields.get(flag);
        if (!el || value === "") continue;
        if (el.type === "checkbox") {
          if (el.checked !== boolOf(value)) { el.checked = boolOf(value); el.dispatchEvent(new Event("change", { bubbles: true })); }
        } else if (el.tagName === "SELECT") {
          const option = [...el.options].find((o) => o.value.toLowerCase() === value.toLowerCase());
          if (option && el.value !== option.value) { el.value = option.value; el.dispatchEvent(new Event("change", { bubbles: true })); }
        } else if (el.value !== value) {
          el.value = value;
        }
      }
    } finally {
      syncing = false;
    }
  }

  function fieldToBox(el) {
    const flag = el.dataset.flag;
    if (!flagsIn(box.value).has(flag)) return;  // the field alone says it
    const value = fieldValue(el);
    const re = new RegExp(`(^|\\s)${flag}(?:=\\S*|\\s+(?!--)\\S+)?`, "g");
    box.value = box.value.replace(re, (m, lead) => `${lead}${flag}=${value}`);
  }

  box.addEventListener("input", boxToFields);
  for (const el of fields.values()) {
    const on = () => { if (!syncing) fieldToBox(el); };
    el.addEventListener("input", on);
    el.addEventListener("change", on);
  }

  const ft = form.querySelector("#id_fault_tolerance");
  const mode = form.querySelector("#id_job_execution_mode");
  const restarts = form.querySelector("#id_enable_job_restart");
  let restartsTouched = false;
  restarts.addEventListener("change", () => { if (!syncing) restartsTouched = true; });
  ft.addEventListener("change", () => {
    if (ft.checked && mode.value === "Sync" && !restarts.checked && !restartsTouched) {
      restarts.checked = true;
      restarts.dispatchEvent(new Event("change", { bubbles: true }));
      restartsTouched = false;
    }
  });
}
