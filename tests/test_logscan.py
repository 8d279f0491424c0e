"""Root causes found in real engine logs."""

from engines.logscan import scan

VLLM_KV_TOO_BIG = """(EngineCore pid=1) ERROR 11-30 01:50:02 [core.py:700] EngineCore failed to start.
(EngineCore pid=1) ERROR 11-30 01:50:02 [core.py:700] Traceback (most recent call last):
(EngineCore pid=1) ERROR 11-30 01:50:02 [core.py:700] ValueError: Available memory on node 0 (8.54/12.46 GiB) on \
socket 0 is less than requested memory for kv (100000.0 GiB).
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}
"""
ARGPARSE = "usage: api_server.py [-h] ...\napi_server.py: error: unrecognized arguments: --no-such-flag\n"
CUDA_OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity..."


def test_it_finds_the_cause_behind_vllms_generic_last_line() -> None:
    found = scan(VLLM_KV_TOO_BIG)
    assert found.cause is not None and found.cause.startswith("ValueError: Available memory on node 0")
    assert not found.oom


def test_it_finds_an_argparse_error() -> None:
    assert scan(ARGPARSE).cause == "error: unrecognized arguments: --no-such-flag"


def test_it_recognises_cuda_out_of_memory() -> None:
    found = scan(CUDA_OOM)
    assert found.oom and found.cause is not None and found.cause.startswith("torch.OutOfMemoryError")


def test_a_clean_log_has_no_cause() -> None:
    assert scan("INFO: Application startup complete.\n") == scan("")
