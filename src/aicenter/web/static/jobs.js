// aicenter console, a job's page: refreshes the status, replicas and events every 2 s until the job has
// finished, and shows a replica's output live through the API's server-sent events (EventSource).
(function () {
  "use strict";

  var REFRESH_MS = 2000;
  var RETRY_MS = 1000;  // a replica not launched yet answers 409: ask again until it has output

  function refresh() {
    var live = document.querySelector("[data-job-live][data-refresh]");
    if (!live) { return; }
    window.setTimeout(function () {
      fetch(live.getAttribute("data-refresh"), { credentials: "same-origin", cache: "no-store" })
        .then(function (response) {
          if (!response.ok) { throw new Error("HTTP " + response.status); }
          return response.text();
        })
        .then(function (html) {
          var holder = document.createElement("div");
          holder.innerHTML = html;
          var fresh = holder.querySelector("[data-job-live]");
          if (!fresh) { return; }
          live.replaceWith(fresh);
          if (!fresh.hasAttribute("data-refresh")) {  // finished: nothing left to stop
            var stop = document.querySelector("[data-testid=job-stop]");
            if (stop && stop.form) { stop.form.remove(); }
          }
          refresh();
        })
        .catch(function () { refresh(); });  // a restarting server: keep trying at the same pace
    }, REFRESH_MS);
  }

  function logs() {
    var view = document.querySelector("[data-log-view]");
    if (!view || !window.EventSource) { return; }
    var taskSelect = document.querySelector("[data-log-task]");
    var replicaSelect = document.querySelector("[data-log-replica]");
    var state = document.querySelector("[data-log-state]");
    var source = null;
    var offset = 0;
    var retry = null;
    var generation = 0;

    function say(text) { if (state) { state.textContent = text; } }

    function close() {
      if (source) { source.close(); source = null; }
      if (retry) { window.clearTimeout(retry); retry = null; }
    }

    function open() {
      close();
      var mine = ++generation;
      var params = new URLSearchParams();
      if (taskSelect && taskSelect.value) { params.set("task", taskSelect.value); }
      if (replicaSelect && replicaSelect.value) { params.set("replica", replicaSelect.value); }
      if (offset) { params.set("since", String(offset)); }
      source = new EventSource(view.getAttribute("data-stream") + "?" + params.toString());
      source.onopen = function () { say("Live"); };
      source.onmessage = function (event) {
        if (mine !== generation) { return; }
        var atBottom = view.scrollTop + view.clientHeight >= view.scrollHeight - 4;
        view.appendChild(document.createTextNode(event.data + "\n"));
        if (event.lastEventId) { offset = parseInt(event.lastEventId, 10) || offset; }
        if (atBottom) { view.scrollTop = view.scrollHeight; }
      };
      source.addEventListener("end", function () {
        close();
        say("The replica has ended.");
      });
      source.onerror = function () {
        if (!source || source.readyState !== EventSource.CLOSED) { say("Reconnecting…"); return; }
        // Refused (not launched yet, or the server restarting): try again from where we were.
        close();
        say("Waiting for the replica to start…");
        retry = window.setTimeout(open, RETRY_MS);
      };
    }

    function restart() {
      close();
      offset = 0;
      view.textContent = "";
      open();
    }

    if (taskSelect) {
      taskSelect.addEventListener("change", function () {
        var count = parseInt(taskSelect.selectedOptions[0].getAttribute("data-replicas"), 10) || 1;
        replicaSelect.innerHTML = "";
        for (var i = 0; i < count; i++) {
          var option = document.createElement("option");
          option.value = String(i);
          option.textContent = String(i);
          replicaSelect.appendChild(option);
        }
        restart();
      });
    }
    if (replicaSelect) { replicaSelect.addEventListener("change", restart); }
    open();
  }

  function start() { refresh(); logs(); }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
