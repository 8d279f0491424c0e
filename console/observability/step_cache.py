"""Steps of recent scrape-resolution history kept in this process between refreshes (history.engine_points).

A dashboard refresh every 2 s reads the last 5 minutes of every replica again: ~60 samples of ~1.5 KB of JSON
each, differenced pair by pair. A step depends only on its sample and the one before it, and a sample never
changes once written, so each web process keeps the steps it made, keyed by the two samples' ids, and the
newest decoded sample of each replica (the next refresh's predecessor). A refresh then reads only the window's
ids and times, and the values of the samples it has no step for: one or two per replica.

Bounded: ``STEPS_KEPT`` steps (least recently used out first; a step of two histograms and ~20 gauges is about
3 KB, so ~12 MB) and ``SAMPLES_KEPT`` decoded samples. Thread-safe (one lock; Django runs sync views in threads).

May import: nothing of Hearth (it keeps what history gives it).
"""

import threading
from collections import OrderedDict
from typing import Any

STEPS_KEPT = 4096
SAMPLES_KEPT = 512

Pair = tuple[int, int]  # (previous sample id, or 0 for a baseline; sample id)

_lock = threading.Lock()
_steps: "OrderedDict[Pair, Any]" = OrderedDict()
_samples: "OrderedDict[int, Any]" = OrderedDict()


def steps(pairs: list[Pair]) -> dict[Pair, Any]:
    """The kept steps of these pairs (the others are absent), marked as just used."""
    with _lock:
        found = {}
        for pair in pairs:
            step = _steps.get(pair)
            if step is not None:
                _steps.move_to_end(pair)
                found[pair] = step
        return found


def samples(ids: set[int]) -> dict[int, Any]:
    """The kept decoded samples of these ids (the others are absent)."""
    with _lock:
        return {i: _samples[i] for i in ids if i in _samples}


def keep(made: dict[Pair, Any], newest: dict[int, Any]) -> None:
    """Keep steps just made and each replica's newest decoded sample (by sample id)."""
    with _lock:
        _steps.update(made)
        while len(_steps) > STEPS_KEPT:
            _steps.popitem(last=False)
        _samples.update(newest)
        while len(_samples) > SAMPLES_KEPT:
            _samples.popitem(last=False)


def clear() -> None:
    """Forget everything (tests that rewrite history in place)."""
    with _lock:
        _steps.clear()
        _samples.clear()
