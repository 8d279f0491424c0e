// A deployment's charts: uPlot (static/vendor/uplot-1.6.32) over the JSON of observability:series.
// Loads the chosen range, then every 5 s asks only for what is newer (?since=) and appends it, so the charts
// update live without reloading the page. Gaps (null) are drawn as gaps, never bridged. The range buttons apply to
// every chart of the page and the choice is remembered in this browser (localStorage "hearth.range"). Hovering a
// chart shows the time and each series' value with its unit by the cursor, on every chart at once (one cursor,
// synced); colours are the design system's (static/hearth-chart-kit.js), drawn again when the theme changes.
(function () {
  "use strict";
  const root = document.getElementById("charts");
  if (!root || typeof uPlot === "undefined" || !window.HearthChartKit) return;
  const kit = window.HearthChartKit;
  const url = root.dataset.seriesUrl;
  const status = root.querySelector("[data-field=chart_status]");
  // colours by role: a series names one of these, read from the theme each time the charts are drawn
  const COLORS = { a: 0, b: 1, c: 2, d: 3, slo: "slo" };
  // The legend's value under the cursor; a whole count (3 requests running) without decimals.
  const secs = (v) => (v == null ? "—" : v < 1 ? (v * 1000).toFixed(0) + " ms" : v.toFixed(2) + " s");
  const num = (v) => (v == null ? "—" : Number.isInteger(v) || v >= 100 ? v.toFixed(0) : v.toFixed(1));

  // The y axis's tick labels, with the decimals of the step between ticks (static/hearth-chart-kit.js).
  const { decimals, fixed } = kit;
  const plainTicks = (suffix) => (ticks, incr) => ticks.map((v) => (v == null ? "" : fixed(v, decimals(incr)) + suffix));
  // seconds: in ms when every tick is under 1 s, so one axis never mixes "500 ms" and "1.00 s"
  function secTicks(ticks, incr) {
    const ms = Math.max(...ticks.filter((v) => v != null)) < 1, scale = ms ? 1000 : 1, d = decimals(incr * scale);
    return ticks.map((v) => (v == null ? "" : fixed(v * scale, d) + (ms ? " ms" : " s")));
  }

  const CHARTS = {
    kv: { series: [["kv_cache_usage", "KV cache %", COLORS.a]], unit: "%", fmt: (v) => (v == null ? "—" : v.toFixed(1) + " %"), ticks: plainTicks(" %"), range: [0, 100] },
    queue: { series: [["requests_running", "running", COLORS.a], ["requests_waiting", "waiting", COLORS.b]], unit: "requests", fmt: num, ticks: plainTicks(""), limit: "max_num_seqs" },
    tps: { series: [["generation_tps", "generation", COLORS.a], ["prompt_tps", "prompt", COLORS.c]], unit: "tokens/s", fmt: num, ticks: plainTicks("") },
    ttft: { series: [["user_ttft_p50", "users p50", COLORS.a], ["user_ttft_p99", "users p99", COLORS.b], ["ttft_p50", "engine p50", COLORS.c], ["ttft_p99", "engine p99", COLORS.d]], unit: "latency", fmt: secs, ticks: secTicks, slo: "ttft" },
    itl: { series: [["user_itl_p50", "users p50", COLORS.a], ["user_itl_p99", "users p99", COLORS.b], ["itl_p50", "engine p50", COLORS.c], ["itl_p99", "engine p99", COLORS.d]], unit: "latency", fmt: secs, ticks: secTicks, slo: "itl" },
    requests: { series: [["requests_per_s", "requests/s", COLORS.c], ["errors_per_s", "errors/s", COLORS.slo]], unit: "per s", fmt: (v) => (v == null ? "—" : v.toFixed(2)), ticks: plainTicks("") },
  };
  // Times as the "times in UTC" label says: 24-hour UTC, never the browser's zone or a 12-hour clock.
  const iso = (ts) => new Date(ts * 1000).toISOString();  // "2026-12-04T06:05:09.000Z"
  const clock = (ts) => iso(ts).slice(11, 19) + " UTC";
  // the x axis's labels: minutes (seconds under a minute's step); the date under the first tick and each midnight
  function timeTicks(ticks, incr) {
    return ticks.map((v, i) => {
      if (v == null) return "";
      const s = iso(v), day = s.slice(5, 10), time = s.slice(11, incr < 60 ? 19 : 16);
      if (incr >= 86400) return day;
      return i === 0 || time.startsWith("00:00") ? `${time}\n${day}` : time;
    });
  }
  // a point alone (or a point between gaps) is a dot: a line needs two points
  const few = (u, si) => u.data[si].filter((v, i) => v != null && u.data[si][i - 1] == null && u.data[si][i + 1] == null).length > 0;
  const SPAN = { "15m": 900, "1h": 3600, "24h": 86400, "30d": 2592000 };  // seconds: the x axis always spans the range
  const RANGE_KEY = "hearth.range";
  const stored = (() => { try { return localStorage.getItem(RANGE_KEY); } catch { return null; } })();
  let range = stored in SPAN ? stored : "1h", data = null, plots = {}, timer = null, lastT = null;

  function columns(def) {
    const t = data.t;
    const cols = [t, ...def.series.map(([k]) => data.series[k])];
    const extra = def.slo ? data.slo[def.slo] : def.limit ? data[def.limit] : null;
    if (extra != null) cols.push(t.map(() => extra));
    return cols;
  }

  const stamp = (v) => (v == null ? "—" : iso(v).slice(0, 19).replace("T", " ") + " UTC");
  function make(el, def) {
    const theme = kit.theme(), color = (role) => (role === "slo" ? theme.slo : theme.series[role]);
    const series = [{ value: (u, v) => stamp(v) }].concat(def.series.map(([, label, role]) => ({ label, stroke: color(role), width: 2, spanGaps: false, points: { show: few }, value: (u, v) => def.fmt(v) })));
    const extra = def.slo ? data.slo[def.slo] : def.limit ? data[def.limit] : null;
    if (extra != null) series.push({ label: def.slo ? "SLO" : "max_num_seqs", stroke: theme.slo, dash: [6, 4], width: 1.5, value: (u, v) => def.fmt(v) });
    // the read-out's value with its unit (latency and % carry theirs; requests/s and errors/s say it in the label)
    const readoutY = (v) => (def.unit === "requests" || def.unit === "tokens/s" ? `${def.fmt(v)} ${def.unit}` : def.fmt(v));
    const opts = {
      width: Math.max(el.clientWidth, 300), height: 200, series,
      // the chosen range ending now (or at the last point), in UTC as the console's tables are: never uPlot's own
      // padding of a single point's x, which is years wide
      tzDate: (ts) => uPlot.tzDate(new Date(ts * 1e3), "Etc/UTC"),
      scales: { x: { time: true, range: (u) => { const t = u.data[0], end = Math.max(t.length ? t[t.length - 1] : 0, Date.now() / 1000); return [end - SPAN[range], end]; } }, y: def.range ? { range: def.range } : { range: (u, lo, hi) => [0, hi > 0 ? hi * 1.1 : 1] } },
      axes: [{ stroke: theme.axis, grid: { stroke: theme.grid }, ticks: { stroke: theme.grid }, size: 44, values: (u, ticks, axis, space, incr) => timeTicks(ticks, incr) },
             { stroke: theme.axis, grid: { stroke: theme.grid }, ticks: { stroke: theme.grid }, size: 64, values: (u, ticks, axis, space, incr) => def.ticks(ticks, incr), label: def.unit, labelSize: 18 }],
      legend: { live: true },
      cursor: { sync: { key: "hearth-charts" } },  // one cursor over every chart: the same moment in each
      plugins: [kit.readout(stamp, readoutY)],
    };
    return new uPlot(opts, columns(def), el);
  }

  function draw() {
    for (const el of root.querySelectorAll("[data-chart]")) {
      const def = CHARTS[el.dataset.chart];
      if (plots[el.dataset.chart]) plots[el.dataset.chart].destroy();
      el.innerHTML = "";
      plots[el.dataset.chart] = make(el, def);
      el.dataset.points = String(data.t.length);
    }
  }

  function say(text) { if (status) status.textContent = text; }

  async function load() {
    const resp = await fetch(`${url}?range=${range}`, { credentials: "same-origin" });
    if (!resp.ok) { say(`could not load the history (HTTP ${resp.status})`); return; }
    data = await resp.json();
    lastT = data.t.length ? data.t[data.t.length - 1] : null;
    draw();
    say(data.t.length ? `${data.t.length} points, updated ${clock(Date.now() / 1000)}` : "no data in this range yet");
  }

  async function update() {
    if (!data || range === "30d") return load();
    const since = lastT == null ? "" : `&since=${lastT - data.step}`;
    const resp = await fetch(`${url}?range=${range}${since}`, { credentials: "same-origin" });
    if (!resp.ok) { say(`update failed (HTTP ${resp.status}); showing what was loaded`); return; }
    const fresh = await resp.json();
    if (!fresh.t.length) { say(lastT == null ? "no data in this range yet" : `${data.t.length} points, nothing new since ${clock(lastT)}`); return; }
    const keep = data.t.findIndex((t) => t >= fresh.t[0]);
    const cut = keep === -1 ? data.t.length : keep;
    const horizon = fresh.t[fresh.t.length - 1] - { "15m": 900, "1h": 3600, "24h": 86400 }[range];
    data.t = data.t.slice(0, cut).concat(fresh.t);
    for (const k of Object.keys(data.series)) data.series[k] = data.series[k].slice(0, cut).concat(fresh.series[k]);
    const first = data.t.findIndex((t) => t >= horizon);
    if (first > 0) { data.t = data.t.slice(first); for (const k of Object.keys(data.series)) data.series[k] = data.series[k].slice(first); }
    const changed = JSON.stringify(fresh.slo) !== JSON.stringify(data.slo) || fresh.max_num_seqs !== data.max_num_seqs;
    data.slo = fresh.slo; data.max_num_seqs = fresh.max_num_seqs;
    lastT = data.t[data.t.length - 1];
    if (changed) { draw(); return; }
    for (const [name, plot] of Object.entries(plots)) { plot.setData(columns(CHARTS[name])); root.querySelector(`[data-chart=${name}]`).dataset.points = String(data.t.length); }
    say(`${data.t.length} points, updated ${clock(Date.now() / 1000)}`);
  }

  const press = () => { for (const b of root.querySelectorAll("[data-range]")) b.setAttribute("aria-pressed", String(b.dataset.range === range)); };
  for (const button of root.querySelectorAll("[data-range]")) {
    button.addEventListener("click", () => {
      range = button.dataset.range;
      try { localStorage.setItem(RANGE_KEY, range); } catch { /* storage refused: the choice lasts this page */ }
      press();
      load();
    });
  }
  press();
  window.addEventListener("resize", () => { if (data) draw(); });
  kit.onThemeChange(() => { if (data) draw(); });
  load().then(() => { timer = setInterval(update, range === "30d" ? 60000 : 5000); });
})();
