"""The Responses API stream's events, as vLLM 0.32.0 writes them (vllm/entrypoints/openai/responses/
streaming_events.py): an item's opening (``response.output_item.added``, ``response.content_part.added``), its deltas
and its closing (``.done`` events, ``response.content_part.done``, ``response.output_item.done``), each with its
``sequence_number``."""

from typing import Any

from aiohttp import web

from engines.simulator.common import send


class Events:
    """Writes the stream's events with their sequence numbers."""

    def __init__(self, resp: web.StreamResponse) -> None:
        self.resp, self.sequence = resp, 0

    async def __call__(self, kind: str, **fields: Any) -> None:
        await send(self.resp, {"type": kind, "sequence_number": self.sequence, **fields}, kind)
        self.sequence += 1


def _pending(item: dict[str, Any]) -> dict[str, Any]:
    """An item as output_item.added shows it: in progress, nothing in it yet."""
    if item["type"] == "reasoning":
        return {"type": "reasoning", "id": item["id"], "summary": [], "status": "in_progress"}
    if item["type"] == "message":
        return {**item, "content": [], "status": "in_progress"}
    if item["type"] == "custom_tool_call":
        return {**item, "input": ""}
    return {**item, "arguments": "", "status": "in_progress"}


async def open_item(emit: Events, item: dict[str, Any], index: int) -> None:
    await emit("response.output_item.added", output_index=index, item=_pending(item))
    where = {"output_index": index, "item_id": item["id"], "content_index": 0}
    if item["type"] == "reasoning":
        await emit("response.content_part.added", **where, part={"text": "", "type": "reasoning_text"})
    elif item["type"] == "message":
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        await emit("response.content_part.added", **where, part=part)


async def delta(emit: Events, item: dict[str, Any], index: int, piece: str) -> None:
    where = {"output_index": index, "item_id": item["id"]}
    if item["type"] == "reasoning":
        await emit("response.reasoning_text.delta", **where, content_index=0, delta=piece)
    elif item["type"] == "message":
        await emit("response.output_text.delta", **where, content_index=0, delta=piece, logprobs=[])
    elif item["type"] == "function_call":
        await emit("response.function_call_arguments.delta", **where, delta=piece)


async def close_item(emit: Events, item: dict[str, Any], index: int) -> None:
    where = {"output_index": index, "item_id": item["id"]}
    if item["type"] in ("reasoning", "message"):
        part = item["content"][0]
        done = "response.reasoning_text.done" if item["type"] == "reasoning" else "response.output_text.done"
        extra: dict[str, Any] = {} if item["type"] == "reasoning" else {"logprobs": []}
        await emit(done, **where, content_index=0, text=part["text"], **extra)
        await emit("response.content_part.done", **where, content_index=0, part=part)
    elif item["type"] == "function_call":
        await emit("response.function_call_arguments.done", **where, arguments=item["arguments"], name=item["name"])
    else:
        await emit("response.custom_tool_call_input.delta", **where, delta=item["input"])
        await emit("response.custom_tool_call_input.done", **where, input=item["input"])
    done_item = {**item, "status": "completed"} if item["type"] == "reasoning" else item
    await emit("response.output_item.done", output_index=index, item=done_item)
