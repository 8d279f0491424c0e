"""The table, the memory lines and the verdict of ``gateway_overhead.py``, as text or Markdown.

Per level and path, samples are pooled over the repetitions: TTFT percentiles are of the pooled samples,
"added" is the path's percentile minus direct's, throughput is content chunks over the summed wall time
of the measured rounds, and the ratio's per-repetition range follows it in brackets.
"""

import math
from dataclasses import dataclass

from loadgen import Held, Run, pct

# The issue's targets
ADDED_P50_MS, ADDED_P99_MS, TARGET_LEVEL = 2.0, 10.0, 64
MIN_RATIO = 0.95
VS_LITELLM = 3.0
DASHBOARD_ADDED_P50_MS = 1.0  # issue 17: a dashboard refreshing every second adds at most this at 64 streams
# Issue 35, against nginx in the same run: Hearth's CPU per chunk at most this many times nginx's at these levels;
# at the last, throughput at least MIN_RATIO of direct and added TTFT p50 at most this many times nginx's
VS_NGINX_CPU, VS_NGINX_LEVELS, VS_NGINX_ADDED = 1.5, (64, 256), 2.0


@dataclass
class Row:
    """One level and repetition: a Run per path ("direct" and each gateway), measured in rotating order."""

    streams: int
    rep: int
    runs: dict[str, Run]

    def ratio(self, path: str) -> float:
        direct, run = self.runs["direct"], self.runs[path]
        if not direct.wall or not run.wall or not direct.chunks:
            return math.nan
        return (run.chunks / run.wall) / (direct.chunks / direct.wall)


@dataclass
class Cell:
    """One level and path, pooled over repetitions."""

    streams: int
    path: str
    n: int
    p50: float
    p99: float
    added50: float
    added99: float
    chunks_per_s: float
    ratio: float
    ratio_low: float
    ratio_high: float
    errors: int
    cpu_us_per_chunk: float
    kernel_share: float  # 0-1, the kernel's part of the CPU
    rss_mb: float


def pool(rows: list[Row], paths: list[str]) -> list[Cell]:
    cells = []
    for n in dict.fromkeys(r.streams for r in rows):
        mine = [r for r in rows if r.streams == n]
        direct = [x for r in mine for x in r.runs["direct"].ttfts_ms()]
        d_rate = sum(r.runs["direct"].chunks for r in mine) / (sum(r.runs["direct"].wall for r in mine) or math.inf)
        for path in paths:
            runs = [r.runs[path] for r in mine if path in r.runs]
            ttfts = [x for run in runs for x in run.ttfts_ms()]
            chunks, wall = sum(run.chunks for run in runs), sum(run.wall for run in runs)
            rate = chunks / wall if wall else 0.0
            per_rep = [r.ratio(path) for r in mine if path in r.runs]
            cells.append(
                Cell(
                    n,
                    path,
                    sum(len(run.samples) for run in runs),
                    pct(ttfts, 0.5),
                    pct(ttfts, 0.99),
                    pct(ttfts, 0.5) - pct(direct, 0.5),
                    pct(ttfts, 0.99) - pct(direct, 0.99),
                    rate,
                    rate / d_rate if d_rate else math.nan,
                    min(per_rep, default=math.nan),
                    max(per_rep, default=math.nan),
                    sum(sum(run.errors.values()) for run in runs),
                    sum(run.cpu for run in runs) * 1e6 / chunks if chunks else math.nan,
                    sum(run.kernel_cpu for run in runs) / cpu if (cpu := sum(run.cpu for run in runs)) else math.nan,
                    max((run.rss_mb for run in runs), default=math.nan),
                )
            )
    return cells


HEAD = [
    "streams",
    "path",
    "n",
    "TTFT p50 ms",
    "TTFT p99 ms",
    "added p50 ms",
    "added p99 ms",
    "chunks/s",
    "vs direct (per rep)",
    "errors",
    "CPU µs/chunk",
    "kernel %",
    "RSS MB",
]


def _cells(c: Cell) -> list[str]:
    direct = c.path == "direct"

    def num(x: float, fmt: str = ".1f") -> str:
        return "—" if math.isnan(x) else format(x, fmt)

    ratio = "1.00" if direct else f"{num(c.ratio, '.2f')} ({num(c.ratio_low, '.2f')}–{num(c.ratio_high, '.2f')})"
    gateway = [
        num(c.added50),
        num(c.added99),
        num(c.cpu_us_per_chunk, ".0f"),
        num(c.kernel_share * 100, ".0f"),
        num(c.rss_mb),
    ]
    added50, added99, cpu, kernel, rss = [""] * 5 if direct else gateway
    rate, errors = num(c.chunks_per_s, ".0f"), str(c.errors)
    return [
        str(c.streams),
        c.path,
        str(c.n),
        num(c.p50),
        num(c.p99),
        added50,
        added99,
        rate,
        ratio,
        errors,
        cpu,
        kernel,
        rss,
    ]


def table(cells: list[Cell], markdown: bool) -> str:
    body = [_cells(c) for c in cells]
    if markdown:
        lines = ["| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
        return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in body])
    widths = [max(len(x) for x in col) for col in zip(HEAD, *body, strict=True)]
    fmt = "  ".join(f"{{:>{w}}}" if i not in (1,) else f"{{:<{w}}}" for i, w in enumerate(widths))
    lines = [fmt.format(*HEAD), "-" * (sum(widths) + 2 * (len(widths) - 1))]
    return "\n".join(lines + [fmt.format(*row) for row in body])


def memory(held: dict[str, Held | str]) -> list[str]:
    lines = []
    for path, h in held.items():
        if isinstance(h, str):
            lines.append(f"{path}: not measured ({h})")
            continue
        lines.append(
            f"{path}: {h.per_1000_mb:.0f} MB per 1,000 open streams (RSS {h.idle_mb:.0f} MB idle, {h.open_mb:.0f} MB "
            f"with {h.opened}/{h.asked} open after {h.open_s:.1f} s, {h.after_mb:.0f} MB 3 s after they closed)"
        )
        if h.ended is not None:
            errors = ", ".join(f"{n} × {e}" for e, n in h.errors.most_common()) or "no errors"
            lines.append(f"{path}: {h.ended}/{h.asked} held streams ended whole after {h.held_s:.0f} s ({errors})")
    return lines


def verdict(cells: list[Cell], peers: list[str]) -> str:
    """One line against issue 17's targets; a level that was not run is left out. Of ``peers``, only LiteLLM's
    added TTFT is held to VS_LITELLM (nginx has its own line, ``nginx_verdict``)."""
    get = {(c.streams, c.path): c for c in cells}
    parts, misses = [], []
    hearth = get.get((TARGET_LEVEL, "hearth"))
    if hearth:
        p50_ok, p99_ok = hearth.added50 <= ADDED_P50_MS, hearth.added99 <= ADDED_P99_MS
        parts.append(
            f"{TARGET_LEVEL} streams added TTFT p50 {hearth.added50:.1f} ms (≤ {ADDED_P50_MS:g} "
            f"{'ok' if p50_ok else 'MISS'}), p99 {hearth.added99:.1f} ms (≤ {ADDED_P99_MS:g} "
            f"{'ok' if p99_ok else 'MISS'})"
        )
        misses += [] if p50_ok else ["added p50"]
        misses += [] if p99_ok else ["added p99"]
    ratios = [c for c in cells if c.path == "hearth"]
    if ratios:
        low = [c for c in ratios if not c.ratio >= MIN_RATIO]
        judged = "ok" if not low else "MISS at " + ",".join(str(c.streams) for c in low)
        listed = ", ".join(f"{c.streams}: {c.ratio:.2f}" for c in ratios)
        parts.append(f"throughput vs direct {listed} (≥ {MIN_RATIO:.2f} {judged})")
        misses += [f"throughput at {c.streams}" for c in low]
    for peer in [p for p in peers if p == "litellm"]:
        pairs = [(h, get[(h.streams, peer)]) for h in ratios if (h.streams, peer) in get]
        if not pairs:
            continue
        texts, bad = [], []
        for h, p in pairs:
            ok = p.added50 >= VS_LITELLM * max(h.added50, 0.0) and p.added50 > 0
            factor = f"{p.added50 / h.added50:.0f}×" if h.added50 > 0 else "Hearth ≤ 0"
            texts.append(f"{h.streams}: {p.added50:.1f} vs {h.added50:.1f} ms ({factor})")
            bad += [] if ok else [str(h.streams)]
        parts.append(
            f"added p50 {peer} vs hearth "
            + "; ".join(texts)
            + f" (≥ {VS_LITELLM:g}× {'ok' if not bad else 'MISS at ' + ','.join(bad)})"
        )
        misses += [f"vs {peer} at {s}" for s in bad]
    if "litellm" not in peers:
        parts.append("vs LiteLLM: NOT CHECKED (no LiteLLM in this run)")
    errors = sum(c.errors for c in cells if c.path == "hearth")
    parts.append(f"hearth errors {errors}")
    misses += [f"{errors} hearth errors"] if errors else []
    met = "MEETS the issue's targets" if "litellm" in peers else "MEETS the targets it could check"
    head = met if not misses else "MISSES " + ", ".join(misses)
    return f"verdict: {head}: " + "; ".join(parts)


def nginx_verdict(cells: list[Cell], peer: str = "nginx") -> str:
    """Issue 35's verdict, relative to nginx in the same run: a head line (MEETS or MISSES, and which), then
    a line per level run: Hearth's CPU µs per relayed chunk over nginx's as a ratio (kernel shares in
    brackets; judged ≤ VS_NGINX_CPU at VS_NGINX_LEVELS), both paths' throughput vs direct (Hearth's judged
    ≥ MIN_RATIO at the last of those levels) and both added TTFT p50s in ms (Hearth's judged ≤
    VS_NGINX_ADDED × nginx's there). One line saying so when ``peer`` was not run."""
    get = {(c.streams, c.path): c for c in cells}
    texts, misses, judged = [], [], set()
    for h in [c for c in cells if c.path == "hearth"]:
        n = get.get((h.streams, peer))
        if n is None:
            continue
        cpu = h.cpu_us_per_chunk / n.cpu_us_per_chunk if n.cpu_us_per_chunk > 0 else math.nan
        marks = ["", "", ""]
        if h.streams in VS_NGINX_LEVELS:
            judged.add(h.streams)
            ok = cpu <= VS_NGINX_CPU
            marks[0] = f" (≤ {VS_NGINX_CPU:g}× {'ok' if ok else 'MISS'})"
            misses += [] if ok else [f"CPU at {h.streams}"]
        if h.streams == VS_NGINX_LEVELS[-1]:
            ok_rate = h.ratio >= MIN_RATIO
            ok_ttft = h.added50 <= VS_NGINX_ADDED * max(n.added50, 0.0)
            marks[1] = f" (≥ {MIN_RATIO:.2f} {'ok' if ok_rate else 'MISS'})"
            marks[2] = f" (≤ {VS_NGINX_ADDED:g}× {'ok' if ok_ttft else 'MISS'})"
            misses += [] if ok_rate else [f"throughput at {h.streams}"]
            misses += [] if ok_ttft else [f"added TTFT at {h.streams}"]
        texts.append(
            f"  {h.streams} streams: CPU {h.cpu_us_per_chunk:.0f} / {n.cpu_us_per_chunk:.0f} µs per chunk = "
            f"{cpu:.2f}×{marks[0]} (kernel {h.kernel_share * 100:.0f} % / {n.kernel_share * 100:.0f} %); "
            f"vs direct {h.ratio:.2f}{marks[1]} / {n.ratio:.2f}; "
            f"added TTFT p50 {h.added50:.1f} / {n.added50:.1f} ms{marks[2]}"
        )
    if not texts:
        return f"vs {peer}: NOT CHECKED (no {peer} in this run)"
    if misses:
        head = "MISSES " + ", ".join(misses)
    elif judged == set(VS_NGINX_LEVELS):
        head = "MEETS issue 35's targets"
    else:
        head = "MEETS the targets it could check" if judged else "NOT JUDGED"
        head += f" (judged at {', '.join(map(str, VS_NGINX_LEVELS))} streams)"
    return "\n".join([f"verdict vs {peer} (hearth / {peer}): {head}", *texts])


def splice_floor(cells: list[Cell], peer: str = "nginx") -> str:
    """What the uvloop splice (``splice_peer.py``, the least a relay on Python's event loop does per chunk) costs
    beside ``peer`` and beside Hearth: a line per level with CPU µs per chunk of all three and the two ratios,
    splice / ``peer`` (how near ``peer`` Python can get at all) and hearth / splice (what Hearth adds to that)."""
    lines = [
        f"  {s.streams} streams: CPU µs per chunk hearth {h.cpu_us_per_chunk:.0f}, splice "
        f"{s.cpu_us_per_chunk:.0f} (kernel {s.kernel_share * 100:.0f} %), {peer} {n.cpu_us_per_chunk:.0f}; "
        f"splice / {peer} {s.cpu_us_per_chunk / n.cpu_us_per_chunk:.2f}×, "
        f"hearth / splice {h.cpu_us_per_chunk / s.cpu_us_per_chunk:.2f}×"
        for s, h, n in _measured_beside(cells, "splice", "hearth", peer)
    ]
    lines += [
        f"  {w.streams} streams: the stream read as Hearth must (splice-watch) {w.cpu_us_per_chunk:.0f} µs per "
        f"chunk = splice + {w.cpu_us_per_chunk - s.cpu_us_per_chunk:.0f}; splice-watch / {peer} "
        f"{w.cpu_us_per_chunk / n.cpu_us_per_chunk:.2f}×"
        for w, s, n in _measured_beside(cells, "splice-watch", "splice", peer)
    ]
    if not lines:
        return f"python floor: NOT CHECKED (needs splice and {peer} in the run)"
    return "\n".join(["python floor (a uvloop TCP splice, splice_peer.py):", *lines])


def _measured_beside(cells: list[Cell], path: str, other: str, peer: str) -> list[tuple[Cell, Cell, Cell]]:
    """``path``'s cell at each level with ``other``'s and ``peer``'s there, where all three ran and ``path``'s and
    ``peer``'s CPU per chunk were measured."""
    get = {(c.streams, c.path): c for c in cells}
    found = []
    for cell in [c for c in cells if c.path == path]:
        beside, against = get.get((cell.streams, other)), get.get((cell.streams, peer))
        if beside is not None and against is not None and cell.cpu_us_per_chunk > 0 and against.cpu_us_per_chunk > 0:
            found.append((cell, beside, against))
    return found


def dashboard_verdict(cells: list[Cell], path: str, viewers: int = 1) -> str:
    """What ``viewers`` console users refreshing the dashboard (``path``) added to Hearth's TTFT p50 at each
    level: the two paths' p50 difference, against issue 17's 1 ms at 64 streams (asked of one viewer)."""
    get = {(c.streams, c.path): c for c in cells}
    texts = []
    for c in cells:
        hearth = get.get((c.streams, "hearth"))
        if c.path != path or hearth is None:
            continue
        added = c.p50 - hearth.p50
        judged = f" (≤ {DASHBOARD_ADDED_P50_MS:g} {'ok' if added <= DASHBOARD_ADDED_P50_MS else 'MISS'})"
        texts.append(
            f"{c.streams}: p50 {added:+.1f} ms, p99 {c.p99 - hearth.p99:+.1f} ms"
            + (judged if c.streams == TARGET_LEVEL else "")
        )
    who = "dashboard refreshing every second" + (f" in {viewers} sessions" if viewers != 1 else "")
    return f"{who}, TTFT added to hearth's: " + ("; ".join(texts) or "not run")
