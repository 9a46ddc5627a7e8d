// aicenter console, a notebook's terminal: xterm.js (vendored under /static/vendor/xterm) attached to a JupyterLab
// terminal through the platform's notebook proxy.
//
// POST <base>api/terminals creates the terminal (a shell in JupyterLab's root, the notebook's work dir); its
// WebSocket <base>terminals/websocket/<name> speaks terminado's JSON messages: ["stdin", text] and
// ["set_size", rows, cols] up, ["stdout", text] and ["disconnect", ...] down. Both are same-origin requests with the
// session cookie, which is what the proxy asks of a browser. Leaving the page deletes the terminal, so reloads do
// not pile up shells.
(function () {
  "use strict";

  function start() {
    var holder = document.querySelector("[data-terminal]");
    if (!holder) { return; }
    var state = document.querySelector("[data-terminal-state]");
    function say(text, kind) {
      if (!state) { return; }
      state.textContent = text;
      state.setAttribute("data-state", kind);
    }
    if (!window.Terminal || !window.FitAddon) { say("The terminal could not load.", "failed"); return; }

    var base = holder.getAttribute("data-base");
    var term = new window.Terminal({
      cursorBlink: true,
      fontSize: 14,
      fontFamily: '"DejaVu Sans Mono", ui-monospace, Menlo, Consolas, monospace',
      scrollback: 5000
    });
    var fit = new window.FitAddon.FitAddon();
    term.loadAddon(fit);
    term.open(holder);
    fit.fit();

    var socket = null;
    var name = null;

    function send(message) {
      if (socket && socket.readyState === WebSocket.OPEN) { socket.send(JSON.stringify(message)); }
    }

    function resize() {
      fit.fit();
      send(["set_size", term.rows, term.cols]);
    }

    function connect() {
      var scheme = window.location.protocol === "https:" ? "wss:" : "ws:";
      socket = new WebSocket(scheme + "//" + window.location.host + base + "terminals/websocket/" + encodeURIComponent(name));
      socket.onopen = function () {
        say("Connected", "open");
        resize();
        term.focus();
      };
      socket.onmessage = function (event) {
        var message;
        try { message = JSON.parse(event.data); } catch (e) { return; }
        if (message[0] === "stdout") {
          term.write(message[1]);
        } else if (message[0] === "disconnect") {
          say("The shell has exited; reload the page for a new one.", "closed");
        }
      };
      socket.onclose = function (event) {
        if (state && state.getAttribute("data-state") === "closed") { return; }
        say("Disconnected" + (event.reason ? ": " + event.reason : "") + "; reload the page to reconnect.", "closed");
      };
    }

    term.onData(function (data) { send(["stdin", data]); });
    window.addEventListener("resize", resize);
    window.addEventListener("pagehide", function () {
      if (socket) { socket.close(); }
      if (name) {  // keepalive: the request outlives the page
        fetch(base + "api/terminals/" + encodeURIComponent(name), {
          method: "DELETE", credentials: "same-origin", keepalive: true
        }).catch(function () {});
      }
    });

    fetch(base + "api/terminals", {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json" },
      body: "{}"
    })
      .then(function (response) {
        if (!response.ok) {
          return response.text().then(function (text) {
            throw new Error("HTTP " + response.status + (text ? ": " + text.slice(0, 200) : ""));
          });
        }
        return response.json();
      })
      .then(function (body) {
        name = body.name;
        connect();
      })
      .catch(function (error) { say("Could not open a terminal (" + error.message + ").", "failed"); });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
