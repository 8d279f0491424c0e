"""The OpenAI Files and Batches API's storage and runner: uploaded JSONL files and the files a batch writes
(models.BatchFile, content in models.BatchFileChunk), batches and their lines (models.Batch, models.BatchLine), the
checks of an uploaded file (files.py), the batch's life (batches.py) and the Celery runner (runner.py, tasks.py).
The /v1 endpoints are gateway.batch_api's; the console's Batches pages are views.py (progress.py: rate, ETA, cost).

May import: console.observability, console.deployments (the runner reads a model's deployment state), console.access,
console.audit, engines, appliance and the shared modules.
"""
