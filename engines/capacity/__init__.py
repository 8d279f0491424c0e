"""The capacity check's pure parts: load profiles and the prompts they send (``profiles``), and what a run's
samples say: percentiles, tokens/s, goodput at an SLO, the engine's own numbers over the run, and the run
held against the plan (``results``). No I/O here: console.capacity sends the requests and keeps the runs.
"""
