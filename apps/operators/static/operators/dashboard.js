// Draws the dashboard's charts from the JSON the page carries (templates/operators/dashboard.html).
// Each chart instance is kept on window.scrapejobsCharts so a browser test can ask what it drew.
(function () {
  "use strict";
  var palette = ["#417690", "#e07b39", "#5b9e4d", "#c0392b", "#8e6bbf", "#d4ac0d", "#16a085", "#7f8c8d"];
  var charts = JSON.parse(document.getElementById("dashboard-data").textContent);
  window.scrapejobsCharts = {};
  charts.forEach(function (spec) {
    var canvas = document.querySelector('canvas[data-chart="' + spec.id + '"]');
    if (!canvas) { return; }  // empty or failed: the page says why in words
    var datasets = spec.datasets.map(function (d, i) {
      var color = d.slo ? "#c0392b" : palette[i % palette.length];
      return {
        label: d.label, data: d.data, borderColor: color, backgroundColor: color,
        borderDash: d.slo ? [6, 4] : [], pointRadius: d.slo ? 0 : 2, spanGaps: true, borderWidth: 2
      };
    });
    var bar = spec.kind === "bar";  // horizontal: categories (domains) on y, values on x
    var unit = { display: !!spec.unit, text: spec.unit };
    window.scrapejobsCharts[spec.id] = new Chart(canvas, {
      type: spec.kind,
      data: { labels: spec.labels, datasets: datasets },
      options: {
        animation: false, responsive: true, maintainAspectRatio: false,
        indexAxis: bar ? "y" : "x",
        plugins: { legend: { position: "bottom", labels: { boxWidth: 12 } } },
        scales: bar
          ? { x: { beginAtZero: true, title: unit }, y: { ticks: { autoSkip: false } } }
          : { x: { ticks: { maxTicksLimit: 12 } }, y: { beginAtZero: true, title: unit } }
      }
    });
  });
})();
