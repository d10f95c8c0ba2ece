// One session's page: reads /stats/sessions/{id} (admin-guarded, with the token the dashboard was opened with)
// and lists its requests, each attempt and every call with its verdict, reasons, feedback and repaired form.
// Everything from the store is set as text, never as HTML.
"use strict";

(() => {
  const { token, el } = window.allowlistPage;  // page.js: the admin token, text-only elements
  const sessionId = decodeURIComponent(location.pathname.split("/").pop());

  function when(seconds) {
    return new Date(seconds * 1000).toISOString().replace("T", " ").slice(0, 19) + " UTC";
  }

  function status(text, kind) {
    const node = document.getElementById("status");
    node.textContent = text;
    node.dataset.state = kind;
  }

  function fact(list, name, value, unknown) {
    const wrap = el("div");
    const dd = el("dd", value === null || value === undefined || value === "" ? unknown : value);
    if (value === null || value === undefined || value === "") dd.classList.add("unknown");
    wrap.append(el("dt", name), dd);
    list.append(wrap);
  }

  function renderCall(call) {
    const node = el("div", null, "call");
    const head = el("div");
    const badge = el("span", call.decision, "verdict");
    badge.dataset.decision = call.decision;
    head.append(badge, document.createTextNode(` ${call.tool_name}`));
    if (call.loop) head.append(el("span", ` loop ${call.loop.number} (${call.loop.position}/${call.loop.attempts})`, "note"));
    node.append(head, el("pre", call.command || call.arguments || ""));
    if (call.reasons.length) node.append(el("div", "reasons: " + call.reasons.join(", "), "reasons"));
    if (call.repaired_command) {
      node.append(el("div", "delivered repaired as:", "note"), el("pre", call.repaired_command));
    }
    if (call.feedback) {
      const details = el("details");
      details.append(el("summary", "feedback the model got"), el("pre", call.feedback));
      node.append(details);
    } else if (call.feedback_note) {
      node.append(el("div", call.feedback_note, "note"));
    }
    return node;
  }

  function render(detail) {
    document.getElementById("session-id").textContent = detail.session_id;
    document.title = `session ${detail.session_id} - allowlist-proxy`;
    const facts = document.getElementById("facts");
    facts.replaceChildren();
    fact(facts, "Models", detail.models.join(", "), "none");
    fact(facts, "Client profiles", detail.profiles.join(", "), "none chosen");
    fact(facts, "Project root", detail.project_root, "not learned (this store does not keep it)");
    fact(facts, "Requests", detail.requests);
    fact(facts, "Tool calls", `${detail.tool_calls} (${detail.errors} refused)`);
    fact(facts, "Loops", detail.loops.length);
    // Secrets replaced before the request went upstream (tool results, inlined files): type x count, per call.
    const redacted = (detail.secrets_redacted || []).map((r) => `${r.type} x${r.count} (${r.call_id})`);
    fact(facts, "Secrets redacted", redacted.join(", "), "none");
    const byRequest = new Map();
    for (const call of detail.calls) {
      if (!byRequest.has(call.request_id)) byRequest.set(call.request_id, []);
      byRequest.get(call.request_id).push(call);
    }
    const list = document.getElementById("request-list");
    list.replaceChildren();
    const requests = detail.request_list.slice();
    // Calls whose request row is not stored (yet) still show, under their request id.
    for (const id of byRequest.keys()) {
      if (!requests.some((r) => r.id === id)) requests.push({ id, started_at: byRequest.get(id)[0].created_at });
    }
    requests.sort((a, b) => a.started_at - b.started_at);
    requests.forEach((request, index) => {
      const item = el("li", null, "request");
      const title = el("h3", `#${index + 1} ${when(request.started_at)} `);
      const meta = [request.model, request.route, request.stream === undefined ? null : (request.stream ? "streamed" : "whole"),
        request.attempts ? `${request.attempts} attempt${request.attempts === 1 ? "" : "s"}` : null].filter(Boolean);
      title.append(el("small", meta.join(" · ")));
      if (request.outcome) {
        const outcome = el("span", ` ${request.outcome}${request.status ? " " + request.status : ""}`, "outcome");
        outcome.dataset.outcome = request.outcome;
        title.append(outcome);
      }
      item.append(title);
      if (request.error) item.append(el("div", request.error, "note"));
      const attempts = new Map();
      for (const call of byRequest.get(request.id) || []) {
        if (!attempts.has(call.attempt)) attempts.set(call.attempt, []);
        attempts.get(call.attempt).push(call);
      }
      for (const [attempt, calls] of [...attempts.entries()].sort((a, b) => a[0] - b[0])) {
        const box = el("div", null, "attempt");
        box.append(el("h4", `attempt ${attempt}`));
        for (const call of calls) box.append(renderCall(call));
        item.append(box);
      }
      if (!attempts.size) item.append(el("div", "no tool calls", "note"));
      list.append(item);
    });
    document.getElementById("requests-empty").hidden = requests.length > 0;
  }

  async function load() {
    const headers = token ? { Authorization: "Bearer " + token } : {};
    const path = `../../stats/sessions/${encodeURIComponent(sessionId)}`;
    try {
      const response = await fetch(path, { headers, cache: "no-store" });
      if (!response.ok) {
        let message = response.statusText;
        try { message = (await response.json()).error.message; } catch (_) { /* not our error shape */ }
        if (response.status === 401 && !token) message += " - open the dashboard as /dashboard?token=<admin_token> first";
        throw new Error(`${response.status} ${message}`);
      }
      render(await response.json());
      status(`updated ${new Date().toLocaleTimeString()}`, "ok");
    } catch (error) {
      status(String(error.message || error), "error");
    }
  }

  load();
})();
