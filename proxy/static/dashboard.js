// The dashboard: fetches /stats/models and /stats/loops every few seconds and draws them with Chart.js.
// Everything that comes from the store (model names, commands) is set as text, never as HTML: the
// commands are whatever a model wrote.
"use strict";

(() => {
  const TOKEN_KEY = "allowlist-proxy-admin-token";
  const params = new URLSearchParams(location.search);
  // The admin token is read once from ?token=, kept for this tab only, and taken out of the address bar
  // so that it is neither bookmarked nor shared with a copied link.
  if (params.has("token")) {
    sessionStorage.setItem(TOKEN_KEY, params.get("token"));
    params.delete("token");
    const rest = params.toString();
    history.replaceState(null, "", location.pathname + (rest ? "?" + rest : "") + location.hash);
  }
  const token = sessionStorage.getItem(TOKEN_KEY);
  const refreshSeconds = Math.min(3600, Math.max(1, Number(params.get("refresh")) || 5));
  const filters = new URLSearchParams();
  for (const name of ["since", "until", "model"]) {
    if (params.get(name)) filters.set(name, params.get(name));
  }

  const PALETTE = ["#0969da", "#cf222e", "#1a7f37", "#8250df", "#bf8700", "#1b7c83", "#bc4c00", "#57606a"];
  const state = { refreshes: 0, errors: 0, lastError: null, stats: null, loops: null, charts: {} };
  window.dashboard = state; // for people poking at the page, and for the browser test

  Chart.defaults.animation = false; // redrawn every few seconds: animating each refresh only distracts
  Chart.defaults.maintainAspectRatio = false;

  async function getJSON(path) {
    const headers = token ? { Authorization: "Bearer " + token } : {};
    const response = await fetch(path, { headers, cache: "no-store" });
    if (!response.ok) {
      let message = response.statusText;
      try { message = (await response.json()).error.message; } catch (_) { /* not our error shape */ }
      if (response.status === 401 && !token) message += " - open this page as /dashboard?token=<admin_token>";
      throw new Error(`${path}: ${response.status} ${message}`);
    }
    return response.json();
  }

  function withFilters(path, extra) {
    const query = new URLSearchParams(filters);
    for (const [k, v] of Object.entries(extra || {})) query.set(k, v);
    const text = query.toString();
    return text ? `${path}?${text}` : path;
  }

  function el(tag, text, className) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (className) node.className = className;
    return node;
  }

  function row(cells) {
    const tr = document.createElement("tr");
    for (const cell of cells) {
      if (cell instanceof Node) {
        const td = document.createElement("td");
        td.append(cell);
        tr.append(td);
      } else {
        tr.append(el("td", cell, typeof cell === "number" ? "num" : undefined));
      }
    }
    return tr;
  }

  function fill(tableId, rows) {
    document.querySelector(`#${tableId} tbody`).replaceChildren(...rows);
  }

  function fixed(value, digits = 1) {
    return value === null || value === undefined ? "-" : Number(value).toFixed(digits);
  }

  function percent(rate) {
    return rate === null || rate === undefined ? "-" : (rate * 100).toFixed(1) + "%";
  }

  function color(models, model) {
    return PALETTE[models.indexOf(model) % PALETTE.length];
  }

  function chart(id, type, options) {
    if (!state.charts[id]) {
      state.charts[id] = new Chart(document.getElementById(id), {
        type, data: { labels: [], datasets: [] },
        options: { responsive: true, plugins: { legend: { position: "bottom" } }, ...options },
      });
    }
    return state.charts[id];
  }

  function draw(id, type, labels, datasets, options) {
    const c = chart(id, type, options);
    c.data.labels = labels;
    c.data.datasets = datasets;
    c.update("none");
  }

  function renderModels(models) {
    const names = models.map((m) => m.model);
    draw("chart-error-rate", "bar", names, [{
      label: "error rate (%)",
      data: models.map((m) => (m.error_rate === null ? null : Math.round(m.error_rate * 1000) / 10)),
      backgroundColor: names.map((n) => color(names, n)),
    }], {
      indexAxis: "y",
      scales: { x: { min: 0, max: 100, title: { display: true, text: "% of tool calls rejected or malformed" } } },
      plugins: { legend: { display: false } },
    });
    fill("table-models", models.map((m) => {
      const tr = row([m.model, m.sessions, m.requests, m.tool_calls, m.errors, percent(m.error_rate),
        m.loops ? m.loops.count : "-", percent(m.recovery_rate)]);
      tr.dataset.model = m.model;
      return tr;
    }));
  }

  function renderReasons(models) {
    const names = models.map((m) => m.model);
    const totals = {};
    for (const m of models) {
      for (const [code, n] of Object.entries(m.reasons || {})) totals[code] = (totals[code] || 0) + n;
    }
    const codes = Object.keys(totals).sort((a, b) => totals[b] - totals[a] || a.localeCompare(b));
    draw("chart-reasons", "bar", codes, models.map((m) => ({
      label: m.model, data: codes.map((code) => (m.reasons || {})[code] || 0), backgroundColor: color(names, m.model),
    })), { indexAxis: "y", scales: { x: { stacked: true, beginAtZero: true }, y: { stacked: true } } });
    const head = document.createElement("tr");
    head.append(...["Reason", ...names].map((name) => el("th", name)));
    document.querySelector("#table-reasons thead").replaceChildren(head);
    fill("table-reasons", codes.map((code) => {
      const tr = row([code, ...models.map((m) => (m.reasons || {})[code] || 0)]);
      tr.dataset.reason = code;
      return tr;
    }));
  }

  function renderLoops(loops) {
    fill("table-loops", loops.map((lp) => {
      const list = el("ol", null, "commands");
      for (const command of lp.commands || []) {
        const item = el("li");
        item.append(el("code", command));
        list.append(item);
      }
      const tr = row([lp.model, lp.session_id, lp.shape, lp.attempts, list]);
      tr.dataset.session = lp.session_id;
      return tr;
    }));
    document.getElementById("loops-empty").hidden = loops.length > 0;
  }

  function renderThroughput(models) {
    const names = models.map((m) => m.model);
    const size = (object) => Object.keys(object || {}).length;
    // Models with something to show: idle windows alone (nothing running at any window's end) make no cell.
    const live = models.filter((m) => m.throughput && (size(m.throughput.concurrency) || size(m.throughput.latency)));
    const charted = live.filter((m) => size(m.throughput.concurrency));
    // Charts: the window levels; the table also lists levels known only from request latency.
    const windowLevels = new Set();
    const allLevels = new Set();
    for (const m of live) {
      for (const c of Object.keys(m.throughput.concurrency || {})) {
        windowLevels.add(Number(c));
        allLevels.add(Number(c));
      }
      for (const c of Object.keys(m.throughput.latency || {})) allLevels.add(Number(c));
    }
    const byNumber = (a, b) => a - b;
    const labels = [...windowLevels].sort(byNumber);
    const series = (field) => charted.map((m) => ({
      label: m.model,
      data: labels.map((c) => {
        const cell = m.throughput.concurrency[String(c)];
        return cell && cell[field] !== null && cell[field] !== undefined ? cell[field] : null;
      }),
      backgroundColor: color(names, m.model),
    }));
    const scales = { x: { title: { display: true, text: "concurrency" } }, y: { beginAtZero: true } };
    draw("chart-generation", "bar", labels.map(String), series("generation_tps"), { scales });
    draw("chart-prefill", "bar", labels.map(String), series("prompt_tps"), { scales });
    draw("chart-requests", "bar", labels.map(String), series("requests_per_minute"), { scales });
    const rows = [];
    for (const m of live) {
      for (const c of [...allLevels].sort(byNumber)) {
        const cell = (m.throughput.concurrency || {})[String(c)];
        const lat = (m.throughput.latency || {})[String(c)];
        if (!cell && !lat) continue;
        const tr = row([
          m.model, c,
          cell ? `${fixed(cell.generation_tps)} (${cell.n})` : "-",
          cell ? `${fixed(cell.prompt_tps)} (${cell.n})` : "-",
          cell && cell.prompt_tps_active !== null ? `${fixed(cell.prompt_tps_active)} (${cell.n_active})` : "-",
          cell ? fixed(cell.requests_per_minute) : "-",
          lat ? `${fixed(lat.ttft_ms_p50)} / ${fixed(lat.ttft_ms_p99)} (${lat.requests})` : "-",
          lat ? `${fixed(lat.tpot_ms_p50, 2)} / ${fixed(lat.tpot_ms_p99, 2)}` : "-",
        ]);
        tr.dataset.model = m.model;
        tr.dataset.concurrency = String(c);
        rows.push(tr);
      }
    }
    fill("table-throughput", rows);
    document.getElementById("throughput-empty").hidden = rows.length > 0;
  }

  function status(text, kind) {
    const node = document.getElementById("status");
    node.textContent = text;
    node.dataset.state = kind;
  }

  async function refresh() {
    try {
      const [stats, loops] = await Promise.all([
        getJSON(withFilters("stats/models")),
        getJSON(withFilters("stats/loops", { limit: "20" })),
      ]);
      state.stats = stats;
      state.loops = loops.loops;
      renderModels(stats.models);
      renderReasons(stats.models);
      renderLoops(loops.loops);
      renderThroughput(stats.models);
      state.refreshes += 1;
      status(`updated ${new Date().toLocaleTimeString()} - every ${refreshSeconds} s`, "ok");
    } catch (error) {
      state.errors += 1;
      state.lastError = String(error.message || error);
      status(state.lastError, "error");
    } finally {
      setTimeout(refresh, refreshSeconds * 1000);
    }
  }

  refresh();
})();
