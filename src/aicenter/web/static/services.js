// aicenter console, a service's page: the request rate, latency (p50/p99), errors and requests in flight of the
// last hour, per revision, from GET /api/v1/services/<id>/load (what the gateways reported, about every second,
// all gateways summed), redrawn every 15 s. Reports are binned into 10 s buckets: a rate per second, the
// slowest p50/p99 of the bucket. Drawn with AicenterCharts (charts.js), like every console chart.
(function () {
  "use strict";

  var BUCKET_MS = 10000;
  var SPAN_MS = 3600 * 1000;
  var REFRESH_MS = 15000;
  var CHARTS = {
    rate: { title: "Requests per second", unit: "" },
    latency: { title: "Latency (p50, p99)", unit: "seconds" },
    errors: { title: "Errors per second", unit: "" },
    concurrency: { title: "Requests in flight", unit: "" },
    replicas: { title: "Replicas (running, ready)", unit: "" }
  };

  function bucketsOf(points) {
    // revision -> bucket start (ms) -> {requests, errors, concurrency, n, p50, p99}
    var byRevision = {};
    points.forEach(function (p) {
      var at = Math.floor(Date.parse(p.at) / BUCKET_MS) * BUCKET_MS;
      var revision = byRevision[p.revision] = byRevision[p.revision] || {};
      var b = revision[at] = revision[at] || { requests: 0, errors: 0, concurrency: 0, n: 0, p50: null, p99: null };
      b.requests += p.requests;
      b.errors += p.errors;
      b.concurrency += p.concurrency;
      b.n += 1;
      if (p.p50_ms !== null && (b.p50 === null || p.p50_ms > b.p50)) { b.p50 = p.p50_ms; }
      if (p.p99_ms !== null && (b.p99 === null || p.p99_ms > b.p99)) { b.p99 = p.p99_ms; }
    });
    return byRevision;
  }

  function series(byRevision, kind, now) {
    var out = [];
    Object.keys(byRevision).sort(function (a, b) { return a - b; }).forEach(function (revision) {
      var buckets = byRevision[revision];
      var times = Object.keys(buckets).map(Number).sort(function (a, b) { return a - b; });
      // Gateways report only while a revision is busy (and once more when it goes quiet): a bucket without
      // a report had no requests, so counts read 0 there, from a bucket before the first report to now.
      var every = [];
      for (var t = times[0] - BUCKET_MS; t <= now; t += BUCKET_MS) { every.push(t); }
      function line(label, value, counted) {
        var points = [];
        (counted ? every : times).forEach(function (t) {
          var y = buckets[t] ? value(buckets[t]) : 0;
          if (y !== null) { points.push({ x: t, y: y }); }
        });
        out.push({ label: label, points: points });
      }
      var name = "revision " + revision;
      if (kind === "rate") { line(name, function (b) { return b.requests / (BUCKET_MS / 1000); }, true); }
      if (kind === "errors") { line(name, function (b) { return b.errors / (BUCKET_MS / 1000); }, true); }
      if (kind === "concurrency") { line(name, function (b) { return b.concurrency / b.n; }, true); }
      if (kind === "latency") {
        line(name + " p50", function (b) { return b.p50 === null ? null : b.p50 / 1000; });
        line(name + " p99", function (b) { return b.p99 === null ? null : b.p99 / 1000; });
      }
    });
    return out;
  }

  // Replicas over time from the page's spans (when each replica's job ran, when it was ready, drained): the
  // running ones in all, and the ready ones per revision, at every bucket of the last hour.
  function replicaSeries(spans, now) {
    var start = now - SPAN_MS;
    function count(label, list, from, until) {
      var points = [];
      for (var t = start; t <= now; t += BUCKET_MS) {
        var n = 0;
        list.forEach(function (s) {
          var a = from(s), b = until(s);
          if (a !== null && a <= t && (b === null || b > t)) { n += 1; }
        });
        points.push({ x: t, y: n });
      }
      return { label: label, points: points };
    }
    if (!spans.length) { return []; }
    var out = [count("running", spans, function (s) { return s.started; }, function (s) { return s.finished; })];
    var revisions = {};
    spans.forEach(function (s) { revisions[s.revision] = true; });
    Object.keys(revisions).sort(function (a, b) { return a - b; }).forEach(function (revision) {
      var mine = spans.filter(function (s) { return String(s.revision) === revision; });
      out.push(count("revision " + revision + " ready", mine, function (s) { return s.ready; },
                     function (s) { return s.draining !== null ? s.draining : s.finished; }));
    });
    return out;
  }

  function load(root, charts) {
    return fetch(root.getAttribute("data-service-load"), { credentials: "same-origin", cache: "no-store" })
      .then(function (response) {
        if (!response.ok) { throw new Error("HTTP " + response.status); }
        return response.json();
      })
      .then(function (points) {
        var byRevision = bucketsOf(points);
        var now = Date.now();
        Object.keys(charts).forEach(function (kind) {
          charts[kind].options.xMin = now - SPAN_MS;
          charts[kind].options.xMax = now;
          if (kind === "replicas") {
            var holder = root.querySelector("[data-load-chart=replicas]");
            charts[kind].update(replicaSeries(JSON.parse(holder.getAttribute("data-spans") || "[]"), now));
          } else {
            charts[kind].update(series(byRevision, kind, Math.floor(now / BUCKET_MS) * BUCKET_MS));
          }
        });
      }, function (error) {
        Object.keys(charts).forEach(function (kind) { charts[kind].say("Could not read the load: " + error.message); });
      });
  }

  function start() {
    var root = document.querySelector("[data-service-load]");
    if (!root || !window.fetch || !window.AicenterCharts) { return; }
    var charts = {};
    root.querySelectorAll("[data-load-chart]").forEach(function (holder) {
      var kind = holder.getAttribute("data-load-chart");
      var spec = CHARTS[kind];
      charts[kind] = window.AicenterCharts.draw(holder, { title: spec.title, unit: spec.unit, x: "time",
                                                          empty: "no requests in the last hour" }, []);
    });
    load(root, charts);
    window.setInterval(function () { load(root, charts); }, REFRESH_MS);
  }

  start();
}());
