// What every chart of the console shares (static/hearth-charts.js, static/capacity/charts.js), as
// window.HearthChartKit; loaded by templates/base.html before either:
// - theme(): the chart colours of the design system's custom properties (static/hearth.css) as they are now, light
//   or dark: { series: [5 colours], slo, grid, axis, text }.
// - onThemeChange(fn): fn() when the browser turns dark or light, so a chart is drawn again in the new colours.
// - ticks(suffix): a uPlot axis values() whose labels have as many decimals as the step between ticks has
//   (0.25 → 0.75, 0.5 → 1.5, 2 → 4), so 0.0075 never reads "0.008" and a whole step (counts) has none; uPlot hands
//   null for a tick it leaves unlabelled (a log axis), which reads "". decimals(step) and fixed(v, d) are its parts.
// - readout(formatX, formatY): a uPlot plugin: a box by the cursor with the x value under it (formatX(x)) and each
//   visible series' colour, label and value (formatY(value, seriesIndex), units included); "—" where a series has
//   no value there. Built with DOM nodes and textContent, no HTML strings, and placed with the CSSOM (the
//   Content-Security-Policy allows it; it refuses inline style attributes).
window.HearthChartKit = (() => {
  "use strict";
  const css = (name) => getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  const theme = () => ({
    series: [1, 2, 3, 4, 5].map((i) => css(`--chart-${i}`)),
    slo: css("--chart-slo"),
    grid: css("--chart-grid"),
    axis: css("--chart-axis"),
    text: css("--text"),
  });
  function decimals(incr) {
    let d = 0;
    while (d < 8 && Math.abs(incr * 10 ** d - Math.round(incr * 10 ** d)) > 1e-6) d++;
    return d;
  }
  const fixed = (v, d) => v.toLocaleString("en-US", { minimumFractionDigits: d, maximumFractionDigits: d });
  const ticks = (suffix) => (u, values, axis, space, incr) => values.map((v) => (v == null ? "" : fixed(v, decimals(incr)) + suffix));
  const dark = window.matchMedia("(prefers-color-scheme: dark)");
  const onThemeChange = (fn) => dark.addEventListener("change", fn);

  function line(box, color, label, value) {
    const row = document.createElement("div");
    if (color) {
      const swatch = document.createElement("i");
      swatch.style.background = color;
      row.appendChild(swatch);
    }
    const name = document.createElement(color ? "span" : "b");
    name.textContent = value === undefined ? label : `${label}: `;
    row.appendChild(name);
    if (value !== undefined) {
      const v = document.createElement("b");
      v.textContent = value;
      row.appendChild(v);
    }
    box.appendChild(row);
  }

  function readout(formatX, formatY) {
    let box = null;
    return {
      hooks: {
        init: (u) => {
          box = document.createElement("div");
          box.className = "chart-readout";
          box.hidden = true;
          u.over.appendChild(box);
        },
        setCursor: (u) => {
          const i = u.cursor.idx;
          if (i == null || u.cursor.left < 0) {
            box.hidden = true;
            return;
          }
          box.replaceChildren();
          line(box, null, formatX(u.data[0][i]));
          u.series.forEach((s, si) => {
            if (si === 0 || !s.show) return;
            const v = u.data[si][i];
            const stroke = typeof s.stroke === "function" ? s.stroke(u, si) : s.stroke;
            line(box, stroke, s.label, v == null ? "—" : formatY(v, si));
          });
          box.hidden = false;
          const gap = 12, w = box.offsetWidth, h = box.offsetHeight;
          const left = u.cursor.left + gap + w > u.over.clientWidth ? u.cursor.left - gap - w : u.cursor.left + gap;
          const top = Math.min(Math.max(u.cursor.top - h / 2, 0), Math.max(u.over.clientHeight - h, 0));
          box.style.left = `${Math.max(left, 0)}px`;
          box.style.top = `${top}px`;
        },
      },
    };
  }

  return { theme, onThemeChange, readout, ticks, decimals, fixed };
})();
