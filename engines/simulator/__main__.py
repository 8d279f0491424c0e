"""``python -m engines.simulator [vLLM-style flags]``: serve until SIGINT/SIGTERM.

Exit status: 0 after a signal, 1 for the simulated OOM, a KV budget too small for one request of
``--max-model-len`` tokens (vLLM refuses to start then too) or a ``VLLM_SERVER_DEV_MODE`` that is not an
integer, 2 for a malformed flag.
"""

import logging
import os
import sys
import time

from aiohttp import log as web_log
from aiohttp import web

from engines.simulator.config import SimConfig, parse_config
from engines.simulator.server import VERSION, create_app

# The root cause line is PyTorch's own wording (torch/csrc/cuda/CUDACachingAllocator.cpp), on an 80 GB H100.
OOM_TRACEBACK = """\
ERROR [core.py:708] EngineCore failed to start.
Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line 699, in run_engine_core
    engine_core = EngineCoreProc(*args, **kwargs)
  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line 498, in __init__
    super().__init__(vllm_config, executor_class, log_stats, executor_fail_callback)
  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_model_runner.py", line 2310, in load_model
    self.model = model_loader.load_model(vllm_config=self.vllm_config, model_config=self.model_config)
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB \
of which 1.02 GiB is free. Including non-PyTorch memory, this process has 78.16 GiB memory in use. Of the allocated \
memory 76.50 GiB is allocated by PyTorch, and 1.12 GiB is reserved by PyTorch but unallocated. If reserved but \
unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  \
See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}
"""


def startup_error(cfg: SimConfig) -> str | None:
    """vLLM's refusal when the KV budget cannot hold one full-length request, or None when it can."""
    need = -(-cfg.max_model_len // cfg.block_size)
    if cfg.num_blocks >= need and cfg.max_num_seqs >= 1:
        return None
    return (
        f"ValueError: To serve at least one request with the models's max seq len ({cfg.max_model_len}), "
        f"{need * cfg.block_size} tokens of KV cache are needed, which is larger than the available KV cache "
        f"({cfg.num_blocks * cfg.block_size} tokens). Try increasing --kv-cache-tokens or decreasing "
        "--max-model-len when initializing the engine."
    )


def main(argv: list[str]) -> int:
    """Run the simulator; returns the process exit status."""
    logging.basicConfig(
        level=logging.INFO, format="%(levelname)s %(asctime)s [%(name)s] %(message)s", stream=sys.stderr
    )
    try:
        cfg = parse_config(argv)
    except ValueError as exc:  # VLLM_SERVER_DEV_MODE not an integer: vLLM fails to build its routes then
        sys.stderr.write(f"ValueError: {exc}\n")
        return 1
    log = logging.getLogger("engines.simulator")
    log.info("vLLM API server version %s (Hearth simulator), model %s, pid %d", VERSION, cfg.model, os.getpid())
    if cfg.fault_oom_at_start:
        time.sleep(cfg.load_seconds)
        sys.stderr.write(OOM_TRACEBACK)
        sys.stderr.flush()
        return 1
    if cfg.fault_port_taken:  # SGLang 0.5.15's way (tests/data/sglang-0.5.15.post1-cpu-port-taken.log)
        time.sleep(cfg.load_seconds)
        address = (cfg.host, cfg.port)
        log.error("[Errno 98] error while attempting to bind on address %r: address already in use", address)
        log.info("Waiting for application shutdown.")
        while True:
            time.sleep(3600)
    error = startup_error(cfg)
    if error:
        sys.stderr.write(error + "\n")
        return 1
    log.info("Starting vLLM API server 0 on http://%s:%d", cfg.host, cfg.port)
    web.run_app(
        create_app(cfg),
        host=cfg.host,
        port=cfg.port,
        print=None,
        handler_cancellation=True,
        access_log_format='%a - "%r" %s',
        access_log=web_log.access_logger if cfg.access_log else None,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
