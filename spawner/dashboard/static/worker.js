// A worker's page: its state and task in flight (from the dashboard's
// stream, "../events"), the task's live transcript (its run's stream,
// "../runs/{id}/events": progress, permission requests, lifecycle, the
// output), and the actions (common.js act), each a POST the server
// records with the operator's name.
"use strict";

const base = "../";
const workerID = decodeURIComponent(location.pathname.split("/").pop());
const path = (action) => `workers/${encodeURIComponent(workerID)}/${action}`;
let following = "";
let runES = null;
let inFlight = "";

$("#wid").textContent = workerID;
session(base).then((s) => { $("#operator").textContent = `acting as ${s.operator}`; }).catch(() => {});

function status(text, failed) {
  const p = $("#action-status");
  p.textContent = text;
  p.className = failed ? "failed" : "";
}

async function run(action, body, what) {
  try {
    const res = await act(base, path(action), body);
    status(`${what || action}: done by ${res.operator}${res.command_id ? ` (${res.command_id})` : ""}`);
    return true;
  } catch (e) {
    status(`${what || action}: ${e.message}`, true);
    return false;
  }
}

function line(cls, html) {
  const li = document.createElement("li");
  li.className = cls;
  li.innerHTML = html;
  $("#transcript").append(li);
  li.scrollIntoView({ block: "nearest" });
  return li;
}

const time = (iso) => new Date(iso || Date.now()).toLocaleTimeString([], { hour12: false });

function onPermission(p) {
  const li = line("permission pending", `<span class="t">${esc(time(p.timestamp))}</span><span class="kind">asks</span> ` +
    `<b>${esc(p.tool)}</b> <code>${esc(JSON.stringify(p.input))}</code> ` +
    `<button class="allow">Allow</button> <button class="deny danger">Deny</button>`);
  li.dataset.permission = p.permission_id;
  const answer = async (allow) => {
    li.querySelectorAll("button").forEach((b) => { b.disabled = true; });
    if (await run(allow ? "allow" : "deny", { request_id: p.request_id, permission_id: p.permission_id }, `${allow ? "allow" : "deny"} ${p.tool}`)) {
      li.classList.remove("pending");
      li.classList.add(allow ? "allowed" : "denied");
    } else {
      li.querySelectorAll("button").forEach((b) => { b.disabled = false; });
    }
  };
  li.querySelector(".allow").onclick = () => answer(true);
  li.querySelector(".deny").onclick = () => answer(false);
}

function onProgress(p) {
  const pct = p.progress_pct != null ? ` ${p.progress_pct}%` : "";
  line("progress", `<span class="t">${esc(time(p.timestamp))}</span><span class="kind">${p.refused ? "refused" : "progress"}</span> ` +
    `<b>${esc(p.step)}</b>${esc(pct)} ${esc(p.output || "")}`);
  // The wrapper records each verdict: "permission perm-… (Bash) allowed".
  const m = /^permission (\S+)/.exec(p.step || "");
  if (m) {
    const li = document.querySelector(`#transcript li[data-permission="${CSS.escape(m[1])}"]`);
    if (li) { li.classList.remove("pending"); li.querySelectorAll("button").forEach((b) => b.remove()); }
  }
}

function onOutput(o) {
  const detail = o.error ? `${o.error.code}: ${o.error.message}` : o.question || o.response || JSON.stringify(o.result ?? "");
  line(`output ${o.status}`, `<span class="t">${esc(time(o.timestamp))}</span><span class="kind">output</span> ` +
    `<b>${esc(o.status)}</b> ${esc(detail)} <span class="cost">${(o.duration_ms / 1000).toFixed(1)} s, $${(o.cost_usd || 0).toFixed(4)}</span>`);
  if (o.git) onGit(o.git);
  $("#run-status").textContent = o.status;
  document.querySelectorAll("#transcript li.pending button").forEach((b) => b.remove());
}

// onGit shows a task's git result: where the work went, its commits, its
// diffstat, whether it merges into the base, and the patch (folded).
function onGit(g) {
  const pushed = g.discarded ? "not pushed (discarded)" : g.pushed ? "pushed" : "not pushed";
  let html = `<span class="kind">git</span> <b>${esc(g.branch)}</b> of ${esc(g.remote)} from ${esc(g.base)}, ${esc(pushed)}`;
  if (!g.changed) {
    line("git", html + " — no change");
    return;
  }
  const commits = (g.commits || []).map((c) => `<li><code>${esc(c.sha.slice(0, 12))}</code> ${esc(c.subject)}</li>`).join("");
  const files = (g.files || []).map((f) => `<li>${esc(f.path)} ${f.binary ? "(binary)" : `+${esc(f.insertions)} -${esc(f.deletions)}`}</li>`).join("");
  let merge = "";
  if (g.merges_cleanly === true) merge = ` merges cleanly into ${esc(g.base)}`;
  if (g.merges_cleanly === false) merge = ` conflicts with ${esc(g.base)}: ${esc((g.conflicts || []).join(", "))}`;
  html += `, ${(g.files || []).length} files +${esc(g.insertions)} -${esc(g.deletions)};${merge}<ul>${commits}</ul><ul>${files}</ul>`;
  if (g.patch) {
    const cut = g.patch_truncated ? ` (cut: ${g.patch_bytes} bytes in all)` : "";
    html += `<details><summary>patch${esc(cut)}</summary><pre>${esc(g.patch)}</pre></details>`;
  }
  line("git", html);
}

// follow opens the transcript of a run (once per run: the stream ends
// after its output, and the page closes it then so it does not reopen).
function follow(rid) {
  if (!rid || rid === following) return;
  if (runES) runES.close();
  following = rid;
  $("#task").textContent = rid;
  $("#run-status").textContent = "";
  const es = new EventSource(`${base}runs/${encodeURIComponent(rid)}/events`);
  runES = es;
  es.addEventListener("run", (m) => {
    $("#transcript").innerHTML = ""; // a reconnection replays the run from its start
    $("#run-status").textContent = JSON.parse(m.data).status || "";
  });
  es.addEventListener("progress", (m) => onProgress(JSON.parse(m.data)));
  es.addEventListener("permission_request", (m) => onPermission(JSON.parse(m.data)));
  es.addEventListener("lifecycle", (m) => {
    const l = JSON.parse(m.data);
    const what = l.event === "operator_action" ? `${l.detail.action} by ${l.detail.operator}` : l.event;
    line(`lifecycle ${l.event}`, `<span class="t">${esc(time(l.timestamp))}</span><span class="kind">lifecycle</span> <b>${esc(what)}</b>`);
  });
  es.addEventListener("output", (m) => { onOutput(JSON.parse(m.data)); es.close(); });
}

function renderWorker(w) {
  const cells = w ? [w.agent_type, w.project_id, w.state, w.status, w.health, w.request_id, w.host] : ["gone"];
  $("#worker tbody").innerHTML = "<tr>" + cells.map((v) => `<td>${esc(v === "" || v == null ? "-" : v)}</td>`).join("") + "</tr>";
  inFlight = (w && w.request_id) || "";
  $("#cancel").disabled = !inFlight;
  $("#send").disabled = $("#message-text").disabled = !inFlight;
  document.body.dataset.state = w ? w.state : "gone";
  if (inFlight) follow(inFlight);
}

function onEntry(e) {
  const d = e.doc;
  if (!d || d.worker_id !== workerID || d.type !== "lifecycle") return;
  const li = document.createElement("li");
  let what = d.event, detail = d.request_id || "";
  if (d.event === "operator_action") {
    what = `${d.detail.action} by ${d.detail.operator}`;
    if (d.detail.code) detail += ` failed: ${d.detail.code}`;
  }
  li.className = d.event;
  li.innerHTML = `<span class="t">${esc(time(d.timestamp))}</span><b>${esc(what)}</b> ${esc(detail)}`;
  $("#activity").prepend(li);
}

$("#pause").onclick = () => run("pause");
$("#resume").onclick = () => run("resume");
$("#delete").onclick = () => { if (confirm(`Delete worker ${workerID}? Its task in flight fails.`)) run("delete"); };
$("#cancel").onclick = () => run("cancel", { request_id: inFlight }, "cancel task");
$("#send").onclick = async () => {
  const text = $("#message-text").value;
  if (text && await run("message", { request_id: inFlight, text }, "message")) $("#message-text").value = "";
};

const es = new EventSource(`${base}events`);
es.addEventListener("open", () => { $("#conn").textContent = "live"; $("#conn").classList.add("live"); });
es.addEventListener("error", () => { $("#conn").textContent = "reconnecting…"; $("#conn").classList.remove("live"); });
es.addEventListener("state", (m) => renderWorker(JSON.parse(m.data).workers.find((w) => w.worker_id === workerID)));
es.addEventListener("entry", (m) => onEntry(JSON.parse(m.data)));
