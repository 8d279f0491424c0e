"""The weights cache: Hugging Face checkpoints downloaded by Hearth before their engine starts (fetching), their
progress for the console (progress), and the cache page that lists and frees them (cache, views)."""
