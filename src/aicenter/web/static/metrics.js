// aicenter console: the metrics jobs reported (aicenter.runtime.report), drawn with charts.js.
// A job's page has one chart per metric; the compare page (/jobs/compare) overlays several jobs, one line per
// job. Each job is read from GET /api/v1/jobs/{id}/metrics page by page, then, while a job runs, polled from
// its last cursor for the points reported since.
(function () {
  "use strict";

  var POLL_MS = 3000;
  var MAX_PAGES = 50;        // the first load reads at most 50 x 2000 points
  var MAX_KEPT = 20000;      // points kept per metric; past it every other point is dropped (the shape stays)

  var root = document.querySelector("[data-job-metrics]");
  if (!root || !window.fetch || !window.AicenterCharts) { return; }
  var holder = root.querySelector("[data-metrics-charts]");
  var state = root.querySelector("[data-metrics-state]");
  var sources = JSON.parse(root.getAttribute("data-sources") || "null") ||
    [{ label: "", url: root.getAttribute("data-metrics") }];
  var comparing = sources.length > 1 || root.hasAttribute("data-compare");
  var charts = {};   // metric name -> chart
  var wasRunning = false;  // polled once more after the job ended: its last points came before the exit

  function say(text) { if (state) { state.textContent = text; } }

  function running() {
    var live = document.querySelector("[data-job-live]");
    return !!(live && live.hasAttribute("data-refresh"));
  }

  function Source(spec) {
    this.label = spec.label;
    this.url = spec.url;
    this.series = {};   // name -> [{x, y, at}]
    this.latest = {};
    this.cursor = null;
    this.page = null;
  }

  Source.prototype.add = function (page) {
    var self = this;
    page.series.forEach(function (s) {
      var points = self.series[s.name] || (self.series[s.name] = []);
      s.points.forEach(function (p) {
        if (p.value === null) { return; }  // NaN or infinity: nothing to draw
        points.push({ step: p.step, at: Date.parse(p.at), y: p.value });
      });
      if (points.length > MAX_KEPT) {
        self.series[s.name] = points.filter(function (_p, i) { return i % 2 === 0 || i === points.length - 1; });
      }
    });
    Object.keys(page.latest).forEach(function (name) { self.latest[name] = page.latest[name]; });
    this.page = page;
  };

  Source.prototype.get = function () {
    var params = new URLSearchParams();
    if (this.cursor) { params.set("cursor", this.cursor); }
    return fetch(this.url + "?" + params.toString(), { credentials: "same-origin", cache: "no-store" })
      .then(function (response) {
        if (!response.ok) { throw new Error("HTTP " + response.status); }
        return response.json();
      });
  };

  Source.prototype.load = function (pages) {
    var self = this;
    return this.get().then(function (page) {
      self.add(page);
      if (page.next_cursor && pages < MAX_PAGES) {
        self.cursor = page.next_cursor;
        return self.load(pages + 1);
      }
      self.cursor = page.next_cursor || page.cursor;
      return page;
    });
  };

  var all = sources.map(function (spec) { return new Source(spec); });

  // A metric's points against the step when every point has one, else against the time it was reported.
  function lines(name) {
    var out = [], bySteps = true;
    all.forEach(function (source) {
      var points = source.series[name] || [];
      if (points.some(function (p) { return p.step === null; })) { bySteps = false; }
    });
    all.forEach(function (source) {
      var points = source.series[name];
      if (!points || !points.length) { return; }
      var label = source.label || (source.page ? source.page.task + "-" + source.page.replica : name);
      out.push({ label: label, points: points.map(function (p, i) {
        return { x: bySteps ? p.step : (isNaN(p.at) ? i : p.at), y: p.y };
      }) });
    });
    return { lines: out, x: bySteps ? "step" : "time" };
  }

  function draw() {
    var names = {};
    all.forEach(function (source) { Object.keys(source.series).forEach(function (n) { names[n] = true; }); });
    var sorted = Object.keys(names).sort();
    sorted.forEach(function (name) {
      var data = lines(name);
      if (!data.lines.length) { return; }
      var chart = charts[name];
      if (!chart) {
        var box = document.createElement("div");
        box.setAttribute("data-testid", "metric-chart");
        box.setAttribute("data-metric", name);
        holder.appendChild(box);
        chart = charts[name] = window.AicenterCharts.draw(box, { title: name, name: name, x: data.x,
                                                                 testid: "metric-svg" });
      }
      chart.options.x = data.x;
      chart.update(data.lines);
      var total = data.lines.reduce(function (n, l) { return n + l.points.length; }, 0);
      chart.holder.setAttribute("data-points", String(total));
      if (!comparing) {
        var latest = all[0].latest[name];
        if (latest) { chart.latestEl.textContent = window.AicenterCharts.format(latest.value, ""); }
      }
    });
    // Charts appear in name order whatever order their first points came in.
    sorted.forEach(function (name) { if (charts[name]) { holder.appendChild(charts[name].holder); } });
    if (!sorted.length) {
      say(comparing ? "None of these jobs reported metrics." :
        (running() ? "No metrics reported yet." : "This job reported no metrics."));
    } else if (comparing) {
      say(all.length + " jobs, replica 0 of each");
    } else {
      var page = all[0].page;
      var who = page.task + "-" + page.replica;
      var others = page.reporting.filter(function (r) { return r !== who; });
      say("Replica " + who + (others.length ? " (also reporting: " + others.join(", ") + ")" : "") +
          (running() ? " · live" : ""));
    }
  }

  function poll(first) {
    Promise.all(all.map(function (source) { return source.load(first ? 0 : MAX_PAGES - 1); }))
      .then(function () {
        draw();
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
