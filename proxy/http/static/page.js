// Shared by the dashboard and the session page: the admin token, and elements built with text only.
"use strict";

window.allowlistPage = (() => {
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

  // Everything from the store is set as text, never as HTML.
  function el(tag, text, className) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (className) node.className = className;
    return node;
  }

  return { params, token: sessionStorage.getItem(TOKEN_KEY), el };
})();
