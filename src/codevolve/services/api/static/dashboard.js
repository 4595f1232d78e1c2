/* codevolve dashboard: a score-over-time chart and MAP-Elites heatmaps drawn as SVG, kept live by
   polling the server's JSON. No libraries: everything the pages draw is below. */
"use strict";
const codevolve = (() => {
  const SVG = "http://www.w3.org/2000/svg";
  const POLL_MS = 2000;
  const FINISHED = new Set(["done", "failed", "cancelled"]);
  const ISLAND_COLORS = ["#4f7cff", "#1f9d61", "#e07b39", "#b04fd6", "#d64550", "#0f9bb0", "#c9a227", "#7a869a"];
  // Perceptually ordered stops (dark blue -> teal -> yellow), like viridis.
  const STOPS = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];

  function el(name, attrs, parent) {
    const node = document.createElementNS(SVG, name);
    for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
    if (parent) parent.appendChild(node);
    return node;
  }
  function text(parent, x, y, content, attrs) {
    const node = el("text", Object.assign({ x, y }, attrs || {}), parent);
    node.textContent = content;
    return node;
  }
  const esc = (s) => String(s).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
  const tokens = (n) => (n >= 1e6 ? `${(n / 1e6).toFixed(1)}M` : n >= 1e3 ? `${(n / 1e3).toFixed(1)}k` : String(n));
  const fmt = (v) => (v === null || v === undefined ? "–" : Number(v).toFixed(4));
  function niceTicks(lo, hi, count) {
    const span = hi - lo || 1;
    const step0 = span / count;
    const mag = Math.pow(10, Math.floor(Math.log10(step0)));
    const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => span / s <= count) || mag * 10;
    const ticks = [];
    for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) ticks.push(+t.toFixed(10));
    return ticks;
  }
  function color(t) {
    const x = Math.min(1, Math.max(0, t)) * (STOPS.length - 1);
    const i = Math.min(STOPS.length - 2, Math.floor(x));
    const f = x - i;
    const c = STOPS[i].map((a, k) => Math.round(a + (STOPS[i + 1][k] - a) * f));
    return `rgb(${c[0]},${c[1]},${c[2]})`;
  }

  /* Score over proposals: every evaluated program as a faint dot, each island's best so far as a
     thin step line, and the job's best so far as the thick one. */
  function drawChart(svg, data) {
    svg.replaceChildren();
    const W = 960, H = 320, L = 66, R = 18, T = 14, B = 36;
    const points = data.history; // [proposal index, island, score]
    const job = data.job;
    svg.dataset.points = String(points.length);
    if (!points.length) {
      text(svg, W / 2, H / 2, "No evaluated program yet", { "text-anchor": "middle" });
      return;
    }
    const xMin = Math.min(0, points[0][0]); // the initial program is proposal -1
    const xMax = Math.max(job.proposals, points[points.length - 1][0], 1);
    let yLo = Infinity, yHi = -Infinity;
    for (const p of points) { yLo = Math.min(yLo, p[2]); yHi = Math.max(yHi, p[2]); }
    const pad = (yHi - yLo) * 0.08 || Math.abs(yHi) * 0.05 || 1;
    yLo -= pad; yHi += pad;
    const x = (v) => L + ((v - xMin) / (xMax - xMin)) * (W - L - R);
    const y = (v) => T + (1 - (v - yLo) / (yHi - yLo)) * (H - T - B);
    const axis = el("g", { class: "axis" }, svg);
    for (const t of niceTicks(yLo, yHi, 5)) {
      el("line", { class: "gridline", x1: L, x2: W - R, y1: y(t), y2: y(t) }, axis);
      text(axis, L - 12, y(t) + 4, t.toPrecision(4).replace(/\.?0+$/, ""), { "text-anchor": "end" });
    }
    for (const t of niceTicks(0, xMax, 8)) {
      text(axis, x(t), H - B + 16, String(t), { "text-anchor": "middle" });
    }
    text(axis, W - R, H - 4, "proposals", { "text-anchor": "end" });
    const dots = el("g", {}, svg);
    const islandBest = new Map(), islandPath = new Map();
    let best = -Infinity, bestPath = "";
    for (const [index, island, score] of points) {
      const c = ISLAND_COLORS[island % ISLAND_COLORS.length];
      el("circle", { class: "dot", cx: x(index).toFixed(1), cy: y(score).toFixed(1), r: 2.2, fill: c }, dots);
      const prev = islandBest.get(island);
      if (prev === undefined || score > prev) {
        const path = islandPath.get(island) || "";
        islandPath.set(island, path + (path ? ` H${x(index).toFixed(1)} V${y(score).toFixed(1)}` : `M${x(index).toFixed(1)},${y(score).toFixed(1)}`));
        islandBest.set(island, score);
      }
      if (score > best) {
        bestPath += bestPath ? ` H${x(index).toFixed(1)} V${y(score).toFixed(1)}` : `M${x(index).toFixed(1)},${y(score).toFixed(1)}`;
        best = score;
      }
    }
    const end = x(xMax).toFixed(1);
    const legend = document.getElementById("chart-legend");
    if (legend) legend.replaceChildren();
    const islands = [...islandPath.keys()].sort((a, b) => a - b);
    if (islands.length > 1) {
      for (const island of islands) {
        const c = ISLAND_COLORS[island % ISLAND_COLORS.length];
        el("path", { class: "island", d: islandPath.get(island) + ` H${end}`, stroke: c }, svg);
        if (legend) legend.insertAdjacentHTML("beforeend", `<span><i style="background:${c}"></i>island ${island}</span>`);
      }
    }
    el("path", { class: "best", d: bestPath + ` H${end}` }, svg);
    if (legend) legend.insertAdjacentHTML("afterbegin", `<span><i style="background:var(--fg)"></i>best so far ${fmt(best)}</span>`);
  }

  /* One grid per island: columns are the first feature's bins, rows the second's; a cell's color
     is its elite's score on a scale shared by all islands. Empty cells stay grey. */
  function drawHeatmaps(root, data) {
    root.replaceChildren();
    const features = data.features || [];
    const all = data.islands.flatMap((i) => i.cells.filter((c) => c.score !== null));
    let lo = Infinity, hi = -Infinity;
    for (const c of all) { lo = Math.min(lo, c.score); hi = Math.max(hi, c.score); }
    let cols = features[0] ? features[0].bins : 1, rows = features[1] ? features[1].bins : 1;
    for (const c of all) { cols = Math.max(cols, (c.cell[0] ?? 0) + 1); rows = Math.max(rows, (c.cell[1] ?? 0) + 1); }
    const size = Math.max(10, Math.min(30, Math.floor(300 / Math.max(cols, rows))));
    const L = 26, B = 22;
    for (const island of data.islands) {
      const box = document.createElement("div");
      box.className = "heatmap";
      box.innerHTML = `<div class="title">Island ${island.island} · ${island.cells.length} elite${island.cells.length === 1 ? "" : "s"}</div>`;
      const svg = el("svg", { width: L + cols * size + 4, height: rows * size + B, "data-island": island.island }, box);
      const byCell = new Map();
      for (const c of island.cells) {
        const key = `${c.cell[0] ?? 0},${c.cell[1] ?? 0}`;
        const seen = byCell.get(key);
        if (!seen || c.score > seen.score) byCell.set(key, c); // more than two features: best of the rest
      }
      for (let r = 0; r < rows; r++) {
        for (let q = 0; q < cols; q++) {
          const elite = byCell.get(`${q},${r}`);
          const yPos = (rows - 1 - r) * size; // row 0 at the bottom, like a plot
          const rect = el("rect", { class: elite ? "cell filled" : "cell", x: L + q * size, y: yPos, width: size, height: size, rx: 3 }, svg);
          if (elite) {
            const t = hi > lo ? (elite.score - lo) / (hi - lo) : 1;
            rect.setAttribute("fill", color(t));
            rect.dataset.score = String(elite.score);
            const title = el("title", {}, rect);
            title.textContent = `cell (${elite.cell.join(", ")}) · score ${fmt(elite.score)} · ${elite.program_id.slice(0, 8)}`;
            rect.addEventListener("click", () => { window.location.href = `/programs/${elite.program_id}`; });
          } else {
            rect.setAttribute("fill", "var(--empty-cell)");
          }
        }
      }
      for (let q = 0; q < cols; q += Math.ceil(cols / 10)) text(svg, L + q * size + size / 2, rows * size + 14, String(q), { "text-anchor": "middle" });
      for (let r = 0; r < rows; r += Math.ceil(rows / 10)) text(svg, L - 6, (rows - 1 - r) * size + size / 2 + 4, String(r), { "text-anchor": "end" });
      root.appendChild(box);
    }
    const axes = document.getElementById("heatmap-axes");
    if (axes) axes.textContent = features.length ? `x: ${features[0].name}` + (features[1] ? ` · y: ${features[1].name}` : "") : "";
    const scale = document.getElementById("heatmap-scale");
    if (scale && all.length) {
      const stops = STOPS.map((_, i) => color(i / (STOPS.length - 1))).join(",");
      scale.innerHTML = `<span>${fmt(lo)}</span><span class="bar" style="background:linear-gradient(90deg,${stops})"></span><span>${fmt(hi)}</span><span>elite score</span>`;
    }
  }

  function renderTop(tbody, top) {
    tbody.innerHTML = top.length ? top.map((p, i) => `<tr><td class="muted">${i + 1}</td>
      <td><a class="mono" href="/programs/${p.id}">${p.id.slice(0, 8)}</a></td>
      <td class="num">${fmt(p.score)}</td><td class="num">${p.island}</td><td class="num">${p.generation}</td>
      <td class="num">${p.proposal_index < 0 ? "initial" : p.proposal_index}</td><td class="mono small">${p.cell ? p.cell.join(",") : "–"}</td>
      <td class="small muted">${esc(p.proposer || "–")}</td></tr>`).join("")
      : `<tr><td colspan="8" class="empty">No evaluated program yet</td></tr>`;
  }

  function renderStats(job) {
    const set = (id, html) => { const n = document.getElementById(id); if (n) n.innerHTML = html; };
    set("stat-best", fmt(job.best_score));
    set("stat-proposals", `${job.proposals}<span class="of"> / ${job.max_proposals}</span>`);
    set("stat-wall", `${job.wall_s.toFixed(1)} s` + (job.max_wall_s ? `<span class="of"> / ${job.max_wall_s} s</span>` : ""));
    const p = job.programs;
    set("stat-programs", `<span class="ok">${p.evaluated}</span> evaluated · <span class="warn">${p.rejected}</span> rejected · <span class="bad">${p.failed}</span> failed · ${p.pending} pending`);
    const bar = document.getElementById("bar-proposals");
    if (bar) bar.style.width = `${Math.min(100, (100 * job.proposals) / job.max_proposals)}%`;
    const wall = document.getElementById("bar-wall");
    if (wall && job.max_wall_s) wall.style.width = `${Math.min(100, (100 * job.wall_s) / job.max_wall_s)}%`;
    const u = job.usage;
    set("stat-usage", u && (u.tokens_in || u.tokens_out || u.cost_usd)
      ? `${tokens(u.tokens_in)} in · ${tokens(u.tokens_out)} out tokens · $${u.cost_usd.toFixed(4)}` + (u.max_cost_usd ? ` / $${u.max_cost_usd}` : "")
      : "");
    const state = document.getElementById("job-state");
    if (state) { state.textContent = job.state; state.className = `state state-${job.state}`; }
  }

  function renderFleet(unreachable) {
    const banner = document.getElementById("fleet-banner");
    if (!banner) return;
    banner.hidden = !unreachable;
    if (unreachable) banner.textContent = `${unreachable}; this job's programs wait until its workers can be reached again`;
  }

  function jobPage(jobId) {
    const render = (data) => {
      renderStats(data.job);
      renderFleet(data.fleet_unreachable);
      drawChart(document.getElementById("score-chart"), data);
      drawHeatmaps(document.getElementById("heatmaps"), data);
      renderTop(document.querySelector("#top-table tbody"), data.top);
      document.body.dataset.rendered = "true";
      return data;
    };
    let data = render(JSON.parse(document.getElementById("job-data").textContent));
    const poll = async () => {
      if (FINISHED.has(data.job.state)) return;
      try {
        const response = await fetch(`/jobs/${jobId}/live.json`, { credentials: "same-origin" });
        if (response.ok) {
          data = render(await response.json());
          document.getElementById("job-updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
        }
      } finally {
        setTimeout(poll, POLL_MS);
      }
    };
    setTimeout(poll, POLL_MS);
  }

  function jobsPage() {
    const poll = async () => {
      try {
        const response = await fetch("/live/jobs.json", { credentials: "same-origin" });
        if (!response.ok) return;
        const { jobs } = await response.json();
        if (!jobs.some((j) => !FINISHED.has(j.state) && j.state !== "paused")) return; // nothing moves
        const tbody = document.querySelector("#jobs-table tbody");
        tbody.innerHTML = jobs.map((j) => `<tr><td><a class="mono" href="/jobs/${j.id}">${j.id.slice(0, 8)}</a></td>
          <td>${esc(j.problem)}</td><td><span class="state state-${esc(j.state)}">${esc(j.state)}</span></td><td>${esc(j.owner || "–")}</td>
          <td class="num">${fmt(j.best_score)}</td>
          <td><div class="progress"><div style="width:${Math.min(100, (100 * j.proposals) / j.max_proposals)}%"></div></div>
          <span class="small muted">${j.proposals} / ${j.max_proposals}</span></td>
          <td class="num">${j.wall_s.toFixed(0)} s</td><td class="small muted">${j.created_at.slice(0, 19).replace("T", " ")}</td></tr>`).join("");
        document.getElementById("jobs-updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
      } catch (error) {
        /* the next poll tries again */
      } finally {
        setTimeout(poll, POLL_MS * 2);
      }
    };
    setTimeout(poll, POLL_MS);
  }

  /* A problem's results page (GET /api/v1/<segment>): the table its plug-in describes
     (#results-layout: the columns, the summary's grid and counts line) over the rows, redrawn
     while one of its jobs still moves. A column's flag adds its note where the flag is true
     (KernelBench: "(ref)", a best that is still the reference's own code). */
  const times = (v) => (v === null || v === undefined ? "–" : `${Number(v).toFixed(2)}×`);
  const share = (v) => (v === null || v === undefined ? "–" : Number(v).toFixed(2));
  const number = (v, digits) => (v === null || v === undefined ? "–" : Number(v).toFixed(digits));

  function resultsCell(column, row) {
    const v = row[column.field];
    const note = column.flag && row[column.flag] ? ` <span class="muted small">${esc(column.note)}</span>` : "";
    switch (column.kind) {
      case "yes_no": return `<td class="${v ? "ok" : "bad"}">${v ? "yes" : "no"}${note}</td>`;
      case "times": return `<td class="num">${times(v)}${note}</td>`;
      case "number": return `<td class="num">${number(v, column.digits)}${note}</td>`;
      case "tag": return `<td>${v ? `<span class="tag">${esc(column.title.toLowerCase())}</span>` : ""}${note}</td>`;
      case "state": return `<td><span class="state state-${esc(v)}">${esc(v)}</span>${note}</td>`;
      case "job": return `<td><a class="mono" href="/jobs/${esc(v)}">${esc(String(v).slice(0, 8))}</a>${note}</td>`;
      default: return `<td>${v === null || v === undefined ? "–" : esc(v)}${note}</td>`;
    }
  }

  function renderResults(layout, data) {
    const { rows, summary } = data;
    if (layout.grid) {
      document.querySelector("#results-summary tbody").innerHTML = layout.grid.lines.map(([field, label]) => {
        const values = summary[field] || {};
        const cells = layout.grid.columns.map((key) => `<td class="num" data-p="${esc(key)}">${share(values[key])}</td>`).join("");
        return `<tr data-line="${esc(field)}"><td>${esc(label)}</td>${cells}</tr>`;
      }).join("");
      document.getElementById("results-counts").textContent = layout.counts.replace(/\{(\w+)(\|s)?\}/g,
        (_, field, plural) => (plural ? (summary[field] === 1 ? "" : "s") : String(summary[field])));
    }
    const empty = esc(layout.empty).replace(/`([^`]*)`/g, "<code>$1</code>");
    document.querySelector("#results-table tbody").innerHTML = rows.length
      ? rows.map((r) => `<tr data-job="${esc(r.job_id)}">${layout.columns.map((c) => resultsCell(c, r)).join("")}</tr>`).join("")
      : `<tr><td colspan="${layout.columns.length}" class="empty">${empty}</td></tr>`;
    document.body.dataset.rendered = "true";
    return data;
  }

  function resultsPage() {
    const layout = JSON.parse(document.getElementById("results-layout").textContent);
    let data = renderResults(layout, JSON.parse(document.getElementById("results-data").textContent));
    const moving = () => data.rows.some((r) => !FINISHED.has(r.state) && r.state !== "paused");
    const poll = async () => {
      if (!moving()) return;
      try {
        const response = await fetch(`/live/${layout.segment}.json`, { credentials: "same-origin" });
        if (response.ok) {
          data = renderResults(layout, await response.json());
          document.getElementById("results-updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
        }
      } catch (error) {
        /* the next poll tries again */
      } finally {
        setTimeout(poll, POLL_MS * 2);
      }
    };
    setTimeout(poll, POLL_MS * 2);
  }

  return { jobPage, jobsPage, resultsPage, drawChart, drawHeatmaps };
})();
