// What both pages share: small DOM helpers, and the actions: a POST of
// JSON with the session's CSRF token (GET session), same origin only.
"use strict";

const $ = (sel) => document.querySelector(sel);
const short = (id) => (id || "").slice(0, 8);
const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));

let sessionP = null;

// session returns {operator, csrf}, asked once per page.
function session(base) {
  if (!sessionP) {
    sessionP = fetch(base + "session", { credentials: "same-origin" }).then((r) => {
      if (!r.ok) throw new Error(`session: HTTP ${r.status}`);
      return r.json();
    });
  }
  return sessionP;
}

// act POSTs an action; it resolves to the result or throws the error
// document's "CODE: message".
async function act(base, path, body) {
  const s = await session(base);
  const r = await fetch(base + path, {
    method: "POST", credentials: "same-origin",
    headers: { "Content-Type": "application/json", "X-CSRF-Token": s.csrf },
    body: JSON.stringify(body || {}),
  });
  const j = await r.json().catch(() => ({}));
  if (!r.ok) throw new Error(j.error ? `${j.error.code}: ${j.error.message}` : `HTTP ${r.status}`);
  return j;
}
