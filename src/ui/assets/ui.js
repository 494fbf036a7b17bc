// slackgate's one script: the deliveries list follows new deliveries (a short poll of the
// same filter's rows). Without it the page works the same; it only does not move by itself.
//
// A poll asks only for rows that arrived after the newest one shown (`after=<ms>`), less a
// few seconds for records the history writes late; rows it already shows are updated in
// place, new ones go on top. When the session has ended the poll is answered with a redirect
// to the login (or a 401): the page then goes to the login instead of drawing it in the table.
(function () {
  "use strict";
  var table = document.querySelector("table[data-live]");
  var url = table && table.getAttribute("data-live");
  if (!url) { return; }
  var rows = document.getElementById("rows");
  var live = document.getElementById("live");
  var every = 2000;
  // Rows written this much after they arrived are still caught.
  var late = 5000;
  var limit = 50;
  var since = Number(table.getAttribute("data-now")) || 0;
  function shown() { return Array.prototype.slice.call(rows.querySelectorAll("tr[data-received]")); }
  function href(tr) { var a = tr.querySelector("a"); return a ? a.getAttribute("href") : ""; }
  function newest() {
    return shown().reduce(function (m, tr) { return Math.max(m, Number(tr.getAttribute("data-received"))); }, since);
  }
  function toLogin() { window.location.assign("/ui/login"); }
  function merge(html) {
    var got = document.createElement("tbody");
    got.innerHTML = html;
    var fresh = Array.prototype.slice.call(got.querySelectorAll("tr[data-received]"));
    var change = { added: 0, changed: 0 };
    if (fresh.length === 0) { return change; }
    var byHref = {};
    shown().forEach(function (tr) { byHref[href(tr)] = tr; });
    fresh.reverse().forEach(function (tr) {
      var old = byHref[href(tr)];
      if (old) {
        if (old.innerHTML !== tr.innerHTML) { old.replaceWith(tr); change.changed += 1; }
        return;
      }
      change.added += 1;
      var at = Number(tr.getAttribute("data-received"));
      var before = shown().filter(function (r) { return Number(r.getAttribute("data-received")) <= at; })[0];
      rows.insertBefore(tr, before || null);
    });
    // The placeholder row ("Nothing matches") goes once a delivery is shown.
    Array.prototype.forEach.call(rows.querySelectorAll("tr:not([data-received])"), function (tr) { tr.remove(); });
    shown().slice(limit).forEach(function (tr) { tr.remove(); });
    return change;
  }
  function poll() {
    if (document.hidden) { return setTimeout(poll, every); }
    var after = Math.max(0, newest() - late);
    fetch(url + "&after=" + after, { credentials: "same-origin", redirect: "manual", headers: { "Accept": "text/html" } })
      .then(function (r) {
        // A redirect (opaque with `redirect: "manual"`) is the login's: the session ended.
        if (r.type === "opaqueredirect" || r.status === 401 || (r.redirected && /\/ui\/login$/.test(new URL(r.url).pathname))) {
          toLogin();
          return null;
        }
        if (!r.ok) { throw new Error(r.status); }
        return r.text();
      })
      .then(function (html) {
        if (html === null) { return; }
        var change = merge(html);
        // Only a change is announced (the line is read out to screen readers).
        if (change.added > 0 || change.changed > 0) {
          live.textContent = shown().length + " shown, updated " + new Date().toLocaleTimeString() +
            (change.added > 0 ? " (" + change.added + " new)" : "") + ".";
        }
        setTimeout(poll, every);
      })
      .catch(function () {
        live.textContent = "Live updates paused: the gateway did not answer.";
        setTimeout(poll, every);
      });
  }
  setTimeout(poll, every);
})();
