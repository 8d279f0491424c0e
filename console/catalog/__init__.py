"""The catalog: model sources (a local checkpoint folder, or a Hugging Face repo pinned to a commit), the
facts read from their checkpoints (config.json, real tensor bytes), and the pages and API to add them.

May import: engines, console.audit (recording what an admin added or removed), console's shared modules
(errors, names). Nothing of the other console domains.
"""
