// Capacity charts: each measured number against the level of load (users, or requests/s), one line per run.
// Data: the JSON in #chart-data, a list of runs as console.capacity.exports.run_dict gives them.
// Drawn with uPlot (static/vendor/uplot-1.6.32); redrawn when htmx swaps the run's status in, and when the browser
// turns dark or light (colours: static/hearth-chart-kit.js). Hovering shows the level and each value with its unit.
(function () {
  "use strict";
  var CHARTS = [
    {title: "TTFT p50 and p90 (s)", unit: "s", fields: [["ttft_p50", "p50"], ["ttft_p90", "p90"]]},
    {title: "ITL p50 (s)", unit: "s", fields: [["itl_p50", "p50"]]},
    {title: "Output tokens/s, all users", unit: "tokens/s", fields: [["output_tokens_per_s", ""]]},
    {title: "Tokens/s per user", unit: "tokens/s", fields: [["per_user_tokens_per_s", ""]]},
    {title: "Goodput at the SLO (requests/s)", unit: "requests/s", fields: [["goodput_rps", ""]]},
    {title: "Engine KV-cache peak (%)", unit: "%", fields: [["kv_cache_peak", "", 100]]}
  ];
  var kit = window.HearthChartKit;
  var three = function (v) { return String(+v.toPrecision(3)); };

  function value(result, field, scale) {
    var v = field in result ? result[field] : (result.engine || {})[field];
    return v === null || v === undefined ? null : v * (scale || 1);
  }

  function draw() {
    var holder = document.getElementById("charts");
    var source = document.getElementById("chart-data");
    if (!holder || !source || typeof uPlot === "undefined" || !kit) { return; }
    var theme = kit.theme(), COLORS = theme.series;
    var runs = JSON.parse(source.textContent).filter(function (r) { return r.results.length; });
    holder.innerHTML = "";
    drawnAt = holder.clientWidth;
    if (!runs.length) { return; }
    var levels = [];
    runs.forEach(function (r) { r.results.forEach(function (x) { if (levels.indexOf(x.level) < 0) { levels.push(x.level); } }); });
    levels.sort(function (a, b) { return a - b; });
    var logX = levels.length > 1 && levels[0] > 0 && levels[levels.length - 1] / levels[0] >= 10;
    var x = {time: false, distr: logX ? 3 : 1};
    if (levels.length === 1) { x.range = function (u, min, max) { return [min / 2, max * 1.5 || 1]; }; }  // not a zero-width scale
    var unit = runs[0].mode === "rate" ? "requests/s" : "concurrent users";
    // three charts a row where the page is wide enough (two, then one, where not); the figure's padding and border aside
    var gap = 16, wide = holder.clientWidth, per = wide >= 1000 ? 3 : wide >= 660 ? 2 : 1;
    var width = Math.max(300, Math.floor((wide - (per - 1) * gap) / per) - 26);
    var atLevel = function (l) { return "at " + three(l) + " " + unit; };
    CHARTS.forEach(function (chart) {
      var data = [levels], series = [{label: unit}];
      var withUnit = function (v) { return three(v) + (chart.unit === "%" ? " %" : " " + chart.unit); };
      var shown = function (u, v) { return v == null ? "—" : withUnit(v); };  // the legend's value, as the read-out's
      runs.forEach(function (run, i) {
        chart.fields.forEach(function (f, j) {
          var byLevel = {};
          run.results.forEach(function (x) { byLevel[x.level] = value(x, f[0], f[2]); });
          data.push(levels.map(function (l) { return l in byLevel ? byLevel[l] : null; }));
          var name = (runs.length > 1 ? "run " + run.id + (run.label ? " (" + run.label + ")" : "") : "") + (f[1] ? " " + f[1] : "");
          series.push({label: name.trim() || chart.title, stroke: COLORS[i % COLORS.length], width: 2,
                       dash: j ? [6, 4] : undefined, points: {size: 7}, spanGaps: true, value: shown});
        });
      });
      var figure = document.createElement("figure");
      var caption = document.createElement("figcaption");
      caption.textContent = chart.title;
      figure.appendChild(caption);
      holder.appendChild(figure);
      var axis = {stroke: theme.axis, grid: {stroke: theme.grid}, ticks: {stroke: theme.grid}};
      new uPlot({
        width: width, height: 230, series: series,
        scales: {y: {range: function (u, min, max) { return [0, max > 0 ? max * 1.1 : 1]; }},
                 x: Object.assign({}, x)},
        // a log axis hands values() null for the ticks it leaves unlabelled (uPlot's log10AxisValsFilt)
        axes: [Object.assign({label: unit, values: function (u, ticks) { return ticks.map(function (t) { return t === null ? "" : +t.toPrecision(3); }); }}, axis),
               Object.assign({values: kit.ticks(""), size: 56}, axis)],
        legend: {show: true},
        plugins: [kit.readout(atLevel, withUnit)]
      }, data, figure);
    });
  }

  document.addEventListener("DOMContentLoaded", draw);
  document.addEventListener("htmx:afterSettle", draw);
  if (kit) { kit.onThemeChange(draw); }
  var resized = null, drawnAt = null;  // drawn again when the page's width changes, not its height
  window.addEventListener("resize", function () {
    var holder = document.getElementById("charts");
    if (!holder || holder.clientWidth === drawnAt) { return; }
    clearTimeout(resized);
    resized = setTimeout(draw, 150);
  });
})();
