// Capacity charts: each measured number against the level of load (users, or requests/s), one line per run.
// Data: the JSON in #chart-data, a list of runs as console.capacity.exports.run_dict gives them.
// Drawn with uPlot (static/vendor/uplot-1.6.32); redrawn when htmx swaps the run's status in.
(function () {
  "use strict";
  var COLORS = ["#b35c00", "#1f5f99", "#2f7d4f", "#8a3fa0", "#777"];
  var CHARTS = [
    {title: "TTFT p50 and p90 (s)", fields: [["ttft_p50", "p50"], ["ttft_p90", "p90"]]},
    {title: "ITL p50 (s)", fields: [["itl_p50", "p50"]]},
    {title: "Output tokens/s, all users", fields: [["output_tokens_per_s", ""]]},
    {title: "Tokens/s per user", fields: [["per_user_tokens_per_s", ""]]},
    {title: "Goodput at the SLO (requests/s)", fields: [["goodput_rps", ""]]},
    {title: "Engine KV-cache peak (%)", fields: [["kv_cache_peak", "", 100]]}
  ];

  function value(result, field, scale) {
    var v = field in result ? result[field] : (result.engine || {})[field];
    return v === null || v === undefined ? null : v * (scale || 1);
  }

  function draw() {
    var holder = document.getElementById("charts");
    var source = document.getElementById("chart-data");
    if (!holder || !source || typeof uPlot === "undefined") { return; }
    var runs = JSON.parse(source.textContent).filter(function (r) { return r.results.length; });
    holder.innerHTML = "";
    if (!runs.length) { return; }
    var levels = [];
    runs.forEach(function (r) { r.results.forEach(function (x) { if (levels.indexOf(x.level) < 0) { levels.push(x.level); } }); });
    levels.sort(function (a, b) { return a - b; });
    var logX = levels.length > 1 && levels[0] > 0 && levels[levels.length - 1] / levels[0] >= 10;
    var x = {time: false, distr: logX ? 3 : 1};
    if (levels.length === 1) { x.range = function (u, min, max) { return [min / 2, max * 1.5 || 1]; }; }  // not a zero-width scale
    var unit = runs[0].mode === "rate" ? "requests/s" : "concurrent users";
    CHARTS.forEach(function (chart) {
      var data = [levels], series = [{label: unit}];
      runs.forEach(function (run, i) {
        chart.fields.forEach(function (f, j) {
          var byLevel = {};
          run.results.forEach(function (x) { byLevel[x.level] = value(x, f[0], f[2]); });
          data.push(levels.map(function (l) { return l in byLevel ? byLevel[l] : null; }));
          var name = (runs.length > 1 ? "run " + run.id + (run.label ? " (" + run.label + ")" : "") : "") + (f[1] ? " " + f[1] : "");
          series.push({label: name.trim() || chart.title, stroke: COLORS[i % COLORS.length], width: 2,
                       dash: j ? [6, 4] : undefined, points: {size: 7}, spanGaps: true});
        });
      });
      var figure = document.createElement("figure");
      var caption = document.createElement("figcaption");
      caption.textContent = chart.title;
      figure.appendChild(caption);
      holder.appendChild(figure);
      new uPlot({
        width: 440, height: 230, series: series,
        scales: {y: {range: function (u, min, max) { return [0, max > 0 ? max * 1.1 : 1]; }},
                 x: Object.assign({}, x)},
        // a log axis hands values() null for the ticks it leaves unlabelled (uPlot's log10AxisValsFilt)
        axes: [{label: unit, values: function (u, ticks) { return ticks.map(function (t) { return t === null ? "" : +t.toPrecision(3); }); }}, {}],
        legend: {show: true}
      }, data, figure);
    });
  }

  document.addEventListener("DOMContentLoaded", draw);
  document.addEventListener("htmx:afterSettle", draw);
})();
