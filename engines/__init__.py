"""Pure engine knowledge: model configs, sizing math, launch specs, metric mappings.

Nothing here imports Django or touches Docker, the database or the network: facts in, values out.
"""
