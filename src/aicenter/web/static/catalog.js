// aicenter console, catalog pages: reloads an image's build panel every 2 s while the build is pending or
// running, and the whole page once it has finished (the version's state changes with it).
(function () {
  "use strict";

  var INTERVAL_MS = 2000;

  function poll() {
    var panel = document.querySelector("[data-build-state][data-refresh]");
    if (!panel) { return; }
    window.setTimeout(function () {
      fetch(panel.getAttribute("data-refresh"), { credentials: "same-origin", cache: "no-store" })
        .then(function (response) {
          if (!response.ok) { throw new Error("HTTP " + response.status); }
          return response.text();
        })
        .then(function (html) {
          var holder = document.createElement("div");
          holder.innerHTML = html;
          var fresh = holder.querySelector("[data-build-state]");
          if (!fresh) { return; }
          panel.replaceWith(fresh);
          if (fresh.hasAttribute("data-refresh")) {
            poll();
          } else {
            window.location.reload();
          }
        })
        .catch(function () { poll(); });  // a restarting server: keep trying at the same pace
    }, INTERVAL_MS);
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", poll);
  } else {
    poll();
  }
})();
