// aicenter console charts: the one helper every chart uses (overview, node, job, compare pages).
// Inline SVG, no library, no CDN: a computing center's console often has no way out to the internet.
//
//   AicenterCharts.draw(holder, {title, unit, x: "time"|"step", area, testid, name, empty}, series)
//       series: [{label, points: [{x, y}]}], x a number (ms since the epoch for "time", a step otherwise).
//       Returns the chart; chart.update(series) redraws it. The chart follows its holder's width.
//   AicenterCharts.format(value, unit)       readable numbers: 1.5 GiB, 42%, 3.2 s, 12.4k
//   AicenterCharts.range()                   the page's time range in seconds (?range=1h|6h|24h|7d|30d|90d)
//
// Elements with data-chart read GET /api/v1/series themselves (see templates/_charts.html); the range picker
// and the auto refresh select (data-chart-range, data-chart-refresh) reload every such chart on the page.
(function () {
  "use strict";

  var SVG = "http://www.w3.org/2000/svg";
  var H = 190, LEFT = 64, RIGHT = 12, TOP = 12, BOTTOM = 24;
  var MAX_DRAWN = 600;        // points drawn per line: a 600 px chart cannot show more
  var MAX_LINES = 12;         // lines per chart; past it the rest are summed up in the legend
  var COLORS = ["#2459d6", "#d9622b", "#1f7a4d", "#9b3fb5", "#c4322b", "#0e8a96", "#8a6d00", "#5f6b7a",
                "#e0529c", "#3f8f2f", "#6a4fd6", "#b05a10"];
  var RANGES = { "1h": 3600, "6h": 21600, "24h": 86400, "7d": 604800, "30d": 2592000, "90d": 7776000 };
  // Server-side downsampling steps; the chart asks for the smallest giving at most ~300 points per line.
  var STEPS = [15, 60, 300, 900, 3600, 21600, 86400];
  var BINARY = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];

  function trim(value, digits) {
    return String(Number(value.toPrecision(digits)));
  }

  function si(value) {
    var abs = Math.abs(value);
    if (abs >= 1e9) { return trim(value / 1e9, 3) + "G"; }
    if (abs >= 1e6) { return trim(value / 1e6, 3) + "M"; }
    if (abs >= 1e3) { return trim(value / 1e3, 3) + "k"; }
    if (abs !== 0 && abs < 1e-3) { return value.toExponential(2); }
    return trim(value, 4);
  }

  function bytes(value) {
    var abs = Math.abs(value), i = 0;
    while (abs >= 1024 && i < BINARY.length - 1) { abs /= 1024; value /= 1024; i += 1; }
    return trim(value, 3) + " " + BINARY[i];
  }

  function seconds(value) {
    var abs = Math.abs(value);
    if (abs === 0) { return "0 s"; }
    if (abs < 1) { return trim(value * 1000, 3) + " ms"; }
    if (abs < 120) { return trim(value, 3) + " s"; }
    if (abs < 7200) { return trim(value / 60, 3) + " min"; }
    if (abs < 172800) { return trim(value / 3600, 3) + " h"; }
    return trim(value / 86400, 3) + " d";
  }

  function format(value, unit) {
    if (value === null || value === undefined || isNaN(value)) { return "—"; }
    switch (unit) {
      case "bytes": return bytes(value);
      case "bytes_per_second": return bytes(value) + "/s";
      case "ratio": return trim(value * 100, 3) + "%";
      case "percent": return trim(value, 3) + "%";
      case "seconds": case "s": return seconds(value);
      case "cores": return si(value) + (Math.abs(value) === 1 ? " core" : " cores");
      case "celsius": return trim(value, 3) + " °C";
      case "watts": return si(value) + " W";
      default: return si(value);
    }
  }

  function pad(n) { return (n < 10 ? "0" : "") + n; }

  // Times are UTC everywhere in the console (the tables say "2024-05-01 13:04 UTC").
  function formatX(x, kind, span) {
    if (kind === "step") { return "step " + si(Math.round(x)); }
    var d = new Date(x);
    var hm = pad(d.getUTCHours()) + ":" + pad(d.getUTCMinutes());
    if (span <= 2 * 3600 * 1000) { return hm + ":" + pad(d.getUTCSeconds()); }
    if (span <= 36 * 3600 * 1000) { return hm; }
    return pad(d.getUTCMonth() + 1) + "-" + pad(d.getUTCDate()) + (span <= 8 * 86400 * 1000 ? " " + hm : "");
  }

  // Round tick values: 1, 2 or 5 times a power of ten (of 1024 for bytes, so ticks read 512 MiB, 1 GiB).
  function ticks(lo, hi, unit, count) {
    var span = hi - lo;
    if (span <= 0) { return [lo]; }
    var base = (unit === "bytes" || unit === "bytes_per_second") && span >= 1024 ? 1024 : 10;
    var raw = span / count;
    var power = Math.pow(base, Math.floor(Math.log(raw) / Math.log(base)));
    var steps = base === 1024 ? [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024] : [1, 2, 5, 10];
    var step = power;
    for (var i = 0; i < steps.length; i += 1) {
      step = steps[i] * power;
      if (step >= raw) { break; }
    }
    var out = [];
    // From the tick at or below lo to the one at or above hi: the top line always has its label.
    var top = Math.ceil(hi / step - 1e-9) * step;
    for (var v = Math.floor(lo / step + 1e-9) * step; v <= top + step * 1e-9; v += step) { out.push(v); }
    return out;
  }

  function el(name, attrs, text) {
    var node = document.createElementNS(SVG, name);
    Object.keys(attrs).forEach(function (k) { node.setAttribute(k, String(attrs[k])); });
    if (text !== undefined) { node.textContent = text; }
    return node;
  }

  function html(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) { node.className = cls; }
    if (text !== undefined) { node.textContent = text; }
    return node;
  }

  function thin(points) {
    var every = Math.max(1, Math.ceil(points.length / MAX_DRAWN));
    if (every === 1) { return points; }
    return points.filter(function (_p, i) { return i % every === 0 || i === points.length - 1; });
  }

  function Chart(holder, options) {
    this.holder = holder;
    this.options = options || {};
    this.series = [];
    this.hidden = {};
    holder.classList.add("chart");
    this.head = html("div", "chart-head");
    this.titleEl = html("span", "chart-title", this.options.title || this.options.name || "");
    this.latestEl = html("span", "chart-latest");
    this.latestEl.setAttribute("data-testid", "chart-latest");
    this.head.appendChild(this.titleEl);
    this.head.appendChild(this.latestEl);
    this.body = html("div", "chart-body");
    this.tip = html("div", "chart-tip");
    this.tip.setAttribute("data-testid", "chart-tooltip");
    this.tip.hidden = true;
    this.legend = html("div", "chart-legend");
    this.legend.setAttribute("data-testid", "chart-legend");
    holder.textContent = "";
    holder.appendChild(this.head);
    holder.appendChild(this.body);
    holder.appendChild(this.legend);
    this.body.appendChild(this.tip);
    var self = this;
    if (window.ResizeObserver) {
      var lastWidth = 0;
      new ResizeObserver(function () {
        var w = self.body.clientWidth;
        if (w && Math.abs(w - lastWidth) > 2) { lastWidth = w; self.render(); }
      }).observe(this.body);
    } else {
      window.addEventListener("resize", function () { self.render(); });
    }
  }

  Chart.prototype.update = function (series) {
    this.series = (series || []).filter(function (s) { return s.points && s.points.length; });
    this.series.forEach(function (s) {
      s.points = s.points.filter(function (p) { return p.y !== null && !isNaN(p.y); });
      s.points.sort(function (a, b) { return a.x - b.x; });
    });
    this.series = this.series.filter(function (s) { return s.points.length; });
    this.render();
  };

  Chart.prototype.say = function (text) {
    this.holder.setAttribute("data-state", "error");
    this.latestEl.textContent = "";
    this.body.querySelectorAll("svg, .chart-empty").forEach(function (n) { n.remove(); });
    var note = html("p", "chart-empty muted", text);
    note.setAttribute("data-testid", "chart-empty");
    this.body.appendChild(note);
  };

  Chart.prototype.render = function () {
    var o = this.options, unit = o.unit || "", kind = o.x || "time";
    var self = this;
    this.body.querySelectorAll("svg, .chart-empty").forEach(function (n) { n.remove(); });
    this.legend.textContent = "";
    this.tip.hidden = true;
    var drawn = this.series.slice(0, MAX_LINES);
    var visible = drawn.filter(function (s) { return !self.hidden[s.label]; });
    var total = this.series.reduce(function (n, s) { return n + s.points.length; }, 0);
    this.holder.setAttribute("data-points", String(total));
    this.holder.setAttribute("data-series-count", String(this.series.length));
    if (!this.series.length) {
      this.holder.setAttribute("data-state", "empty");
      this.latestEl.textContent = "";
      var note = html("p", "chart-empty muted", o.empty || "no samples yet");
      note.setAttribute("data-testid", "chart-empty");
      this.body.appendChild(note);
      return;
    }
    this.holder.setAttribute("data-state", "drawn");
    var W = Math.max(240, Math.round(this.body.clientWidth || 480));
    var xs = [], ys = [];
    visible.forEach(function (s) { s.points.forEach(function (p) { xs.push(p.x); ys.push(p.y); }); });
    if (!xs.length) { xs = [0, 1]; ys = [0, 1]; }
    var x0 = o.xMin !== undefined ? o.xMin : Math.min.apply(null, xs);
    var x1 = o.xMax !== undefined ? o.xMax : Math.max.apply(null, xs);
    var y0 = Math.min.apply(null, ys), y1 = Math.max.apply(null, ys);
    // Utilization reads against its full scale; amounts from zero, so a flat line is not drawn as a cliff.
    if (unit === "ratio") { y0 = Math.min(0, y0); y1 = Math.max(1, y1); }
    else if (unit !== "" && y0 >= 0) { y0 = 0; }
    if (x1 === x0) { x1 = x0 + 1; }
    if (y1 === y0) { var pad0 = Math.max(Math.abs(y0) * 0.1, 1e-9); y1 = y0 + pad0; y0 = y0 - (y0 === 0 ? 0 : pad0); }
    var yt = ticks(y0, y1, unit, 4);
    y1 = Math.max(y1, yt[yt.length - 1]);
    y0 = Math.min(y0, yt[0]);
    var plotW = W - LEFT - RIGHT, plotH = H - TOP - BOTTOM;
    function px(x) { return LEFT + (x - x0) / (x1 - x0) * plotW; }
    function py(y) { return TOP + (1 - (y - y0) / (y1 - y0)) * plotH; }

    var svg = el("svg", { viewBox: "0 0 " + W + " " + H, width: W, height: H, role: "img", class: "chart-svg",
                          "data-testid": o.testid || "chart-svg",
                          "aria-label": (o.title || o.name || "chart") + ", " + visible.length + " series" });
    if (o.name) { svg.setAttribute("data-metric", o.name); }
    svg.setAttribute("data-points", String(total));
    yt.forEach(function (v) {
      var y = py(v).toFixed(1);
      svg.appendChild(el("line", { x1: LEFT, x2: W - RIGHT, y1: y, y2: y, class: "chart-grid" }));
      svg.appendChild(el("text", { x: LEFT - 6, y: Number(y) + 3, "text-anchor": "end", class: "chart-tick",
                                   "data-testid": "chart-ytick" }, format(v, unit)));
    });
    svg.appendChild(el("line", { x1: LEFT, y1: H - BOTTOM, x2: W - RIGHT, y2: H - BOTTOM, class: "chart-axis" }));
    var span = x1 - x0;
    var xcount = Math.max(2, Math.min(6, Math.floor(plotW / 110)));
    for (var i = 0; i <= xcount; i += 1) {
      var xv = x0 + span * i / xcount;
      var anchor = i === 0 ? "start" : (i === xcount ? "end" : "middle");
      svg.appendChild(el("text", { x: px(xv).toFixed(1), y: H - 6, "text-anchor": anchor, class: "chart-tick",
                                   "data-testid": "chart-xtick" }, formatX(xv, kind, span)));
    }
    drawn.forEach(function (s, idx) {
      var color = COLORS[idx % COLORS.length];
      s.color = color;
      if (self.hidden[s.label]) { return; }
      var pts = thin(s.points);
      var d = pts.map(function (p, j) { return (j ? "L" : "M") + px(p.x).toFixed(1) + "," + py(p.y).toFixed(1); })
        .join("");
      if (pts.length === 1) {
        svg.appendChild(el("circle", { cx: px(pts[0].x).toFixed(1), cy: py(pts[0].y).toFixed(1), r: 2.5,
                                       fill: color, class: "chart-dot" }));
      }
      if (o.area) {
        var base = py(Math.max(y0, 0)).toFixed(1);
        svg.appendChild(el("path", { d: d + "L" + px(pts[pts.length - 1].x).toFixed(1) + "," + base + "L" +
                                        px(pts[0].x).toFixed(1) + "," + base + "Z",
                                     fill: color, class: "chart-area" }));
      }
      svg.appendChild(el("path", { d: d, stroke: color, class: "chart-line", "data-testid": "chart-line",
                                   "data-series": s.label, "data-points": s.points.length }));
    });
    var cursor = el("line", { x1: 0, x2: 0, y1: TOP, y2: H - BOTTOM, class: "chart-cursor", visibility: "hidden" });
    svg.appendChild(cursor);
    this.body.insertBefore(svg, this.tip);

    var last = visible.length ? visible[0].points[visible[0].points.length - 1] : null;
    this.latestEl.textContent = last && visible.length === 1 ? format(last.y, unit) : "";

    drawn.forEach(function (s) {
      var item = html("button", "chart-legend-item" + (self.hidden[s.label] ? " off" : ""));
      item.type = "button";
      item.setAttribute("data-testid", "chart-legend-item");
      item.title = self.hidden[s.label] ? "Show this line" : "Hide this line";
      var swatch = html("span", "chart-swatch");
      swatch.style.background = s.color;
      item.appendChild(swatch);
      var lastPoint = s.points[s.points.length - 1];
      item.appendChild(document.createTextNode(s.label + " " + format(lastPoint.y, unit)));
      item.addEventListener("click", function () { self.hidden[s.label] = !self.hidden[s.label]; self.render(); });
      self.legend.appendChild(item);
    });
    if (this.series.length > MAX_LINES) {
      this.legend.appendChild(html("span", "muted small", "+" + (this.series.length - MAX_LINES) + " more not drawn"));
    }

    svg.addEventListener("mousemove", function (event) {
      var box = svg.getBoundingClientRect();
      var mx = (event.clientX - box.left) * (W / box.width);
      if (mx < LEFT || mx > W - RIGHT) { cursor.setAttribute("visibility", "hidden"); self.tip.hidden = true; return; }
      var target = x0 + (mx - LEFT) / plotW * (x1 - x0);
      var rows = [], at = null;
      visible.forEach(function (s) {
        var best = null;
        s.points.forEach(function (p) { if (best === null || Math.abs(p.x - target) < Math.abs(best.x - target)) { best = p; } });
        if (best) { rows.push([s, best]); if (at === null || Math.abs(best.x - target) < Math.abs(at - target)) { at = best.x; } }
      });
      if (at === null) { return; }
      cursor.setAttribute("x1", px(at).toFixed(1));
      cursor.setAttribute("x2", px(at).toFixed(1));
      cursor.setAttribute("visibility", "visible");
      self.tip.textContent = "";
      self.tip.appendChild(html("div", "chart-tip-head", kind === "step" ? formatX(at, kind, 0)
        : new Date(at).toISOString().replace("T", " ").slice(0, 19) + " UTC"));
      rows.forEach(function (r) {
        var row = html("div", "chart-tip-row");
        var swatch = html("span", "chart-swatch");
        swatch.style.background = r[0].color;
        row.appendChild(swatch);
        row.appendChild(document.createTextNode(r[0].label + ": " + format(r[1].y, unit)));
        self.tip.appendChild(row);
      });
      self.tip.hidden = false;
      var left = px(at) * (box.width / W);
      self.tip.style.left = Math.min(left + 12, box.width - self.tip.offsetWidth - 4) + "px";
    });
    svg.addEventListener("mouseleave", function () { cursor.setAttribute("visibility", "hidden"); self.tip.hidden = true; });
  };

  function draw(holder, options, series) {
    var chart = new Chart(holder, options);
    chart.update(series || []);
    return chart;
  }

  // --- the page's time range and auto refresh ---------------------------------------------------------------

  function param(name) { return new URLSearchParams(window.location.search).get(name); }

  // The page's default range sits on its picker (a job's page picks one that covers the job's run).
  function defaultRange() {
    var picker = document.querySelector("[data-chart-range]");
    return (picker && picker.getAttribute("data-default")) || "1h";
  }

  function range() {
    return RANGES[param("range")] || RANGES[defaultRange()] || 3600;
  }

  function stepFor(spanS) {
    for (var i = 0; i < STEPS.length; i += 1) { if (spanS / STEPS[i] <= 300) { return STEPS[i]; } }
    return STEPS[STEPS.length - 1];
  }

  // "{node} {device}" with the series' labels (and job_id), or the series name when the label is missing.
  function labelOf(template, data, name) {
    if (!template) {
      var keys = Object.keys(data.labels || {}).sort();
      return keys.length ? keys.map(function (k) { return data.labels[k]; }).join(" ") : name;
    }
    return template.replace(/\{(\w+)\}/g, function (_m, key) {
      if (key === "job_id") { return String(data.job_id); }
      if (key === "name") { return name; }
      var v = (data.labels || {})[key];
      return v === undefined ? "" : v;
    });
  }

  // Lines with the same label are combined into one ("mean" or "sum" of the values at each instant).
  function combine(lines, how) {
    if (!how) { return lines; }
    var byLabel = {}, order = [];
    lines.forEach(function (s) {
      if (!byLabel[s.label]) { byLabel[s.label] = {}; order.push(s.label); }
      s.points.forEach(function (p) {
        var slot = byLabel[s.label][p.x] || (byLabel[s.label][p.x] = { sum: 0, n: 0 });
        slot.sum += p.y;
        slot.n += 1;
      });
    });
    return order.map(function (label) {
      var slots = byLabel[label];
      return { label: label, points: Object.keys(slots).map(function (x) {
        var slot = slots[x];
        return { x: Number(x), y: how === "sum" ? slot.sum : slot.sum / slot.n };
      }) };
    });
  }

  function fetchSeries(query, startS, endS, step) {
    var params = new URLSearchParams();
    params.set("name", query.name);
    params.set("start", new Date(startS * 1000).toISOString());
    params.set("end", new Date(endS * 1000).toISOString());
    params.set("step", String(step));
    Object.keys(query.params || {}).forEach(function (k) {
      var v = query.params[k];
      (Array.isArray(v) ? v : [v]).forEach(function (one) { params.append(k, String(one)); });
    });
    return fetch("/api/v1/series?" + params.toString(), { credentials: "same-origin", cache: "no-store" })
      .then(function (response) {
        return response.json().then(function (body) {
          if (response.status === 404) { return { series: [] }; }  // unknown_series: nothing recorded yet
          if (!response.ok) {
            var error = new Error((body.error && body.error.message) || ("HTTP " + response.status));
            error.body = body;
            throw error;
          }
          return body;
        }, function () { throw new Error("HTTP " + response.status); });
      })
      .then(null, function (error) {
        var e = error.body && error.body.error;
        if (e && e.code === "range_too_wide" && e.details && e.details.min_step_s > step) {
          return fetchSeries(query, startS, endS, e.details.min_step_s);
        }
        throw error;
      });
  }

  function loadSeriesChart(holder) {
    var chart = holder._chart;
    if (!chart) {
      chart = holder._chart = new Chart(holder, {
        title: holder.getAttribute("data-title"), unit: holder.getAttribute("data-unit") || "",
        area: holder.hasAttribute("data-area"), empty: holder.getAttribute("data-empty") || undefined,
        name: holder.getAttribute("data-name") || undefined
      });
    }
    var queries = JSON.parse(holder.getAttribute("data-series") || "[]");
    // The range's end is exclusive and sampled in whole seconds: a second past now keeps the newest sample in.
    var endS = Math.ceil(Date.now() / 1000) + 1, spanS = range(), startS = endS - spanS;
    var step = stepFor(spanS);
    holder.setAttribute("data-loading", "");
    return Promise.all(queries.map(function (q) {
      return fetchSeries(q, startS, endS, step).then(function (body) {
        var lines = (body.series || []).map(function (data) {
          return { label: labelOf(q.label, data, q.name), points: (data.points || []).map(function (p) {
            return { x: Date.parse(p.at), y: p.value };
          }) };
        });
        return combine(lines, q.combine);
      });
    })).then(function (groups) {
      chart.options.xMin = startS * 1000;
      chart.options.xMax = endS * 1000;
      chart.update([].concat.apply([], groups));
      holder.removeAttribute("data-loading");
    }, function (error) {
      holder.removeAttribute("data-loading");
      chart.say("Could not read the series: " + error.message);
    });
  }

  function loadAll() {
    document.querySelectorAll("[data-chart]").forEach(function (holder) { loadSeriesChart(holder); });
  }

  var timer = null;
  // A running job's page refreshes by default (its select says so); others start with auto refresh off.
  function refreshDefault() {
    var select = document.querySelector("[data-chart-refresh]");
    return (select && select.getAttribute("data-default")) || "0";
  }

  function schedule() {
    if (timer) { window.clearInterval(timer); timer = null; }
    var every = Number(param("refresh") || refreshDefault());
    if (every > 0) { timer = window.setInterval(refresh, every * 1000); }
  }

  // Auto refresh redraws the charts and swaps in the server-rendered parts marked data-live (tiles, tables).
  function refresh() {
    loadAll();
    var live = document.querySelectorAll("[data-live]");
    if (!live.length) { return; }
    fetch(window.location.href, { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(new Error("HTTP " + r.status)); })
      .then(function (text) {
        var doc = new DOMParser().parseFromString(text, "text/html");
        live.forEach(function (node) {
          var fresh = doc.querySelector("[data-live='" + node.getAttribute("data-live") + "']");
          if (fresh) { node.innerHTML = fresh.innerHTML; }
        });
      }, function () { /* the next tick tries again */ });
  }

  function setParam(name, value, fallback) {
    var url = new URL(window.location.href);
    if (value === fallback) { url.searchParams.delete(name); } else { url.searchParams.set(name, value); }
    window.history.replaceState(null, "", url.toString());
  }

  function marks() {
    var chosen = RANGES[param("range")] ? param("range") : defaultRange();
    document.querySelectorAll("[data-chart-range] a[data-range]").forEach(function (a) {
      var on = a.getAttribute("data-range") === chosen;
      a.classList.toggle("active", on);
      if (on) { a.setAttribute("aria-current", "true"); } else { a.removeAttribute("aria-current"); }
    });
  }

  document.addEventListener("click", function (event) {
    var a = event.target instanceof Element ? event.target.closest("[data-chart-range] a[data-range]") : null;
    if (!a) { return; }
    event.preventDefault();  // the link works without JavaScript (a page load); with it only the charts reload
    setParam("range", a.getAttribute("data-range"), "");
    marks();
    loadAll();
  });

  document.addEventListener("change", function (event) {
    var select = event.target;
    if (!(select instanceof HTMLSelectElement) || !select.hasAttribute("data-chart-refresh")) { return; }
    setParam("refresh", select.value, refreshDefault());
    schedule();
  });

  window.AicenterCharts = { draw: draw, format: format, formatX: formatX, range: range, reload: loadAll,
                            refresh: refresh, stepFor: stepFor };

  function start() {
    marks();
    var select = document.querySelector("[data-chart-refresh]");
    if (select && param("refresh")) { select.value = param("refresh"); }
    loadAll();
    schedule();
  }
  if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", start); } else { start(); }
}());
