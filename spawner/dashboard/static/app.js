// The dashboard's page: one EventSource, no polling. "state" events
// replace the tables; "entry" events add a line to the timeline, and an
// output to the charts (charts.js), which start from GET history.
"use strict";

const cell = (v, cls) => `<td${cls ? ` class="${cls}"` : ""}>${esc(v === "" || v == null ? "-" : v)}</td>`;

function ago(seconds) {
  if (seconds < 0) return "-";
  if (seconds < 60) return `${seconds.toFixed(1)} s ago`;
  return `${Math.round(seconds / 60)} min ago`;
}

function since(iso) {
  if (!iso) return "-";
  return ago((Date.now() - Date.parse(iso)) / 1000);
}

function renderState(st) {
  $("#workers tbody").innerHTML = st.workers.map((w) =>
    `<tr data-worker="${esc(w.worker_id)}">` +
    `<td class="id" title="${esc(w.worker_id)}"><a href="workers/${encodeURIComponent(w.worker_id)}">${esc(short(w.worker_id))}</a></td>` +
    cell(w.agent_type) + cell(w.project_id) + cell(w.state, w.state) + cell(w.status) +
    cell(w.health, w.health) + cell(w.request_id) + cell(ago(w.heartbeat_age_s)) + cell(w.host) + "</tr>").join("");
  $("#usage tbody").innerHTML = st.usage.map((u) =>
    "<tr>" + cell(u.project_id) + cell(u.tasks, "num") + cell(u.input, "num") + cell(u.output, "num") +
    cell(u.cost_usd.toFixed(4), "num") + "</tr>").join("");
  $("#queue").innerHTML = st.queue.length ? st.queue.map((c) => `<li class="id">${esc(c)}</li>`).join("") : "<li>empty</li>";
  $("#managers tbody").innerHTML = st.managers.map((m) =>
    "<tr>" + cell(m.id) + cell(m.host) + cell(m.pid, "num") + cell(m.version) + cell((m.leases || []).join(",")) +
    cell(since(m.last_reconcile_at)) + "</tr>").join("");
  const busy = st.workers.filter((w) => w.state === "busy").length;
  $("#summary").textContent = `${st.workers.length} workers, ${busy} busy, ${st.queue.length} queued`;
}

function describe(doc) {
  switch (doc.type) {
    case "lifecycle":
      if (doc.event === "operator_action") {
        const d = doc.detail || {};
        return [`${d.action} by ${d.operator}`, `${doc.request_id || ""}${d.code ? ` failed: ${d.code}` : ""}`];
      }
      return [doc.event, `${doc.source || ""} ${doc.request_id || ""}`];
    case "progress":
      return [doc.step, `${doc.request_id}${doc.progress_pct != null ? ` ${doc.progress_pct}%` : ""} ${doc.output || ""}`];
    case "output": {
      const detail = doc.error ? `${doc.error.code}: ${doc.error.message}` : doc.question ? doc.question : JSON.stringify(doc.result ?? "");
      return [doc.status, `${doc.request_id} ${detail} $${(doc.cost_usd || 0).toFixed(4)}`];
    }
  }
  return [doc.type, ""];
}

function addEntry(e) {
  const li = document.createElement("li");
  const t = new Date(Number(e.id.split("-")[0])).toLocaleTimeString([], { hour12: false }) ;
  if (e.error) {
    li.innerHTML = `<span class="t">${esc(t)}</span><span class="kind">invalid</span> ${esc(e.stream)}: ${esc(e.error)}`;
  } else {
    const doc = e.doc;
    const [what, detail] = describe(doc);
    li.className = doc.type;
    li.dataset.id = e.id;
    li.innerHTML = `<span class="t">${esc(t)}</span><span class="id">${esc(short(doc.worker_id))}</span> ` +
      `<span class="kind">${esc(doc.type)}</span> <b>${esc(what)}</b> ${esc(detail)}`;
  }
  const tl = $("#timeline");
  tl.prepend(li);
  while (tl.children.length > 500) tl.lastChild.remove();
}

const es = new EventSource("events");
es.addEventListener("open", () => { $("#conn").textContent = "live"; $("#conn").classList.add("live"); });
es.addEventListener("error", () => { $("#conn").textContent = "reconnecting…"; $("#conn").classList.remove("live"); });
let projectOf = {};
es.addEventListener("state", (m) => {
  const st = JSON.parse(m.data);
  projectOf = Object.fromEntries(st.workers.map((w) => [w.worker_id, w.project_id]));
  renderState(st);
});
es.addEventListener("entry", (m) => {
  const e = JSON.parse(m.data);
  addEntry(e);
  if (e.doc && e.doc.type === "output") charts.add(e.doc, projectOf);
});
charts.load("history");
