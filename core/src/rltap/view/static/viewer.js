// rltap viewer: plain JavaScript, no build step, nothing loaded from outside this server.
"use strict";

const LINK_COLOURS = { root: "#6b7a90", prefix: "#2d6cdf", rewrite: "#8e44ad", handoff: "#d35400", subagent: "#16a085", carry: "#b7950b" };
// A light fill per policy (a run of several policies), the same hue for a name on every page.
function policyFill(policy) {
  let hash = 0;
  for (const ch of policy) hash = (hash * 31 + ch.codePointAt(0)) % 360;
  return `hsl(${hash}, 70%, 90%)`;
}
const view = { run: null, sort: "started", desc: false, session: null, interaction: null };
// The latest request of each kind: a reply that arrives after a newer request was made (typing
// in the search box, clicking from session to session) is dropped, not drawn over the newer one.
const latest = { sessions: 0, session: 0, interaction: 0 };
async function newest(kind, url) {
  const ticket = ++latest[kind];
  const body = await getJson(url);
  return ticket === latest[kind] ? body : null;
}
const $ = (selector) => document.querySelector(selector);
const SVG = "http://www.w3.org/2000/svg";

function el(tag, attrs = {}, text = null) {
  const node = tag.startsWith("svg:") ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
  if (text !== null) node.textContent = text;
  return node;
}

async function getJson(url) {
  const reply = await fetch(url);
  const body = await reply.json();
  if (!reply.ok) throw new Error(body.error ? body.error.message : reply.statusText);
  return body;
}

const runUrl = (path) => `/api/runs/${encodeURIComponent(view.run)}${path}`;
const fmt = (value) => (value === null || value === undefined ? "-" : Number(value).toFixed(3).replace(/\.?0+$/, "") || "0");

async function loadRuns() {
  const { runs } = await getJson("/api/runs");
  const select = $("#run");
  select.replaceChildren(...runs.map((run) => el("option", { value: run.name }, run.name)));
  select.onchange = () => selectRun(runs.find((run) => run.name === select.value));
  await selectRun(runs[0]);
}

async function selectRun(run) {
  view.run = run.name;
  $("#run-info").textContent = `${run.sessions} sessions`;
  drawHistogram($("#histogram"), run.histogram);
  $("#steps-chart").hidden = run.steps.length === 0;
  if (run.steps.length) drawSteps($("#steps"), run.steps);
  $("#session").hidden = $("#detail").hidden = true;
  await loadSessions();
}

async function loadSessions() {
  const params = new URLSearchParams({ sort: view.sort, desc: view.desc, limit: 200 });
  if ($("#state").value) params.set("state", $("#state").value);
  if ($("#search").value) params.set("q", $("#search").value);
  if ($("#errors-only").checked) params.set("errors", "true");
  const body = await newest("sessions", runUrl(`/sessions?${params}`));
  if (body === null) return;
  const current = $("#state").value;
  $("#state").replaceChildren(el("option", { value: "" }, "all"), ...body.states.map((s) => el("option", { value: s }, s)));
  $("#state").value = current;
  $("#session-count").textContent = `(${body.total} shown ${body.sessions.length})`;
  for (const th of document.querySelectorAll("#sessions th[data-sort]")) {
    th.classList.toggle("sorted", th.dataset.sort === view.sort);
    th.classList.toggle("desc", th.dataset.sort === view.sort && view.desc);
  }
  $("#sessions tbody").replaceChildren(...body.sessions.map(sessionRow));
}

function sessionRow(s) {
  const row = el("tr", { "data-session": s.session_id });
  const cells = [
    new Date(s.started * 1000).toLocaleTimeString(), s.task_id || "", s.session_id.slice(0, 12),
    s.state, fmt(s.reward), s.calls, s.generated_tokens, s.errors,
  ];
  cells.forEach((value, i) => row.append(el("td", { class: i >= 4 ? "num" : "" }, String(value))));
  row.children[3].classList.add(`state-${s.state}`);
  if (s.errors > 0) row.children[7].classList.add("errors");
  row.onclick = () => openSession(s.session_id);
  return row;
}

async function openSession(sessionId) {
  view.session = sessionId;
  for (const row of document.querySelectorAll("#sessions tbody tr")) row.classList.toggle("selected", row.dataset.session === sessionId);
  const discount = $("#discount").value || "1";
  const tree = await newest("session", runUrl(`/sessions/${encodeURIComponent(sessionId)}?discount=${discount}`));
  if (tree === null) return;
  $("#session").hidden = false;
  $("#session-title").textContent = `${tree.session_id} · ${tree.task_id || "no task"} · ${tree.state}`;
  drawTree($("#tree"), tree.nodes);
}

function layout(nodes) {
  const byId = new Map(nodes.map((n) => [n.interaction_id, { ...n, children: [] }]));
  const roots = [];
  for (const node of byId.values()) {
    const parent = node.parent_id && byId.get(node.parent_id);
    (parent ? parent.children : roots).push(node);
  }
  let column = 0;
  const place = (node, depth) => {
    node.depth = depth;
    node.children.forEach((child) => place(child, depth + 1));
    node.x = node.children.length ? node.children.reduce((sum, c) => sum + c.x, 0) / node.children.length : column++;
  };
  roots.forEach((root) => place(root, 0));
  return { placed: [...byId.values()], columns: column };
}

function drawTree(svg, nodes) {
  const W = 170, H = 58, GX = 30, GY = 46;
  const { placed, columns } = layout(nodes);
  const depth = Math.max(0, ...placed.map((n) => n.depth)) + 1;
  svg.setAttribute("width", columns * (W + GX) + GX);
  svg.setAttribute("height", depth * (H + GY) + GY);
  svg.replaceChildren();
  const pos = (n) => ({ x: GX + n.x * (W + GX), y: GY / 2 + n.depth * (H + GY) });
  const byId = new Map(placed.map((n) => [n.interaction_id, n]));
  for (const node of placed) {
    const parent = node.parent_id && byId.get(node.parent_id);
    if (!parent) continue;
    const a = pos(parent), b = pos(node);
    const colour = LINK_COLOURS[node.link] || "#999";
    const d = `M${a.x + W / 2},${a.y + H} C${a.x + W / 2},${a.y + H + GY / 2} ${b.x + W / 2},${b.y - GY / 2} ${b.x + W / 2},${b.y}`;
    svg.append(el("svg:path", { d, class: `edge link-${node.link}`, stroke: colour }));
    svg.append(el("svg:text", { x: (a.x + b.x) / 2 + W / 2 + 4, y: b.y - GY / 2 + 4, class: "edge-label", fill: colour }, node.link));
  }
  for (const node of placed) {
    const { x, y } = pos(node);
    const group = el("svg:g", { class: `node ${node.status}`, transform: `translate(${x},${y})`, "data-interaction": node.interaction_id });
    group.append(el("svg:rect", node.policy ? { width: W, height: H, style: `fill: ${policyFill(node.policy)}`, "data-policy": node.policy } : { width: W, height: H }));
    const policy = node.policy ? ` · ${node.policy}` : "";
    group.append(el("svg:text", { x: 8, y: 16 }, `${node.interaction_id.slice(-10)}${policy} ${node.status === "complete" ? "" : node.status}`));
    group.append(el("svg:text", { x: 8, y: 32, class: "reward" }, `reward ${fmt(node.reward)} → ${fmt(node.discounted)}`));
    group.append(el("svg:text", { x: 8, y: 48 }, `${node.input_len} + ${node.output_len} tokens`));
    group.append(el("svg:title", {}, node.error || node.output_text.slice(0, 200)));
    group.onclick = () => openInteraction(node.interaction_id);
    svg.append(group);
  }
}

async function openInteraction(interactionId) {
  view.interaction = interactionId;
  for (const g of document.querySelectorAll("#tree .node")) g.classList.toggle("selected", g.dataset.interaction === interactionId);
  const detail = await newest("interaction", runUrl(`/interactions/${encodeURIComponent(interactionId)}`));
  if (detail === null) return;
  $("#detail").hidden = false;
  $("#detail-title").textContent = detail.interaction_id;
  $("#detail-meta").textContent = `parent ${detail.parent_id || "none"} · link ${detail.link} · agent ${detail.agent_id || "-"} · ` +
    (detail.policy ? `policy ${detail.policy} · ` : "") +
    `status ${detail.status}${detail.error ? ` (${detail.error})` : ""} · reward ${fmt(detail.reward)} · stop ${detail.stop_reason || "-"}`;
  const messages = [...detail.messages, ...(detail.output_message_list || []).map((m) => ({ ...m, output: true }))];
  $("#messages").replaceChildren(...messages.map(messageBlock));
  $("#tokens").replaceChildren(...detail.tokens.map(tokenSpan));
}

function messageBlock(message) {
  const block = el("div", { class: `message role-${message.role}` });
  block.append(el("span", { class: "role" }, message.output ? `${message.role} (this call's reply)` : message.role));
  let text = typeof message.content === "string" ? message.content : JSON.stringify(message.content);
  if (message.tool_calls) text += `\n${JSON.stringify(message.tool_calls)}`;
  block.append(document.createTextNode(text || ""));
  return block;
}

function tokenSpan(token) {
  const p = Math.exp(token.logprob);
  const span = el("span", {
    class: "token", "data-id": token.id, "data-logprob": token.logprob, "data-version": token.version,
    style: `background: hsl(${Math.round(120 * p)}, 75%, 78%)`,
  }, token.text);
  const info = `id ${token.id}\ntext ${JSON.stringify(token.text)}\nlogprob ${token.logprob.toFixed(4)}\nversion ${token.version}`;
  span.onmouseenter = (event) => {
    const tip = $("#tooltip");
    tip.textContent = info;
    tip.style.left = `${event.clientX + 12}px`;
    tip.style.top = `${event.clientY + 12}px`;
    tip.hidden = false;
  };
  span.onmouseleave = () => { $("#tooltip").hidden = true; };
  return span;
}

function axes(svg, w, h, pad) {
  svg.append(el("svg:line", { x1: pad, y1: h - pad, x2: w - 4, y2: h - pad, stroke: "#999" }));
  svg.append(el("svg:line", { x1: pad, y1: 4, x2: pad, y2: h - pad, stroke: "#999" }));
}

function drawHistogram(svg, histogram) {
  const w = +svg.getAttribute("width"), h = +svg.getAttribute("height"), pad = 24;
  svg.replaceChildren();
  axes(svg, w, h, pad);
  const counts = histogram.counts;
  if (!counts.length) return;
  const top = Math.max(...counts), bar = (w - pad - 4) / counts.length;
  counts.forEach((count, i) => {
    const height = ((h - pad - 8) * count) / top;
    const rect = el("svg:rect", { class: "bar", x: pad + i * bar + 1, y: h - pad - height, width: Math.max(1, bar - 2), height, fill: "#2d6cdf" });
    rect.append(el("svg:title", {}, `${fmt(histogram.edges[i])} .. ${fmt(histogram.edges[i + 1])}: ${count}`));
    svg.append(rect);
  });
  svg.append(el("svg:text", { x: pad, y: h - 6, "font-size": 10 }, fmt(histogram.edges[0])));
  svg.append(el("svg:text", { x: w - 30, y: h - 6, "font-size": 10 }, fmt(histogram.edges[histogram.edges.length - 1])));
}

function drawSteps(svg, steps) {
  const w = +svg.getAttribute("width"), h = +svg.getAttribute("height"), pad = 24;
  svg.replaceChildren();
  axes(svg, w, h, pad);
  const values = steps.map((s) => s.reward_mean);
  const low = Math.min(...values), high = Math.max(...values), span = high - low || 1;
  const x = (i) => pad + ((w - pad - 10) * i) / Math.max(1, steps.length - 1);
  const y = (v) => h - pad - ((h - pad - 10) * (v - low)) / span;
  svg.append(el("svg:polyline", { points: steps.map((s, i) => `${x(i)},${y(s.reward_mean)}`).join(" "), fill: "none", stroke: "#2d6cdf", "stroke-width": 2 }));
  steps.forEach((s, i) => {
    const dot = el("svg:circle", { class: "step", cx: x(i), cy: y(s.reward_mean), r: 3, fill: "#2d6cdf" });
    dot.append(el("svg:title", {}, `step ${s.step}: reward ${fmt(s.reward_mean)}`));
    svg.append(dot);
  });
}

function legend() {
  $(".legend").replaceChildren(...Object.entries(LINK_COLOURS).filter(([k]) => k !== "root").map(([kind, colour]) => el("span", { style: `color:${colour}` }, `— ${kind}`)));
}

document.addEventListener("DOMContentLoaded", () => {
  for (const th of document.querySelectorAll("#sessions th[data-sort]")) {
    th.onclick = () => {
      view.desc = view.sort === th.dataset.sort ? !view.desc : th.dataset.sort !== "started";
      view.sort = th.dataset.sort;
      loadSessions();
    };
  }
  $("#state").onchange = loadSessions;
  $("#errors-only").onchange = loadSessions;
  $("#search").oninput = loadSessions;
  $("#discount").onchange = () => view.session && openSession(view.session);
  legend();
  loadRuns().catch((error) => { document.body.prepend(el("p", { class: "errors" }, String(error))); });
});
