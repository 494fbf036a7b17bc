// slackgate's one script: the deliveries list follows new deliveries (a short poll of the
// same filter's rows). Without it the page works the same; it only does not move by itself.
(function () {
  "use strict";
  var table = document.querySelector("table[data-live]");
  var url = table && table.getAttribute("data-live");
  if (!url) { return; }
  var rows = document.getElementById("rows");
  var live = document.getElementById("live");
  var every = 2000;
  function links() { return Array.prototype.map.call(rows.querySelectorAll("tr a"), function (a) { return a.getAttribute("href"); }); }
  function poll() {
    if (document.hidden) { return setTimeout(poll, every); }
    fetch(url, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) { if (!r.ok) { throw new Error(r.status); } return r.text(); })
      .then(function (html) {
        if (html !== rows.innerHTML) {
          var first = links()[0];
          rows.innerHTML = html;
          var now = links();
          var fresh = first === undefined ? now.length : now.indexOf(first);
          live.textContent = now.length + " shown, updated " + new Date().toLocaleTimeString() +
            (fresh > 0 ? " (" + fresh + " new)" : "") + ".";
        }
      })
      .catch(function () { live.textContent = "Live updates paused: the gateway did not answer."; })
      .then(function () { setTimeout(poll, every); });
  }
  setTimeout(poll, every);
})();
