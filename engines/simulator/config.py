"""Command-line flags, mirroring vLLM's ``python -m vllm.entrypoints.openai.api_server`` where they exist.

Flags vLLM has and the simulator does not model (``--dtype``, ``--enforce-eager``, …) are accepted
silently; any other unknown ``--flag`` is accepted with a warning on stderr, so a launcher that adds a
newer engine flag never crashes the simulator.

Sleep mode (engines/simulator/SLEEP.md): vLLM's ``--enable-sleep-mode``, the routes only with the environment's
``VLLM_SERVER_DEV_MODE`` set to a non-zero integer (vllm/envs.py reads it as ``bool(int(value))``), and the
simulator's own ``--weights-bytes``, ``--gpu-memory-bytes``, ``--sleep-host-gb-per-s``, ``--sleep-disk-gb-per-s``
and ``--fault-wake-fails`` (engines/simulator/sleep.py has what they model and where the defaults come from).
"""

import argparse
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from engines.argspec import vllm_argv

METRICS_FLAVORS = ("vllm", "vllm-v0", "sglang")

# vLLM flags with no effect here; the value-taking ones must be declared so their value is not
# mistaken for a stray argument. Source: vllm/engine/arg_utils.py (0.32.0).
IGNORED_VALUE_FLAGS = (
    "--dtype",
    "--tensor-parallel-size",
    "--pipeline-parallel-size",
    "--swap-space",
    "--uvicorn-log-level",
    "--tokenizer",
    "--revision",
    "--download-dir",
    "--quantization",
    "--chat-template",
    "--tool-call-parser",
    "--generation-config",
    "--distributed-executor-backend",
)
# vLLM's short aliases of the flags above (vllm/engine/arg_utils.py, 0.32.0; engines/argspecs/vllm-0.32.0.json)
VLLM_SHORT_FLAGS = {"--tensor-parallel-size": ("-tp",), "--pipeline-parallel-size": ("-pp",), "--quantization": ("-q",)}
IGNORED_SWITCHES = (
    "--enforce-eager",
    "--trust-remote-code",
    "--disable-log-requests",
    "--disable-log-stats",
    "--enable-log-requests",
    "--enable-auto-tool-choice",
    "--enable-chunked-prefill",
    "--disable-frontend-multiprocessing",
    "--enable-metrics",
    "--enable-prompt-tokens-details",
)


@dataclass(frozen=True)
class SimConfig:
    """Everything the simulator needs; times in seconds or milliseconds as named, sizes in tokens."""

    model: str
    served_model_names: tuple[str, ...]
    max_model_len: int
    host: str
    port: int
    api_key: str | None
    max_num_seqs: int
    kv_cache_tokens: int
    block_size: int
    seed: int
    metrics_flavor: str
    prefill_tokens_per_s: float
    decode_ms_per_token: float
    decode_ms_per_seq: float
    natural_output_tokens: int
    embedding_dim: int
    enable_prefix_caching: bool
    gpu_memory_utilization: float
    kv_cache_dtype: str
    load_seconds: float
    fault_oom_at_start: bool
    fault_metrics_delay: float
    fault_port_taken: bool = False
    no_anthropic: bool = False
    no_responses: bool = False
    agent_mode: bool = True
    reasoning_parser: str | None = None
    reasoning_tokens: int = 8
    access_log: bool = True  # a line per request on stderr; --disable-uvicorn-access-log turns it off, as in vLLM
    max_num_batched_tokens: int = 8192
    decode_ms_per_1k_kv_tokens: float = 0.03
    dev_mode: bool = False  # VLLM_SERVER_DEV_MODE: /sleep, /wake_up, /is_sleeping, /collective_rpc, ...
    enable_sleep_mode: bool = False
    weights_bytes: int = 0  # the checkpoint's bytes on the GPUs, all ranks together
    gpu_memory_bytes: int = 0  # what the engine holds on its GPUs awake, all ranks together
    gpus: int = 1  # GPUs the engine spans: tensor × pipeline parallel size
    sleep_host_gb_per_s: float = 12.0  # GB/s (10^9 bytes) per GPU, host RAM <-> GPU
    sleep_disk_gb_per_s: float = 3.9  # GB/s, disk -> GPUs, all ranks together
    fault_wake_fails: int = 0  # wakes that fail before the rest succeed; -1: every one
    scheduling_policy: str = "fcfs"  # vLLM's --scheduling-policy: "priority" orders the queue by request priority

    @property
    def served_model_name(self) -> str:
        """The first served name: the one /metrics labels and responses carry."""
        return self.served_model_names[0]

    @property
    def num_blocks(self) -> int:
        """Whole KV blocks in the budget (vLLM's ``num_gpu_blocks``)."""
        return self.kv_cache_tokens // self.block_size


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser; defaults are the simulator's, chosen so one token takes ~10–20 ms."""
    p = argparse.ArgumentParser(prog="python -m engines.simulator", description="A vLLM-compatible simulator.")
    p.add_argument("--model", default="hearth-sim/tiny-chat", help="model path or name (only a label here)")
    p.add_argument("--served-model-name", nargs="+", default=None, help="names clients use; default --model")
    p.add_argument("--max-model-len", type=int, default=4096, help="context length, tokens")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--api-key", default=os.environ.get("VLLM_API_KEY"), help="demand this key on /v1/*")
    p.add_argument("--max-num-seqs", type=int, default=256, help="most sequences running at once")
    p.add_argument("--kv-cache-tokens", type=int, default=65536, help="KV cache budget, tokens")
    p.add_argument("--block-size", type=int, default=16, help="KV block size, tokens")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--metrics-flavor", choices=METRICS_FLAVORS, default="vllm")
    p.add_argument("--prefill-tokens-per-s", type=float, default=5000.0, help="prefill speed, tokens/s")
    p.add_argument("--decode-ms-per-token", type=float, default=12.0, help="decode step base, ms")
    p.add_argument("--decode-ms-per-seq", type=float, default=0.2, help="extra step time per running seq, ms")
    p.add_argument(
        "--max-num-batched-tokens",
        type=int,
        default=8192,
        help="tokens one engine step computes, prefill chunks and decodes together",
    )
    p.add_argument(
        "--decode-ms-per-1k-kv-tokens",
        type=float,
        default=0.03,
        help="extra step time per 1,000 KV tokens held (decode reads them), ms",
    )
    # 0.03 ms: an 8B model's 128 KiB of KV per token, 1,000 tokens read at an H100's 3.35 TB/s (its datasheet).
    p.add_argument("--natural-output-tokens", type=int, default=32, help="mean length of an unbounded answer")
    p.add_argument("--embedding-dim", type=int, default=384, help="length of /v1/embeddings vectors")
    p.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--gpu-memory-utilization", type=float, default=0.9, help="reported only, 0–1")
    p.add_argument("--kv-cache-dtype", default="auto", help="reported only")
    p.add_argument("--load-seconds", type=float, default=0.0, help="/health answers 503 this long")
    p.add_argument("--fault-oom-at-start", action="store_true", help="print a CUDA OOM and exit 1")
    p.add_argument(
        "--fault-oom-above-utilization",
        type=float,
        default=1.0,
        help="the OOM at start when --gpu-memory-utilization is above this, 0–1",
    )
    p.add_argument("--fault-metrics-delay", type=float, default=0.0, help="delay every /metrics, seconds")
    p.add_argument(
        "--fault-port-taken",
        action="store_true",
        help="as SGLang when its port is taken: uvicorn's bind error, then it hangs without listening",
    )
    p.add_argument("--no-anthropic", action="store_true", help="no /v1/messages routes (404), as SGLang serves")
    p.add_argument("--no-responses", action="store_true", help="no /v1/responses route (404), as SGLang serves")
    p.add_argument(
        "--agent-mode",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="do the file tasks coding agents give with the tools they send (agent.py)",
    )
    p.add_argument("--reasoning-parser", default=None, help="answer with reasoning first, as vLLM with a parser")
    p.add_argument("--reasoning-tokens", type=int, default=8, help="reasoning tokens per answer, with a parser")
    p.add_argument("--disable-uvicorn-access-log", action="store_true", help="no log line per request, as in vLLM")
    p.add_argument(
        "--scheduling-policy",
        choices=("fcfs", "priority"),
        default="fcfs",
        help="priority: the queue in order of the requests' priority field (lower first), as vLLM's",
    )
    _sleep_flags(p)
    for flag in IGNORED_VALUE_FLAGS:
        p.add_argument(flag, *VLLM_SHORT_FLAGS.get(flag, ()), default=None, help=argparse.SUPPRESS)
    for flag in IGNORED_SWITCHES:
        p.add_argument(flag, action="store_true", help=argparse.SUPPRESS)
    return p


def _sleep_flags(p: argparse.ArgumentParser) -> None:
    """Sleep mode's flags: vLLM's switch and the simulator's sizes, speeds and fault (engines/simulator/sleep.py)."""
    p.add_argument(
        "--enable-sleep-mode",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="free GPU memory on /sleep (the routes need VLLM_SERVER_DEV_MODE=1, as in vLLM)",
    )
    p.add_argument("--weights-bytes", type=int, default=0, help="model weights on the GPUs, bytes, all ranks")
    p.add_argument(
        "--gpu-memory-bytes", type=int, default=0, help="GPU memory held awake, bytes, all ranks; 0: the weights'"
    )
    p.add_argument("--sleep-host-gb-per-s", type=_speed, default=12.0, help="host RAM <-> GPU copy, GB/s per GPU")
    p.add_argument("--sleep-disk-gb-per-s", type=_speed, default=3.9, help="weights read from disk on reload, GB/s")
    p.add_argument(
        "--fault-wake-fails",
        type=int,
        nargs="?",
        const=-1,
        default=0,
        metavar="COUNT",
        help="the first COUNT wakes fail with a CUDA OOM (500; the engine stays asleep); no COUNT: every wake",
    )


def _speed(value: str) -> float:
    """A bandwidth flag's value, GB/s; argparse reports anything but a number above zero."""
    speed = float(value)
    if not speed > 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got {value}")
    return speed


def _count(value: str | None) -> int:
    """A parallel size as given (``-tp 4``), 1 when absent or not a positive integer."""
    return int(value) if value is not None and value.isdigit() and int(value) > 0 else 1


def dev_mode(environ: Mapping[str, str]) -> bool:
    """``VLLM_SERVER_DEV_MODE`` read as vLLM 0.32.0 reads it: ``bool(int(value))``, default "0" (vllm/envs.py).

    Raises ValueError for a value that is not an integer ("true"), as vLLM does when it builds its routes.
    """
    return bool(int(environ.get("VLLM_SERVER_DEV_MODE", "0")))


def parse_config(argv: list[str]) -> SimConfig:
    """Parse ``argv`` (without the program name) as vLLM does (engines.argspec.vllm_argv: ``--max_model_len`` is
    ``--max-model-len``; ``-tp`` is ``--tensor-parallel-size``); unknown flags are warned about on stderr and ignored.

    Exits with status 2 (argparse) on a malformed known flag; raises ValueError for a ``VLLM_SERVER_DEV_MODE``
    that is not an integer (dev_mode).
    """
    args, unknown = build_parser().parse_known_args(vllm_argv(argv))
    if unknown:
        print(f"WARNING simulator: ignoring unknown arguments: {' '.join(unknown)}", file=sys.stderr, flush=True)
    return SimConfig(
        model=args.model,
        served_model_names=tuple(args.served_model_name or [args.model]),
        max_model_len=args.max_model_len,
        host=args.host,
        port=args.port,
        api_key=args.api_key or None,
        max_num_seqs=args.max_num_seqs,
        kv_cache_tokens=args.kv_cache_tokens,
        block_size=args.block_size,
        seed=args.seed,
        metrics_flavor=args.metrics_flavor,
        prefill_tokens_per_s=args.prefill_tokens_per_s,
        decode_ms_per_token=args.decode_ms_per_token,
        decode_ms_per_seq=args.decode_ms_per_seq,
        natural_output_tokens=max(1, args.natural_output_tokens),
        embedding_dim=args.embedding_dim,
        enable_prefix_caching=args.enable_prefix_caching,
        gpu_memory_utilization=args.gpu_memory_utilization,
        kv_cache_dtype=args.kv_cache_dtype,
        load_seconds=args.load_seconds,
        fault_oom_at_start=args.fault_oom_at_start or args.gpu_memory_utilization > args.fault_oom_above_utilization,
        fault_metrics_delay=args.fault_metrics_delay,
        fault_port_taken=args.fault_port_taken,
        no_anthropic=args.no_anthropic,
        no_responses=args.no_responses,
        agent_mode=args.agent_mode,
        reasoning_parser=args.reasoning_parser or None,
        reasoning_tokens=max(0, args.reasoning_tokens),
        access_log=not args.disable_uvicorn_access_log,
        max_num_batched_tokens=max(1, args.max_num_batched_tokens),
        decode_ms_per_1k_kv_tokens=args.decode_ms_per_1k_kv_tokens,
        dev_mode=dev_mode(os.environ),
        enable_sleep_mode=args.enable_sleep_mode,
        weights_bytes=max(0, args.weights_bytes),
        gpu_memory_bytes=max(0, args.gpu_memory_bytes) or max(0, args.weights_bytes),
        gpus=_count(args.tensor_parallel_size) * _count(args.pipeline_parallel_size),
        sleep_host_gb_per_s=args.sleep_host_gb_per_s,
        sleep_disk_gb_per_s=args.sleep_disk_gb_per_s,
        fault_wake_fails=args.fault_wake_fails,
        scheduling_policy=args.scheduling_policy,
    )
