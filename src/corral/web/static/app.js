// Corral dashboard: vanilla JavaScript over the controller's REST API (/api/v1).
// Views are chosen by the URL fragment (#/queue, #/job/12, #/nodes, #/reservations, #/utilization,
// #/fairshare, #/checks, #/checks/<run>, #/submit). Every request carries the token from `corral token`.
"use strict";

const API = "/api/v1";
const TOKEN_KEY = "corral.token";
const REFRESH_MS = 2000;
let timer = null;
let partitionsLoaded = false;

// ---- helpers ------------------------------------------------------------------------

function $(id) { return document.getElementById(id); }

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("data-")) node.setAttribute(k, v);
    else if (k === "href" || k === "title" || k === "colspan" || k === "style") node.setAttribute(k, v);
    else node[k] = v;
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); return node; }

function duration(s) {
  if (s === null || s === undefined) return "";
  s = Math.max(0, Math.round(s));
  const d = Math.floor(s / 86400), h = Math.floor((s % 86400) / 3600);
  const m = Math.floor((s % 3600) / 60), sec = s % 60;
  const hms = [h, m, sec].map((x) => String(x).padStart(2, "0")).join(":");
  return d ? `${d}-${hms}` : hms;
}

function when(ts) {
  if (!ts) return "";
  return new Date(ts * 1000).toLocaleString();
}

function mb(v) {
  if (!v) return "0";
  return v >= 1024 ? `${(v / 1024).toFixed(1)} GB` : `${Math.round(v)} MB`;
}

function pct(x) { return x === null || x === undefined ? "" : `${(100 * x).toFixed(1)} %`; }

function bar(used, total, label) {
  const frac = total > 0 ? Math.min(1, used / total) : 0;
  return el("div", { class: "bar", title: label },
    el("div", { class: "fill", style: `width:${(100 * frac).toFixed(1)}%` }),
    el("span", { text: label }));
}

function showError(msg) {
  const box = $("error");
  if (!msg) { box.hidden = true; return; }
  box.textContent = msg;
  box.hidden = false;
}

class ApiError extends Error {
  constructor(status, code, message) { super(message); this.status = status; this.code = code; }
}

async function api(method, path, body) {
  const headers = { "Accept": "application/json" };
  const token = localStorage.getItem(TOKEN_KEY);
  if (token) headers["Authorization"] = `Bearer ${token}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const res = await fetch(API + path, {
    method, headers, body: body === undefined ? undefined : JSON.stringify(body),
    cache: "no-store",
  });
  let data = null;
  const text = await res.text();
  try { data = text ? JSON.parse(text) : null; } catch (e) { data = null; }
  if (!res.ok) {
    const err = data && data.error ? data.error : { code: "internal", message: text || res.statusText };
    if (res.status === 401) showLogin(err.message);
    throw new ApiError(res.status, err.code, err.message);
  }
  return data;
}

// ---- views ----------------------------------------------------------------------------

const VIEWS = ["login", "queue", "job", "nodes", "reservations", "utilization", "fairshare", "checks", "submit"];

function show(view) {
  for (const v of VIEWS) $(`view-${v}`).hidden = v !== view;
  for (const a of document.querySelectorAll("#nav a")) {
    a.classList.toggle("active", a.dataset.view === view || (view === "job" && a.dataset.view === "queue"));
  }
}

function showLogin(message) {
  stopTimer();
  $("nav").hidden = true;
  $("logout").hidden = true;
  $("whoami").textContent = "";
  show("login");
  if (message) showError(`Sign in again: ${message}`);
}

function stopTimer() { if (timer) { clearInterval(timer); timer = null; } }

function every(fn) {
  stopTimer();
  const run = () => fn().catch((e) => { if (e.status !== 401) showError(e.message); });
  run();
  timer = setInterval(run, REFRESH_MS);
}

async function loadPartitions() {
  if (partitionsLoaded) return;
  const data = await api("GET", "/partitions");
  for (const sel of [$("f-partition"), $("s-partition")]) {
    for (const p of data.partitions) {
      sel.append(el("option", { value: p.name, text: p.name + (p.default ? " (default)" : "") }));
    }
  }
  partitionsLoaded = true;
}

function stateBadge(state, short) {
  return el("span", { class: `state s-${state}`, "data-state": state, title: state, text: short || state });
}

async function renderQueue() {
  const flt = { include_finished: $("f-finished").checked };
  const user = $("f-user").value.trim();
  if (user) flt.user = user;
  if ($("f-state").value) flt.states = [$("f-state").value];
  if ($("f-partition").value) flt.partition = $("f-partition").value;
  const data = await api("POST", "/jobs/query", flt);
  const body = clear($("queue-body"));
  let pending = 0, running = 0;
  for (const j of data.jobs) {
    if (j.state === "PENDING") pending++;
    if (j.state === "RUNNING") running++;
    const where = j.state === "PENDING" ? `(${j.reason})` : j.nodelist;
    body.append(el("tr", { "data-job-id": j.job_id },
      el("td", {}, el("a", { href: `#/job/${j.job_id}`, text: j.job_id })),
      el("td", { text: j.name }), el("td", { text: j.user }), el("td", { text: j.account || "" }),
      el("td", { text: j.partition || "(default)" }), el("td", {}, stateBadge(j.state, j.state)),
      el("td", { text: duration(j.time_used_s) }), el("td", { text: j.num_cpus }),
      el("td", { text: where || "" })));
  }
  if (!data.jobs.length) body.append(el("tr", {}, el("td", { colspan: "9", class: "muted", text: "no jobs match" })));
  $("queue-summary").textContent = `${data.jobs.length} jobs shown: ${running} running, ${pending} pending`;
}

function kv(table, rows) {
  clear(table);
  for (const [k, v] of rows) {
    if (v === null || v === undefined || v === "") continue;
    table.append(el("tr", {}, el("th", { text: k }), el("td", {}, v)));
  }
}

async function renderJob(id) {
  const data = await api("GET", `/ops/why/${encodeURIComponent(id)}`);
  const j = data.job;
  $("job-title").textContent = `${j.job_id} (${j.name})`;
  const why = clear($("job-why"));
  why.className = `why why-${j.state}`;
  for (const line of data.lines) why.append(el("p", { text: line }));
  kv($("job-fields"), [
    ["State", stateBadge(j.state)], ["Reason", j.state === "PENDING" ? j.reason : ""],
    ["User", `${j.user} (uid ${j.uid})`], ["Account", j.account], ["QOS", j.qos],
    ["Partition", j.partition], ["Priority", j.state === "PENDING" ? String(j.priority) : ""],
    ["Runtime", j.runtime === "vm" ? `vm (image ${j.vm_image || "default"})` : (j.runtime || "host")],
    ["Place in queue", j.rank ? `${j.rank} of ${data.pending_total}` : ""],
    ["Estimated start", when(j.est_start)], ["Submitted", when(j.submit_time)],
    ["Eligible", when(j.eligible_time)], ["Started", when(j.start_time)],
    ["Ended", when(j.end_time)], ["Time limit", j.time_limit_s ? duration(j.time_limit_s) : "unlimited"],
    ["Run time", duration(j.time_used_s)], ["Resources", j.tres],
    ["Nodes", j.nodelist], ["Exit code", j.exit_code === null ? "" : j.derived_exit],
    ["End reason", j.end_reason], ["Dependency", j.dependency],
    ["Working directory", j.workdir], ["Output", j.stdout],
    ["Error", j.stderr && j.stderr !== j.stdout ? j.stderr : ""],
    ["Command", j.command], ["CPU time", j.cpu_time_s ? duration(j.cpu_time_s) : ""],
    ["Peak memory", j.max_rss_mb ? mb(j.max_rss_mb) : ""],
  ]);
  const alloc = clear($("job-alloc"));
  if (j.allocation && j.allocation.nodes.length) {
    alloc.append(el("tr", {}, ...["Node", "CPUs", "Cores", "Memory", "GPUs"].map((h) => el("th", { text: h }))));
    for (const n of j.allocation.nodes) {
      alloc.append(el("tr", {}, el("td", { text: n.node }), el("td", { text: n.cpus }),
        el("td", { text: n.cores.join(",") }), el("td", { text: mb(n.mem_mb) }),
        el("td", { text: n.gpus.join(",") || "-" })));
    }
  } else {
    alloc.append(el("tr", {}, el("td", { class: "muted", text: "no allocation (not running)" })));
  }
  const fac = clear($("job-factors"));
  if (data.factors) {
    fac.append(el("tr", {}, ...["Factor", "Value", "Weight", "Contribution"].map((h) => el("th", { text: h }))));
    for (const f of data.factors.factors) {
      fac.append(el("tr", {}, el("td", { text: f.name }), el("td", { text: f.value.toFixed(3) }),
        el("td", { text: f.weight }), el("td", { text: f.contribution.toFixed(1) })));
    }
    fac.append(el("tr", {}, el("th", { text: "total" }), el("td"), el("td"),
      el("th", { text: data.factors.total.toFixed(1) })));
  } else {
    fac.append(el("tr", {}, el("td", { class: "muted", text: "only pending jobs have priority factors" })));
  }
  const cancel = $("job-cancel");
  cancel.hidden = !["PENDING", "RUNNING", "SUSPENDED"].includes(j.state);
  cancel.onclick = async () => {
    cancel.disabled = true;
    try {
      const res = await api("POST", "/jobs/cancel", { ids: [j.job_id] });
      const r = res.results[0];
      if (!r.ok) showError(r.message);
    } catch (e) { showError(e.message); }
    cancel.disabled = false;
  };
}

async function renderNodes() {
  const data = await api("GET", "/nodes");
  const body = clear($("nodes-body"));
  for (const n of data.nodes) {
    body.append(el("tr", { "data-node": n.name },
      el("td", { text: n.name }), el("td", {}, el("span", { class: `state n-${n.state}`, text: n.state })),
      el("td", { text: n.partitions.join(",") }),
      el("td", {}, bar(n.alloc_cpus, n.cpus, `${n.alloc_cpus} / ${n.cpus}`)),
      el("td", {}, bar(n.alloc_mem_mb, n.mem_mb, `${mb(n.alloc_mem_mb)} / ${mb(n.mem_mb)}`)),
      el("td", {}, n.gpus ? bar(n.alloc_gpus, n.gpus, `${n.alloc_gpus} / ${n.gpus}`) : "-"),
      el("td", {}, ...n.jobs.flatMap((id, i) => [i ? " " : "", el("a", { href: `#/job/${id}`, text: id })])),
      el("td", { text: n.reason || (n.connected ? "" : "agent not connected") })));
  }
}

async function renderReservations() {
  const data = await api("GET", "/reservations");
  const body = clear($("resv-body"));
  for (const r of data.reservations) {
    body.append(el("tr", { "data-reservation": r.name },
      el("td", { text: r.name }),
      el("td", {}, el("span", { class: `state r-${r.state}`, "data-state": r.state, text: r.state })),
      el("td", { text: when(r.start_time) }), el("td", { text: when(r.end_time) }),
      el("td", { text: duration(r.duration_s) }),
      el("td", { text: `${r.nodelist} (${r.node_count})` }),
      el("td", { text: r.partition || "-" }),
      el("td", { text: (r.users || []).join(",") || "-" }),
      el("td", { text: (r.accounts || []).join(",") || "-" }),
      el("td", { text: (r.flags || []).join(",") || "-" })));
  }
  const active = data.reservations.filter((r) => r.state === "ACTIVE").length;
  $("resv-summary").textContent = data.reservations.length
    ? `${data.reservations.length} reservation(s), ${active} active` : "No reservations.";
}

const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  return node;
}

function chart(box, data) {
  clear(box);
  const W = 860, H = 260, L = 48, R = 48, T = 12, B = 28;
  const pts = data.series;
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": "allocated CPUs and pending jobs over time" });
  if (!pts.length) { box.append(el("p", { class: "muted", text: "no data" })); return; }
  const t0 = pts[0].t, t1 = pts[pts.length - 1].end;
  const ymax = Math.max(data.total_cpus, ...pts.map((p) => p.cpus), 1);
  const pmax = Math.max(1, ...pts.map((p) => p.pending));
  const x = (t) => L + (W - L - R) * (t - t0) / (t1 - t0);
  const y = (v) => H - B - (H - T - B) * v / ymax;
  const yp = (v) => H - B - (H - T - B) * v / pmax;
  root.append(svg("line", { x1: L, y1: y(data.total_cpus), x2: W - R, y2: y(data.total_cpus), class: "cap" }));
  let d = `M ${x(t0)} ${y(0)}`;
  for (const p of pts) d += ` L ${x(p.t)} ${y(p.cpus)} L ${x(p.end)} ${y(p.cpus)}`;
  d += ` L ${x(t1)} ${y(0)} Z`;
  root.append(svg("path", { d, class: "area" }));
  let dp = "";
  pts.forEach((p, i) => { dp += `${i ? "L" : "M"} ${x(p.end)} ${yp(p.pending)} `; });
  root.append(svg("path", { d: dp, class: "pending" }));
  for (const [v, yy, anchor, xx] of [[0, y(0), "end", L - 4], [ymax, y(ymax), "end", L - 4],
    [pmax, yp(pmax), "start", W - R + 4]]) {
    const t = svg("text", { x: xx, y: yy + 4, "text-anchor": anchor });
    t.textContent = String(Math.round(v));
    root.append(t);
  }
  for (const [tt, anchor] of [[t0, "start"], [t1, "end"]]) {
    const t = svg("text", { x: x(tt), y: H - 8, "text-anchor": anchor });
    t.textContent = new Date(tt * 1000).toLocaleString();
    root.append(t);
  }
  box.append(root);
  box.append(el("p", { class: "legend" }, el("span", { class: "k-area", text: "allocated CPUs" }),
    el("span", { class: "k-cap", text: `capacity (${data.total_cpus} CPUs)` }),
    el("span", { class: "k-pending", text: "pending jobs (right axis)" })));
}

function usageTable(table, rows) {
  clear(table);
  table.append(el("tr", {}, ...["Name", "Jobs", "CPU-h", "GPU-h", "Share", "Mean wait"].map((h) => el("th", { text: h }))));
  for (const r of rows) {
    table.append(el("tr", {}, el("td", { text: r.name }), el("td", { text: r.jobs }),
      el("td", { text: r.cpu_hours.toFixed(2) }), el("td", { text: r.gpu_hours.toFixed(2) }),
      el("td", { text: pct(r.share) }), el("td", { text: duration(r.wait_mean_s) })));
  }
  if (!rows.length) table.append(el("tr", {}, el("td", { colspan: "6", class: "muted", text: "no usage in this period" })));
}

async function renderUtilization() {
  const data = await api("GET", `/ops/utilization?hours=${$("util-hours").value}&bins=60`);
  const s = data.summary;
  const cards = clear($("util-summary"));
  for (const [k, v] of [["CPU utilization", pct(s.cpu_utilization)],
    ["GPU utilization", data.total_gpus ? pct(s.gpu_utilization) : "no GPUs"],
    ["CPU-hours allocated", s.allocated_cpu_hours.toFixed(2)],
    ["Jobs started", s.jobs_started], ["Jobs ended", s.jobs_ended],
    ["Median wait", duration(s.wait_median_s)]]) {
    cards.append(el("div", { class: "card" }, el("div", { class: "v", text: v }), el("div", { class: "k", text: k })));
  }
  chart($("util-chart"), data);
  usageTable($("util-users"), data.users);
  usageTable($("util-accounts"), data.accounts);
}

async function renderFairshare() {
  const data = await api("GET", "/ops/fairshare");
  const body = clear($("fs-body"));
  for (const r of data.rows) {
    body.append(el("tr", { class: r.user ? "user" : "account" },
      el("td", { text: r.user ? "" : "\u00a0".repeat(2 * r.depth) + r.account }),
      el("td", { text: r.user }), el("td", { text: r.shares }),
      el("td", { text: r.norm_shares.toFixed(3) }), el("td", { text: (r.raw_usage / 3600).toFixed(2) }),
      el("td", { text: r.eff_usage.toFixed(3) }),
      el("td", {}, bar(r.fairshare, 1, r.fairshare.toFixed(3))),
      el("td", { text: r.fair_tree === null ? "" : r.fair_tree.toFixed(3) })));
  }
}

async function apiBlob(path) {
  const headers = {};
  const token = localStorage.getItem(TOKEN_KEY);
  if (token) headers["Authorization"] = `Bearer ${token}`;
  const res = await fetch(API + path, { headers, cache: "no-store" });
  if (!res.ok) throw new ApiError(res.status, "not_found", `${path}: ${res.status}`);
  return res.blob();
}

function num(v) { return v === null || v === undefined ? "-" : Number(v).toPrecision(3); }

async function renderChecks(runId) {
  const data = await api("GET", "/ops/checks");
  const body = clear($("checks-body"));
  for (const r of data.runs) {
    const verdict = r.ok ? el("span", { class: "ok", text: "ok" })
      : el("span", { class: "bad", title: (r.verdicts || []).join("\n"), text: `outliers: ${r.outliers.join(", ")}` });
    body.append(el("tr", { "data-run": r.run_id },
      el("td", {}, el("a", { href: `#/checks/${encodeURIComponent(r.run_id)}`, text: r.run_id })),
      el("td", { text: when(r.started) }), el("td", { text: r.trigger || "command" }),
      el("td", { text: r.nodes }), el("td", { text: num(r.median_bandwidth_mb_s) }),
      el("td", { text: num(r.median_latency_us) }), el("td", { text: num(r.median_hpl_gflops) }),
      el("td", {}, verdict), el("td", { text: r.files.join(" ") })));
  }
  if (!data.runs.length) body.append(el("tr", {}, el("td", { colspan: "9", class: "muted", text: "no check runs yet (corral check cluster)" })));
  const box = clear($("check-detail"));
  const run = data.runs.find((r) => r.run_id === runId);
  if (!run) return;
  box.append(el("h2", { text: `Run ${run.run_id}` }));
  for (const v of run.verdicts || []) box.append(el("p", { class: "bad", text: v }));
  for (const img of ["heatmap.png", "nodes.png"]) {
    if (!run.files.includes(img)) continue;
    const blob = await apiBlob(`/ops/checks/${encodeURIComponent(run.run_id)}/${img}`);
    const url = await new Promise((ok) => { const fr = new FileReader(); fr.onload = () => ok(fr.result); fr.readAsDataURL(blob); });
    box.append(el("img", { src: url, alt: img, class: "check-plot", id: `check-${img.replace(".png", "")}` }));
  }
  if (run.files.includes("report.md")) {
    const text = await (await apiBlob(`/ops/checks/${encodeURIComponent(run.run_id)}/report.md`)).text();
    box.append(el("h3", { text: "report.md" }), el("pre", { class: "report", id: "check-report", text: text }));
  }
}

async function submitForm(ev) {
  ev.preventDefault();
  const form = {};
  for (const [k, v] of new FormData($("submit-form")).entries()) form[k] = v;
  const out = $("submit-result");
  out.textContent = "submitting...";
  $("s-submit").disabled = true;
  try {
    const res = await api("POST", "/ops/submit", form);
    clear(out).append("Submitted job ", el("a", { href: `#/job/${res.display_id}`, id: "submitted-link", text: res.display_id }));
    showError("");
  } catch (e) {
    out.textContent = "";
    showError(e.message);
  } finally {
    $("s-submit").disabled = false;
  }
}

// ---- routing --------------------------------------------------------------------------

async function route() {
  showError("");
  const hash = location.hash || "#/queue";
  if (!localStorage.getItem(TOKEN_KEY)) { showLogin(); return; }
  $("nav").hidden = false;
  $("logout").hidden = false;
  const parts = hash.replace(/^#\/?/, "").split("/");
  const view = parts[0] || "queue";
  try { await loadPartitions(); } catch (e) { if (e.status === 401) return; }
  if (view === "job" && parts[1]) { show("job"); every(() => renderJob(decodeURIComponent(parts[1]))); }
  else if (view === "nodes") { show("nodes"); every(renderNodes); }
  else if (view === "reservations") { show("reservations"); every(renderReservations); }
  else if (view === "utilization") { show("utilization"); stopTimer(); renderUtilization().catch((e) => showError(e.message)); }
  else if (view === "fairshare") { show("fairshare"); stopTimer(); renderFairshare().catch((e) => showError(e.message)); }
  else if (view === "checks") { show("checks"); stopTimer(); renderChecks(parts[1] ? decodeURIComponent(parts[1]) : null).catch((e) => showError(e.message)); }
  else if (view === "submit") { show("submit"); stopTimer(); }
  else { show("queue"); every(renderQueue); }
}

async function whoami() {
  try {
    const me = await api("GET", "/whoami");
    $("whoami").textContent = `${me.user}${me.operator ? " (operator)" : ""}`;
    const ping = await api("GET", "/ping");
    $("cluster").textContent = `cluster ${ping.cluster}`;
    return true;
  } catch (e) {
    return false;
  }
}

function init() {
  const m = location.hash.match(/token=([^&]+)/);
  if (m) {
    localStorage.setItem(TOKEN_KEY, decodeURIComponent(m[1]));
    history.replaceState(null, "", location.pathname + "#/queue");
  }
  $("login-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    localStorage.setItem(TOKEN_KEY, $("login-token").value.trim());
    if (await whoami()) { showError(""); route(); }
  });
  $("logout").addEventListener("click", () => { localStorage.removeItem(TOKEN_KEY); showLogin(); });
  $("queue-filters").addEventListener("input", () => renderQueue().catch((e) => showError(e.message)));
  $("queue-filters").addEventListener("submit", (ev) => ev.preventDefault());
  $("util-hours").addEventListener("change", () => renderUtilization().catch((e) => showError(e.message)));
  $("submit-form").addEventListener("submit", submitForm);
  window.addEventListener("hashchange", route);
  if (localStorage.getItem(TOKEN_KEY)) whoami().then((ok) => { if (ok) route(); });
  else showLogin();
}

document.addEventListener("DOMContentLoaded", init);
