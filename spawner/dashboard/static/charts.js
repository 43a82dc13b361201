// Charts of the tasks that ended, drawn as plain SVG: tasks and cost per
// project over time (cumulative lines), and each task's duration (bars,
// coloured by status). Fed by GET history, then by every output the
// page's stream brings (charts.add).
"use strict";

const charts = (() => {
  const NS = "http://www.w3.org/2000/svg";
  const W = 600, H = 190, L = 48, R = 110, T = 22, B = 22; // size and margins, in viewBox units
  const palette = ["#3457a8", "#b35c00", "#2a7a3b", "#a33", "#7a3ba8", "#1d8a8a", "#8a7a1d", "#5a6475"];
  const statusColour = { complete: "#2a7a3b", blocked: "#b35c00", failed: "#a33", cancelled: "#8a93a3" };
  const tasks = [];
  const seen = new Set();
  let pending = false;

  const fmtTime = (ms) => new Date(ms).toLocaleTimeString([], { hour12: false, hour: "2-digit", minute: "2-digit" });
  const fmtNum = (v) => (v >= 100 ? v.toFixed(0) : v >= 1 ? v.toFixed(2) : v.toFixed(4).replace(/0+$/, "").replace(/\.$/, ""));

  function svg(id) {
    const el = document.getElementById(id);
    el.setAttribute("viewBox", `0 0 ${W} ${H}`);
    el.setAttribute("xmlns", NS);
    return el;
  }

  // axes draws the frame, the y ticks (0, max/2, max) and the x ends.
  function axes(t0, t1, ymax, ylabel) {
    let s = `<line class="axis" x1="${L}" y1="${H - B}" x2="${W - R}" y2="${H - B}"/><line class="axis" x1="${L}" y1="${T}" x2="${L}" y2="${H - B}"/>`;
    for (const f of [0, 0.5, 1]) {
      const y = H - B - f * (H - B - T);
      s += `<text class="tick" x="${L - 4}" y="${y + 3}" text-anchor="end">${esc(fmtNum(ymax * f))}</text>`;
      if (f > 0) s += `<line class="grid" x1="${L}" y1="${y}" x2="${W - R}" y2="${y}"/>`;
    }
    if (t0 != null) {
      s += `<text class="tick" x="${L}" y="${H - 6}">${esc(fmtTime(t0))}</text>`;
      s += `<text class="tick" x="${W - R}" y="${H - 6}" text-anchor="end">${esc(fmtTime(t1))}</text>`;
    }
    s += `<text class="tick" x="${L}" y="${T - 10}">${esc(ylabel)}</text>`;
    return s;
  }

  // cumulative draws one step line per project of the running sum of value(task).
  function cumulative(id, value, ylabel) {
    const el = svg(id);
    if (!tasks.length) { el.innerHTML = axes(null, null, 1, ylabel) + `<text class="empty" x="${W / 2}" y="${H / 2}" text-anchor="middle">no task yet</text>`; return; }
    // The time axis starts a little before the first task, so that its step shows.
    const first = tasks[0].t, end = tasks[tasks.length - 1].t;
    const t0 = first - Math.max(30000, (end - first) * 0.05), t1 = end + Math.max(30000, (end - first) * 0.05);
    const per = new Map();
    for (const k of tasks) {
      const p = k.project || "-";
      if (!per.has(p)) per.set(p, [[t0, 0]]);
      const pts = per.get(p);
      pts.push([k.t, pts[pts.length - 1][1] + value(k)]);
    }
    let ymax = 0;
    for (const pts of per.values()) ymax = Math.max(ymax, pts[pts.length - 1][1]);
    ymax = ymax || 1;
    const x = (t) => L + ((t - t0) / (t1 - t0)) * (W - L - R);
    const y = (v) => H - B - (v / ymax) * (H - B - T);
    let s = axes(t0, t1, ymax, ylabel), i = 0;
    for (const [p, pts] of [...per.entries()].sort()) {
      const c = palette[i % palette.length];
      let d = `M${x(pts[0][0])},${y(0)}`;
      for (let j = 1; j < pts.length; j++) d += `H${x(pts[j][0])}V${y(pts[j][1])}`;
      d += `H${x(t1)}`;
      const last = pts[pts.length - 1][1];
      s += `<path class="series" data-project="${esc(p)}" d="${d}" stroke="${c}"><title>${esc(p)}: ${esc(fmtNum(last))}</title></path>`;
      s += `<text class="legend" x="${W - R + 6}" y="${T + 12 + i * 14}" fill="${c}">${esc(p)} ${esc(fmtNum(last))}</text>`;
      i++;
    }
    el.innerHTML = s;
  }

  // durations draws the last 60 tasks' durations as bars, oldest left.
  function durations(id) {
    const el = svg(id);
    const last = tasks.slice(-60);
    const ymax = Math.max(1, ...last.map((k) => k.duration / 1000));
    let s = axes(null, null, ymax, "seconds");
    const bw = Math.min((W - L - R) / Math.max(last.length, 1), 24);
    last.forEach((k, i) => {
      const h = (k.duration / 1000 / ymax) * (H - B - T);
      s += `<rect class="bar" data-request="${esc(k.request)}" x="${L + i * bw + 1}" y="${H - B - h}" width="${Math.max(bw - 2, 1)}" height="${h}" fill="${statusColour[k.status] || "#5a6475"}">` +
        `<title>${esc(k.request)} (${esc(k.project)}): ${esc(k.status)}, ${(k.duration / 1000).toFixed(1)} s</title></rect>`;
    });
    let j = 0;
    for (const [st, c] of Object.entries(statusColour)) {
      s += `<text class="legend" x="${W - R + 6}" y="${T + 12 + j++ * 14}" fill="${c}">${esc(st)}</text>`;
    }
    if (!last.length) s += `<text class="empty" x="${W / 2}" y="${H / 2}" text-anchor="middle">no task yet</text>`;
    el.innerHTML = s;
  }

  function draw() {
    pending = false;
    tasks.sort((a, b) => a.t - b.t);
    cumulative("chart-tasks", () => 1, "tasks");
    cumulative("chart-cost", (k) => k.cost, "USD");
    durations("chart-durations");
  }

  function push(f) {
    const key = `${f.worker_id}/${f.request_id}/${f.at}`;
    if (seen.has(key)) return;
    seen.add(key);
    tasks.push({ t: Date.parse(f.at), project: f.project_id, request: f.request_id, status: f.status, cost: f.cost_usd || 0, duration: f.duration_ms || 0 });
    if (!pending) { pending = true; requestAnimationFrame(draw); }
  }

  return {
    load(url) {
      draw();
      fetch(url, { credentials: "same-origin" }).then((r) => r.json()).then((h) => h.forEach(push)).catch(() => {});
    },
    add(doc, projectOf) {
      push({ at: doc.timestamp, project_id: doc.project_id || projectOf[doc.worker_id] || "", worker_id: doc.worker_id,
        request_id: doc.request_id, status: doc.status, cost_usd: doc.cost_usd, duration_ms: doc.duration_ms });
    },
  };
})();
