// The usage report's chart: one line per group, spend (coins) per period, from the page's data-series
// (the numbers of the table below it; no request of its own).
(function () {
  "use strict";

  function start() {
    var holder = document.querySelector("[data-billing-chart]");
    if (!holder || !window.AicenterCharts) { return; }
    var series = JSON.parse(holder.getAttribute("data-series") || "[]");
    window.AicenterCharts.draw(holder, { title: "Coins spent per period", unit: "", x: "time",
                                         testid: "billing-chart-svg", empty: "no charges in this range" }, series);
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
}());
