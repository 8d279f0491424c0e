"""The simulated KV cache: a pool of fixed-size blocks shared between sequences through the prefix cache.

Modelled on vLLM V1's KVCacheManager and BlockPool (vllm/v1/core/kv_cache_manager.py, block_pool.py,
0.32.0): a sequence holds one block per ``block_size`` tokens it has computed or is computing; a whole
prompt block is known by a hash chained on the blocks before it, and while one sequence holds it
another with the same prefix shares it (reference counts) instead of computing it again. A block no
sequence holds any more stays cached, evictable, until a new block is needed and no uncached block is
free: then the least recently freed one is evicted. Cached-but-free blocks count as free, as
vLLM's ``kv_cache_usage_perc`` counts them. Generated tokens are not hashed (their blocks are never
shared), a simplification: a prompt that repeats an earlier answer is not served from the cache here.

All counts are blocks unless named tokens.
"""

from collections import OrderedDict


def block_hashes(ids: list[int], block_size: int) -> list[int]:
    """One hash per whole block of ``ids``, each chained on the one before (vLLM's block hashing)."""
    out: list[int] = []
    previous = 0
    for start in range(0, len(ids) - block_size + 1, block_size):
        previous = hash((previous, *ids[start : start + block_size]))
        out.append(previous)
    return out


class BlockPool:
    """``total`` blocks; hashed blocks with their holders' counts, unique (unshared) blocks, an LRU of
    cached free ones. ``caching`` False: no block is ever shared or kept after it is freed."""

    def __init__(self, total: int, caching: bool) -> None:
        self.total = total
        self.caching = caching
        self.refs: dict[int, int] = {}  # hash → sequences holding it (0: cached and free)
        self.evictable: OrderedDict[int, None] = OrderedDict()  # hashes with no holder, least recently freed first
        self.unique = 0  # blocks held that no other sequence can share

    @property
    def used(self) -> int:
        """Blocks some sequence holds."""
        return len(self.refs) - len(self.evictable) + self.unique

    @property
    def free(self) -> int:
        """Blocks a new allocation may take (cached free ones included: they are evicted on demand)."""
        return self.total - self.used

    def usage(self) -> float:
        """The share of blocks held, 0–1 (vLLM's ``kv_cache_usage_perc``)."""
        return self.used / self.total if self.total else 0.0

    def cached(self, h: int) -> bool:
        """Whether the block with hash ``h`` is in the cache (held or free)."""
        return self.caching and h in self.refs

    def cost(self, h: int | None) -> int:
        """Free blocks taking block ``h`` would use up: 0 when another sequence holds it already."""
        if h is not None and self.cached(h) and h not in self.evictable:
            return 0
        return 1

    def take(self, h: int | None) -> None:
        """Hold one block: the cached or held one with hash ``h`` when there is one, else a new one
        (evicting the least recently freed cached block when no uncached block is free).

        Raises MemoryError when no block is free; callers check ``free`` or ``cost`` first.
        """
        if h is not None and self.caching:
            if h in self.refs:
                self.evictable.pop(h, None)
                self.refs[h] += 1
                return
            self._make_room()
            self.refs[h] = 1
            return
        self._make_room()
        self.unique += 1

    def _make_room(self) -> None:
        if self.used >= self.total:
            raise MemoryError("no free KV block")
        if len(self.refs) + self.unique >= self.total:  # every free block is a cached one: evict the oldest
            oldest, _ = self.evictable.popitem(last=False)
            del self.refs[oldest]

    def forget_cached(self) -> bool:
        """Empty the cache of free blocks (a reset of vLLM's prefix cache); False, and nothing done, while any
        block is held, as vLLM's ``reset_prefix_cache`` refuses then."""
        if self.used:
            return False
        self.refs.clear()
        self.evictable.clear()
        return True

    def release(self, blocks: list[int | None]) -> None:
        """Let go of ``blocks`` (a sequence's, in order); the last ones are freed first, so a prompt's
        tail is evicted before its shared head, as vLLM frees them."""
        for h in reversed(blocks):
            if h is None or not self.caching:
                self.unique -= 1
                continue
            self.refs[h] -= 1
            if self.refs[h] == 0:
                self.evictable[h] = None
