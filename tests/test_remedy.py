"""The out-of-memory remedy: each lever with its numbers, and none left when every lever is spent."""

from engines.oom_remedy import oom_remedy
from engines.stored_plan import StoredPlan

STORED = {
    "gpu_memory_utilization": 0.92,
    "max_num_seqs": 256,
    "tensor_parallel_size": 2,
    "kv_capacity_tokens": 500_000,
    "kv_bytes_per_token": 131_072,
    "split": {"total": 85_520_809_984},  # an H100 80GB per GPU, bytes
}
PLAN = StoredPlan.from_json(STORED, "vllm")


def test_a_gpu_engine_gets_all_three_levers_with_their_numbers() -> None:
    remedy = oom_remedy("vllm", PLAN, {}, 1.0)
    assert remedy is not None
    changes = {c.name: (c.before, c.after) for c in remedy.changes}
    assert changes == {
        "gpu_memory_utilization": ("0.92", "0.88"),
        "PYTORCH_CUDA_ALLOC_CONF": ("unset", "expandable_segments:True"),
        "max_num_seqs": ("256", "128"),
    }
    lost = int(0.04 * 85_520_809_984 * 2 // 131_072)  # the step's bytes on both GPUs over KV bytes per token
    assert remedy.plan.kv_capacity_tokens == (500_000 - lost) // 16 * 16  # whole KV blocks
    assert f"{lost:,} fewer tokens" in remedy.changes[0].why
    assert remedy.engine_env == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    assert remedy.plan.gpu_memory_utilization == 0.88 and remedy.plan.max_num_seqs == 128
    assert PLAN.gpu_memory_utilization == 0.92  # the stored plan is not changed in place


def test_an_allocator_setting_already_there_is_kept_beside_expandable_segments() -> None:
    remedy = oom_remedy("sglang", PLAN, {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:512"}, 1.0)
    assert remedy is not None
    assert remedy.engine_env["PYTORCH_CUDA_ALLOC_CONF"] == "max_split_size_mb:512,expandable_segments:True"


def test_no_remedy_once_every_lever_is_at_its_floor() -> None:
    spent = StoredPlan.from_json(STORED | {"gpu_memory_utilization": 0.52, "max_num_seqs": 8}, "vllm")
    assert oom_remedy("vllm", spent, {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, 1.0) is None


def test_the_cpu_engine_lowers_its_kv_space() -> None:
    stored = {"max_model_len": 2048, "kv_bytes_per_token": 23_040, "block_size": 128, "kv_budget_bytes": 4 * 2**30}
    remedy = oom_remedy("vllm-cpu", StoredPlan.from_json(stored, "vllm-cpu"), {}, 4.0)
    assert remedy is not None and remedy.kv_space_gib == 3.0
    change = ("KV cache space (--kv-cache-memory-bytes)", "4 GiB", "3 GiB")
    assert [(c.name, c.before, c.after) for c in remedy.changes] == [change]
    assert remedy.plan.cpu is not None and remedy.plan.cpu.kv_budget_bytes == 3 * 2**30  # the launch passes it
    assert remedy.plan.kv_capacity_tokens == 3 * 2**30 // 23_040 // 128 * 128
    assert oom_remedy("vllm-cpu", StoredPlan.from_json({}, "vllm-cpu"), {}, 0.3) is None  # 0.225 GiB: below the floor
