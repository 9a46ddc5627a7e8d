// aicenter console, a job's page: line charts of the metrics the job reported (aicenter.runtime.report).
// Reads GET /api/v1/jobs/{id}/metrics page by page, then, while the job runs, polls from the last cursor for
// the points reported since. One inline SVG per metric; no library, no CDN (the console works offline).
(function () {
  "use strict";

  var POLL_MS = 3000;
  var MAX_PAGES = 50;        // the first load reads at most 50 x 2000 points
  var MAX_KEPT = 20000;      // points kept per metric; past it every other point is dropped (the shape stays)
  var MAX_DRAWN = 1000;      // points drawn per line: a 500 px chart cannot show more
  var W = 480, H = 170, LEFT = 58, RIGHT = 10, TOP = 26, BOTTOM = 24;
  var SVG = "http://www.w3.org/2000/svg";

  var root = document.querySelector("[data-job-metrics]");
  if (!root || !window.fetch) { return; }
  var holder = root.querySelector("[data-metrics-charts]");
  var state = root.querySelector("[data-metrics-state]");
  var url = root.getAttribute("data-metrics");
  var series = {};   // name -> [{x, y, step, at}]
  var latest = {};
  var cursor = null;
  var wasRunning = false;  // polled once more after the job ended: its last points came before the exit

  function say(text) { if (state) { state.textContent = text; } }

  function running() {
    var live = document.querySelector("[data-job-live]");
    return !!(live && live.hasAttribute("data-refresh"));
  }

  function format(value) {
    if (value === null || value === undefined) { return "—"; }
    var abs = Math.abs(value);
    if (abs !== 0 && (abs >= 1e5 || abs < 1e-3)) { return value.toExponential(3); }
    return String(Number(value.toPrecision(5)));
  }

  function add(page) {
    page.series.forEach(function (s) {
      var points = series[s.name] || (series[s.name] = []);
      s.points.forEach(function (p) {
        if (p.value === null) { return; }  // NaN or infinity: nothing to draw
        points.push({ step: p.step, at: Date.parse(p.at), y: p.value });
      });
      if (points.length > MAX_KEPT) {
        series[s.name] = points.filter(function (_p, i) { return i % 2 === 0 || i === points.length - 1; });
      }
    });
    Object.keys(page.latest).forEach(function (name) { latest[name] = page.latest[name]; });
  }

  function el(name, attrs, text) {
    var node = document.createElementNS(SVG, name);
    Object.keys(attrs).forEach(function (k) { node.setAttribute(k, String(attrs[k])); });
    if (text !== undefined) { node.textContent = text; }
    return node;
  }

  function chart(name, points) {
    var bySteps = points.every(function (p) { return p.step !== null; });
    var xs = points.map(function (p, i) { return bySteps ? p.step : (isNaN(p.at) ? i : p.at); });
    var ys = points.map(function (p) { return p.y; });
    var x0 = Math.min.apply(null, xs), x1 = Math.max.apply(null, xs);
    var y0 = Math.min.apply(null, ys), y1 = Math.max.apply(null, ys);
    if (x1 === x0) { x1 = x0 + 1; }
    if (y1 === y0) { y1 = y0 + Math.max(Math.abs(y0) * 0.1, 1e-9); y0 -= Math.max(Math.abs(y0) * 0.1, 1e-9); }
    var every = Math.max(1, Math.ceil(points.length / MAX_DRAWN));
    var coords = [];
    for (var i = 0; i < points.length; i += 1) {
      if (i % every !== 0 && i !== points.length - 1) { continue; }
      var px = LEFT + (xs[i] - x0) / (x1 - x0) * (W - LEFT - RIGHT);
      var py = TOP + (1 - (ys[i] - y0) / (y1 - y0)) * (H - TOP - BOTTOM);
      coords.push(px.toFixed(1) + "," + py.toFixed(1));
    }
    var last = latest[name] ? latest[name].value : ys[ys.length - 1];
    var svg = el("svg", { viewBox: "0 0 " + W + " " + H, role: "img", class: "metric-chart",
                          "data-testid": "metric-chart", "data-metric": name, "data-points": points.length,
                          "aria-label": name + ", latest " + format(last) });
    svg.appendChild(el("text", { x: 4, y: 16, class: "metric-name" }, name));
    svg.appendChild(el("text", { x: W - 4, y: 16, "text-anchor": "end", class: "metric-latest",
                                 "data-testid": "metric-latest" }, format(last)));
    svg.appendChild(el("line", { x1: LEFT, y1: H - BOTTOM, x2: W - RIGHT, y2: H - BOTTOM, class: "metric-axis" }));
    svg.appendChild(el("line", { x1: LEFT, y1: TOP, x2: LEFT, y2: H - BOTTOM, class: "metric-axis" }));
    svg.appendChild(el("text", { x: LEFT - 4, y: TOP + 4, "text-anchor": "end", class: "metric-tick" }, format(y1)));
    svg.appendChild(el("text", { x: LEFT - 4, y: H - BOTTOM, "text-anchor": "end", class: "metric-tick" },
                       format(y0)));
    var label = bySteps ? function (v) { return "step " + Math.round(v); }
                        : function (v) { return new Date(v).toISOString().slice(11, 19); };
    svg.appendChild(el("text", { x: LEFT, y: H - 6, class: "metric-tick" }, label(x0)));
    svg.appendChild(el("text", { x: W - RIGHT, y: H - 6, "text-anchor": "end", class: "metric-tick" }, label(x1)));
    svg.appendChild(el("polyline", { points: coords.join(" "), class: "metric-line" }));
    return svg;
  }

  function draw(page) {
    var names = Object.keys(series).sort();
    holder.textContent = "";
    names.forEach(function (name) {
      if (series[name].length) { holder.appendChild(chart(name, series[name])); }
    });
    if (!names.length) {
      say(running() ? "No metrics reported yet." : "This job reported no metrics.");
    } else {
      var who = page.task + "-" + page.replica;
      var others = page.reporting.filter(function (r) { return r !== who; });
      say("Replica " + who + (others.length ? " (also reporting: " + others.join(", ") + ")" : "") +
          (running() ? " · live" : ""));
    }
  }

  function get(params) {
    return fetch(url + "?" + params.toString(), { credentials: "same-origin", cache: "no-store" })
      .then(function (response) {
        if (!response.ok) { throw new Error("HTTP " + response.status); }
        return response.json();
      });
  }

  function load(pages) {
    var params = new URLSearchParams();
    if (cursor) { params.set("cursor", cursor); }
    return get(params).then(function (page) {
      add(page);
      if (page.next_cursor && pages < MAX_PAGES) {
        cursor = page.next_cursor;
        return load(pages + 1);
      }
      cursor = page.next_cursor || page.cursor;
      return page;
    });
  }

  function poll(first) {
    load(first ? 0 : MAX_PAGES - 1)
      .then(function (page) {
        draw(page);
        var now = running();
        if (now || wasRunning) { window.setTimeout(poll, POLL_MS); }
        wasRunning = now;
      })
      .catch(function () {
        say("Metrics could not be read; retrying.");
        window.setTimeout(poll, POLL_MS);
      });
  }

  poll(true);
}());
