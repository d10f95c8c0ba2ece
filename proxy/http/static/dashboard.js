// The dashboard: fetches /stats/models and /stats/overview every few seconds and draws them with Chart.js.
// The headline per model comes first, then the error rate over the picked range, then the detail.
// Everything that comes from the store (model names, sessions, shapes) is set as text, never as HTML.
"use strict";

(() => {
  const { params, token, el } = window.allowlistPage;  // page.js: the admin token, text-only elements
  const refreshSeconds = Math.min(3600, Math.max(1, Number(params.get("refresh")) || 5));
  const filters = new URLSearchParams();
  for (const name of ["since", "until", "model"]) {
    if (params.get(name)) filters.set(name, params.get(name));
  }

  // Colours that name a model and say nothing about it: no red (bad) or green (good).
  // Twelve that stay apart from each other (no two alike to the eye, nor to a common colour blindness);
  // beyond twelve models, hues a golden angle apart.
  const PALETTE = ["#4e79a7", "#f28e2b", "#7b3294", "#76b7b2", "#edc948", "#9c755f", "#ff9da7", "#1f3a93",
    "#808000", "#6b6b6b", "#e377c2", "#00bcd4"];
  const RANGES = ["1h", "24h", "7d", "all"];
  const RANGE_WORDS = { "1h": "the last hour", "24h": "the last 24 hours", "7d": "the last 7 days", all: "all time" };
  const state = {
    refreshes: 0, errors: 0, lastError: null, stats: null, overview: null, headline: [], charts: {}, columns: null,
    range: RANGES.includes(params.get("range")) ? params.get("range") : "24h", open: new Set(),
  };
  window.dashboard = state; // for people poking at the page, and for the browser test

  Chart.defaults.animation = false; // redrawn every few seconds: animating each refresh only distracts
  Chart.defaults.maintainAspectRatio = false;

  // Whiskers: a dataset's `ci` holds [low, high] in the bar's units (or null); drawn across each bar's end.
  const whiskers = {
    id: "whiskers",
    afterDatasetsDraw(chart) {
      const { ctx } = chart;
      chart.data.datasets.forEach((dataset, index) => {
        if (!dataset.ci) return;
        const meta = chart.getDatasetMeta(index);
        const horizontal = chart.options.indexAxis === "y";
        const scale = horizontal ? chart.scales.x : chart.scales.y;
        meta.data.forEach((bar, i) => {
          const ci = dataset.ci[i];
          if (!ci) return;
          const [a, b] = [scale.getPixelForValue(ci[0]), scale.getPixelForValue(ci[1])];
          const mid = horizontal ? bar.y : bar.x;
          const half = 6;
          ctx.save();
          ctx.strokeStyle = "#24292f";
          ctx.lineWidth = 1.5;
          ctx.beginPath();
          if (horizontal) {
            ctx.moveTo(a, mid); ctx.lineTo(b, mid);
            ctx.moveTo(a, mid - half); ctx.lineTo(a, mid + half);
            ctx.moveTo(b, mid - half); ctx.lineTo(b, mid + half);
          } else {
            ctx.moveTo(mid, a); ctx.lineTo(mid, b);
            ctx.moveTo(mid - half, a); ctx.lineTo(mid + half, a);
            ctx.moveTo(mid - half, b); ctx.lineTo(mid + half, b);
          }
          ctx.stroke();
          ctx.restore();
        });
      });
    },
  };
  Chart.register(whiskers);

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

  function colourOf(model) {
    const names = (state.stats ? state.stats.models : []).map((m) => m.model);
    const at = names.indexOf(model);
    const index = at < 0 ? names.length : at;
    if (index < PALETTE.length) return PALETTE[index];
    return `hsl(${Math.round((index * 137.508) % 360)}, 60%, ${index % 2 ? 38 : 55}%)`;
  }

  function agentHint() {
    const base = `${location.origin}${location.pathname.replace(/dashboard\/?$/, "")}v1`;
    return `No traffic yet. Point an agent at ${base} (OpenCode: the provider's baseURL), ` +
      "or run `allowlist-proxy demo` to see this page filled.";
  }

  function renderHeadline(models, blocked, upstreamErrors) {
    state.headline = models.map((m) => ({
      model: m.model, tool_calls: m.tool_calls, error_rate: m.error_rate, blocked: blocked[m.model] || 0,
      upstream_errors: (upstreamErrors || {})[m.model] || 0,
      loops: m.loops ? m.loops.count : 0, recovery_rate: m.recovery_rate,
      ungoverned: m.ungoverned_text_actions || 0,
    }));
    const cards = state.headline.map((h, index) => {
      const m = models[index];
      const card = el("article", null, "card");
      card.dataset.model = h.model;
      card.style.setProperty("--model-colour", colourOf(h.model));
      card.append(el("h3", h.model));
      const list = el("dl");
      const ci = m.error_rate_ci95;
      const fields = [
        ["tool_calls", "Tool calls", h.tool_calls, null],
        ["error_rate", "Error rate", percent(h.error_rate), ci ? `95%: ${percent(ci[0])} to ${percent(ci[1])}` : null],
        ["blocked", "Blocked turns", h.blocked, "retry budget spent"],
        ["loops", "Loops", h.loops, null],
        ["recovery_rate", "Recovery", percent(h.recovery_rate), "allowed call after a refusal"],
        ["upstream_errors", "Upstream errors", h.upstream_errors, "502/504: the model server failed"],
        ["ungoverned", "Ungoverned actions", h.ungoverned, "text actions the proxy could not read or judge"],
      ];
      for (const [field, label, value, note] of fields) {
        const dd = el("dd", value);
        dd.dataset.field = field;
        if (note) dd.append(el("small", note));
        const pair = el("div");  // a term with its value, so they wrap together
        pair.append(el("dt", label), dd);
        list.append(pair);
      }
      card.append(list);
      return card;
    });
    document.getElementById("cards").replaceChildren(...cards);
    const empty = document.getElementById("headline-empty");
    empty.textContent = agentHint();
    empty.hidden = models.length > 0;
  }

  function renderModels(models) {
    const names = models.map((m) => m.model);
    const ci = models.map((m) => (m.error_rate_ci95 ? m.error_rate_ci95.map((v) => Math.round(v * 1000) / 10) : null));
    draw("chart-error-rate", "bar", names, [{
      label: "error rate (%)",
      data: models.map((m) => (m.error_rate === null ? null : Math.round(m.error_rate * 1000) / 10)),
      backgroundColor: names.map((n) => colourOf(n)),
      ci: ci.some(Boolean) ? ci : null,
    }], {
      indexAxis: "y",
      scales: { x: { min: 0, max: 100, title: { display: true, text: "% of tool calls rejected or malformed" } } },
      plugins: { legend: { display: false } },
      // A click on a model's bar opens the session of its longest loop.
      onClick: (_event, elements, c) => {
        const worst = elements.length ? worstSession(c.data.labels[elements[0].index]) : null;
        if (worst) location.href = sessionHref(worst);
      },
    });
    const head = document.createElement("tr");
    head.append(...state.columns.map((column) => el("th", column.header)));
    document.querySelector("#table-models thead").replaceChildren(head);
    fill("table-models", models.map((m) => {
      const cells = state.columns.map((column) => cell(m, column));
      const worst = worstSession(m.model);
      if (worst) {  // the model's name opens the session of its longest loop: "what did it do?"
        const link = el("a", m.model);
        link.href = sessionHref(worst);
        link.title = `open session ${worst} (its longest loop)`;
        cells[0] = link;
      }
      const tr = row(cells);
      tr.dataset.model = m.model;
      return tr;
    }));
  }

  function sessionHref(sessionId) {
    return `dashboard/sessions/${encodeURIComponent(sessionId)}`;
  }

  // The session of a model's longest loop in the overview, or null.
  function worstSession(model) {
    let best = null;
    for (const group of (state.overview && state.overview.loop_groups) || []) {
      if (group.model !== model) continue;
      for (const session of group.sessions) {
        if (!best || session.attempts > best.attempts) best = session;
      }
    }
    return best ? best.session_id : null;
  }

  // One cell of the per-model table: the value at the column's dotted path, shown as its format says.
  function cell(model, column) {
    let value = model;
    for (const key of column.path.split(".")) value = value === null || value === undefined ? value : value[key];
    if (column.format === "percent") return percent(value);
    return value === null || value === undefined ? "-" : value;
  }

  function when(seconds, withDate) {
    const date = new Date(seconds * 1000);
    const options = withDate ? { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" }
      : { hour: "2-digit", minute: "2-digit" };
    return date.toLocaleString(undefined, options);
  }

  function duration(seconds) {
    if (seconds >= 86400 && seconds % 86400 === 0) return `${seconds / 86400} d`;
    if (seconds >= 3600 && seconds % 3600 === 0) return `${seconds / 3600} h`;
    if (seconds >= 60) return `${Math.round(seconds / 60)} min`;
    return `${Math.round(seconds)} s`;
  }

  // True when every model's points lie in the last two buckets of the range (new traffic).
  function onlyAtTheEdge(timeline) {
    const edge = timeline.until - 2 * timeline.bucket_seconds;
    const points = Object.values(timeline.models).flat().filter((b) => b.error_rate !== null);
    return points.length > 0 && points.every((b) => b.start >= edge);
  }

  function renderTimeline(timeline) {
    for (const button of document.querySelectorAll(".picker button")) {
      button.setAttribute("aria-pressed", String(button.dataset.range === timeline.range));
    }
    const size = timeline.bucket_seconds;
    const starts = [];
    for (let t = timeline.since; t <= timeline.until; t += size) starts.push(t);
    const long = timeline.until - timeline.since > 86400;
    const names = Object.keys(timeline.models).sort();
    draw("chart-timeline", "line", starts.map((t) => when(t, long)), names.map((name) => {
      const byStart = new Map(timeline.models[name].map((b) => [Math.round(b.start), b]));
      const known = timeline.models[name].filter((b) => b.error_rate !== null).length;
      return {
        // A model with a point or two would otherwise be a speck: larger points until it has a line.
        label: name, borderColor: colourOf(name), backgroundColor: colourOf(name), spanGaps: true,
        pointRadius: known <= 3 ? 5 : 2,
        data: starts.map((t) => {
          const bucket = byStart.get(Math.round(t));
          return bucket && bucket.error_rate !== null ? Math.round(bucket.error_rate * 1000) / 10 : null;
        }),
      };
    }), { scales: { y: { min: 0, max: 100, title: { display: true, text: "% of tool calls" } },
      x: { ticks: { maxRotation: 0, autoSkip: true, maxTicksLimit: 6 } } } });
    document.getElementById("timeline-window").textContent =
      `Showing ${RANGE_WORDS[timeline.range]}: ${when(timeline.since, true)} to ${when(timeline.until, true)}, ` +
      `one point per ${duration(size)}.`;
    document.getElementById("timeline-empty").hidden = names.length > 0;
  }

  function renderBanners(status) {
    const banners = [];
    const add = (kind, text) => {
      const node = el("p", text, "banner");
      node.dataset.kind = kind;
      node.setAttribute("role", "alert");
      banners.push(node);
    };
    for (const upstream of status.upstreams || []) {
      if (!upstream.reachable) {
        add("upstream", `Upstream ${upstream.url} does not answer${upstream.error ? ` (${upstream.error})` : ""}: ` +
          "requests for its models fail with 502. Is vLLM running there, and is the URL right (it ends in /v1)?");
      }
    }
    for (const error of status.policy_errors || []) {
      const where = [error.file, error.line].filter((x) => x !== null && x !== undefined).join(":");
      add("policy", `Policy file ${where} was refused (${error.key ? error.key + ": " : ""}${error.message}); ` +
        `the proxy keeps serving the last good policy "${status.policy ? status.policy.name : "?"}". Fix the file ` +
        "and it reloads.");
    }
    for (const held of status.policy_held || []) {
      // What the held edit widens, and the command that applies it: the operator decides with both in view.
      const node = el("div", null, "banner");
      node.dataset.kind = "policy_held";
      node.dataset.file = held.file;
      node.setAttribute("role", "alert");
      node.append(el("p", `Policy file ${held.file} has an edit that widens the policy: it is held, and the ` +
        `policy before it keeps serving ("${status.policy ? status.policy.name : "?"}"). The edit allows:`));
      const list = el("ul", null, "widens");
      for (const item of (held.widens && held.widens.length ? held.widens : [held.reason])) list.append(el("li", item));
      node.append(list);
      const apply = el("p", "Apply it with ");
      apply.append(el("code", held.apply, "apply"), document.createTextNode(" on the proxy's machine, or revert the file."));
      node.append(apply);
      banners.push(node);
    }
    const store = status.store || {};
    if (store.failures > 0 || store.queue > 10000) {
      add("store", `The store is in trouble: ${store.failures} failed writes (retried), ${store.queue} rows ` +
        "waiting. Check the database and the proxy's log.");
    }
    document.getElementById("banners").replaceChildren(...banners);
  }

  function renderLoopGroups(groups) {
    const nodes = groups.map((group) => {
      const key = `${group.model}\u0000${group.shape}`;
      const details = el("details", null, "group");
      details.dataset.model = group.model;
      details.dataset.shape = group.shape;
      details.style.setProperty("--model-colour", colourOf(group.model));
      details.open = state.open.has(key);
      details.addEventListener("toggle", () => {
        if (details.open) state.open.add(key); else state.open.delete(key);
      });
      const summary = el("summary");
      const swatch = el("span", null, "swatch");
      const lengths = Object.entries(group.lengths).map(([n, c]) => [Number(n), c]).sort((a, b) => a[0] - b[0]);
      const most = Math.max(...lengths.map(([, c]) => c));
      const histogram = el("span", null, "histogram");
      histogram.setAttribute("aria-label", "loop lengths: " + lengths.map(([n, c]) => `${c} of ${n}`).join(", "));
      for (const [n, c] of lengths) {
        const bar = el("span");
        bar.style.height = `${Math.max(8, Math.round((c / most) * 100))}%`;
        bar.title = `${c} loop${c === 1 ? "" : "s"} of ${n} attempts`;
        histogram.append(bar);
      }
      summary.append(swatch, el("span", group.model), el("code", group.shape),
        el("span", `${group.loops} loop${group.loops === 1 ? "" : "s"}`, "count"),
        el("span", `lengths ${lengths.map(([n, c]) => `${n}\u00d7${c}`).join(", ")}`), histogram);
      const list = el("ul", null, "sessions");
      for (const session of group.sessions) {
        const item = el("li");
        const link = el("a", session.session_id);
        link.href = sessionHref(session.session_id);
        item.append(link, document.createTextNode(` - ${session.attempts} attempts, ${when(session.started_at, true)}`));
        list.append(item);
      }
      details.append(summary, list);
      return details;
    });
    document.getElementById("loop-groups").replaceChildren(...nodes);
    document.getElementById("loops-empty").hidden = groups.length > 0;
  }

  async function renderCompare(models, status) {
    const node = document.getElementById("compare");
    if (!status.compare || models.length < 2) {
      node.hidden = true;
      return;
    }
    try {
      const answer = await getJSON(withFilters("stats/compare", { models: models.slice(0, 2).map((m) => m.model).join(",") }));
      const sentence = typeof answer.sentence === "string" ? answer.sentence : answer.summary;
      node.textContent = typeof sentence === "string" ? sentence : "";
      node.hidden = !node.textContent;
    } catch (_) {
      node.hidden = true;
    }
  }

  function renderReasons(models) {
    const names = models.map((m) => m.model);
    const totals = {};
    for (const m of models) {
      for (const [code, n] of Object.entries(m.reasons || {})) totals[code] = (totals[code] || 0) + n;
    }
    const codes = Object.keys(totals).sort((a, b) => totals[b] - totals[a] || a.localeCompare(b));
    draw("chart-reasons", "bar", codes, models.map((m) => ({
      label: m.model, data: codes.map((code) => (m.reasons || {})[code] || 0), backgroundColor: colourOf(m.model),
    })), { indexAxis: "y", scales: { x: { stacked: true, beginAtZero: true }, y: { stacked: true } } });
    document.getElementById("chart-reasons").closest(".chart").hidden = codes.length === 0;  // no empty 0-1 frame
    const head = document.createElement("tr");
    head.append(...["Reason", ...names].map((name) => el("th", name)));
    document.querySelector("#table-reasons thead").replaceChildren(head);
    fill("table-reasons", codes.map((code) => {
      const tr = row([code, ...models.map((m) => (m.reasons || {})[code] || 0)]);
      tr.dataset.reason = code;
      return tr;
    }));
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
      backgroundColor: colourOf(m.model),
    }));
    const scales = { x: { title: { display: true, text: "concurrency" } }, y: { beginAtZero: true } };
    draw("chart-generation", "bar", labels.map(String), series("generation_tps"), { scales });
    draw("chart-prefill", "bar", labels.map(String), series("prompt_tps"), { scales });
    draw("chart-requests", "bar", labels.map(String), series("requests_per_minute"), { scales });
    // A chart whose series are all empty (no usage was streamed) is hidden, not drawn as an empty 0-1 frame.
    const hasValues = (field) => series(field).some((s) => s.data.some((v) => v !== null && v > 0));
    for (const [id, field] of [["chart-generation", "generation_tps"], ["chart-prefill", "prompt_tps"],
      ["chart-requests", "requests_per_minute"]]) {
      document.getElementById(id).closest("figure").hidden = !hasValues(field);
    }
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

  let timer = null;

  async function refresh() {
    clearTimeout(timer);
    try {
      if (!state.columns) state.columns = (await getJSON("dashboard/columns.json")).models;
      const [stats, first] = await Promise.all([
        getJSON(withFilters("stats/models")),
        getJSON(withFilters("stats/overview", { range: state.range })),
      ]);
      let overview = first;
      state.stats = stats;
      state.overview = overview;
      if (!params.has("range") && state.refreshes === 0 && state.range === "24h" && onlyAtTheEdge(overview.timeline)) {
        // All traffic is in the last hour or two: 24 h would show it as a few dots at the right edge.
        state.range = "1h";
        overview = await getJSON(withFilters("stats/overview", { range: state.range }));
        state.overview = overview;
      }
      renderBanners(overview.status);
      renderHeadline(stats.models, overview.blocked, overview.upstream_errors);
      renderTimeline(overview.timeline);
      renderModels(stats.models);
      renderReasons(stats.models);
      renderLoopGroups(overview.loop_groups);
      renderThroughput(stats.models);
      await renderCompare(stats.models, overview.status);
      state.refreshes += 1;
      status(`updated ${new Date().toLocaleTimeString()} - every ${refreshSeconds} s`, "ok");
    } catch (error) {
      state.errors += 1;
      state.lastError = String(error.message || error);
      status(state.lastError, "error");
    } finally {
      timer = setTimeout(refresh, refreshSeconds * 1000);
    }
  }

  for (const button of document.querySelectorAll(".picker button")) {
    button.addEventListener("click", () => {
      state.range = button.dataset.range;
      refresh();
    });
  }

  refresh();
})();
