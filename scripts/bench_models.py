"""Benchmark: model deltas through a provider, the runtime and the log, and cancel latency.

A loopback server speaks each API's SSE format. Two measures per provider:

- **throughput**: the server streams ``--deltas`` text deltas as fast as it can (64 KiB
  writes) into one session; deltas/s (wire deltas delivered, as text; a provider joins
  the deltas of one network read into one ``TextDelta``) for (a) a bare httpx reader of the same stream
  (``aiter_lines`` + ``msgspec.json.decode`` of each data line: the least any client
  does, with the fastest JSON decoder at hand),
  (b) the provider alone, (c) provider + runtime + memory log, (d) the same with the
  SQLite log; each run ``--repeat`` times, the best kept, all in the same process;
- **cancel**: a turn streams one delta and the server holds the stream open; a hard
  interrupt is sent, and the time until the server sees its connection closed is
  measured ``--cancels`` times (p50, p99, max).

Human lines first; the last line is one JSON object.

    .venv/bin/python scripts/bench_models.py [--deltas 20000] [--repeat 3] [--cancels 100]
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from collections.abc import Callable

import httpx
import msgspec
import trio

from halo_actors import (
    AnthropicModel,
    EventFilter,
    ModelRequest,
    OpenAIModel,
    RetryPolicy,
    TextDelta,
    TextStreamed,
    open_runtime,
)
from halo_actors.agent.model import RoundInfo
from halo_actors.core.conversation import user_text

DELTA = "tok "


def anthropic_body(deltas: int) -> bytes:
    def event(name: str, data: dict[str, object]) -> str:
        return f"event: {name}\ndata: {json.dumps(data)}\n\n"

    usage = {"input_tokens": 10, "output_tokens": 1}
    message = {
        "id": "m",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": "b",
        "usage": usage,
    }
    head = event("message_start", {"type": "message_start", "message": message})
    head += event(
        "content_block_start",
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    )
    one = event(
        "content_block_delta",
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": DELTA}},
    )
    tail = event("content_block_stop", {"type": "content_block_stop", "index": 0})
    tail += event(
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn"},
            "usage": {"output_tokens": deltas},
        },
    )
    tail += event("message_stop", {"type": "message_stop"})
    return (head + one * deltas + tail).encode()


def openai_body(deltas: int) -> bytes:
    def chunk(delta: dict[str, object], finish: str | None = None) -> str:
        data = {
            "id": "c",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "b",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        return f"data: {json.dumps(data)}\n\n"

    return (
        chunk({"role": "assistant", "content": ""})
        + chunk({"content": DELTA}) * deltas
        + chunk({}, "stop")
        + "data: [DONE]\n\n"
    ).encode()


class Server:
    """Answers every POST with ``body(request)``; ``hold`` bodies stay open until the
    client closes, and the time it did is recorded."""

    def __init__(self, body: Callable[[bytes], tuple[bytes, bool]]) -> None:
        self.body = body
        self.port = 0
        self.closed: list[float] = []
        self.on_close = trio.Event()

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started()
        await trio.serve_listeners(self._one, listeners)

    async def _one(self, stream: trio.SocketStream) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = await stream.receive_some(65536)
            if not chunk:
                return
            data += chunk
        head, _, request = data.partition(b"\r\n\r\n")
        length = int(
            next(
                line.split(b":")[1]
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length")
            )
        )
        while len(request) < length:
            request += await stream.receive_some(65536)
        body, hold = self.body(request)
        await stream.send_all(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
        )
        for start in range(0, len(body), 65536):
            await stream.send_all(body[start : start + 65536])
        if hold:
            while await stream.receive_some(4096):
                pass
            self.closed.append(trio.current_time())
            self.on_close.set()
        await stream.aclose()


def model_for(name: str, server: Server) -> AnthropicModel | OpenAIModel:
    retry = RetryPolicy(attempts=2, stall=60.0)
    if name == "anthropic":
        return AnthropicModel(
            "bench", base_url=f"http://127.0.0.1:{server.port}", api_key="k", retry=retry
        )
    return OpenAIModel(
        "bench", base_url=f"http://127.0.0.1:{server.port}/v1", api_key="k", retry=retry
    )


async def bare_reader(model: AnthropicModel | OpenAIModel, deltas: int) -> float:
    count = 0
    client = httpx.AsyncClient()  # made outside the timer, like the provider's (warmed up)
    start = time.perf_counter()
    async with client, client.stream("POST", model.endpoint.url, content=b"{}") as response:
        async for line in response.aiter_lines():
            if line.startswith("data: {"):
                data = msgspec.json.decode(line[6:])
                count += "text_delta" in line or bool(
                    data.get("choices") and data["choices"][0]["delta"].get("content")
                )
    assert count >= deltas, count
    return deltas / (time.perf_counter() - start)


async def provider_alone(model: AnthropicModel | OpenAIModel, deltas: int) -> float:
    request = ModelRequest(
        session_id="s",
        agent_id="default",
        system="",
        messages=(user_text("go"),),
        tools=(),
        round=RoundInfo(text="go", kind="opening"),
        step=0,
    )
    start = time.perf_counter()
    text = "".join([e.text async for e in model.stream(request) if isinstance(e, TextDelta)])
    assert text == DELTA * deltas, len(text)
    return deltas / (time.perf_counter() - start)


async def through_runtime(model: AnthropicModel | OpenAIModel, deltas: int, durable: bool) -> float:
    with tempfile.TemporaryDirectory() as workspace:
        async with open_runtime(workspace, model=model, durable=durable) as sup:
            sid = await sup.create_session()
            start = time.perf_counter()
            await sup.send(sid, "go")
            await sup.wait_idle(sid)
            elapsed = time.perf_counter() - start
            streamed = await sup.log.read(EventFilter(session_id=sid, kinds=frozenset({"stream"})))
    text = "".join(r.event.text for r in streamed if isinstance(r.event, TextStreamed))
    assert text == DELTA * deltas, len(text)
    return deltas / elapsed


async def cancel_latencies(name: str, runs: int) -> list[float]:
    holding = (
        anthropic_body(1)[: anthropic_body(1).index(b"event: content_block_stop")]
        if name == "anthropic"
        else openai_body(1)[:-40]
    )
    done = anthropic_body(1) if name == "anthropic" else openai_body(1)
    server = Server(lambda request: (done, False) if b"stop now" in request else (holding, True))
    latencies = []
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        model = model_for(name, server)
        with tempfile.TemporaryDirectory() as workspace:
            async with open_runtime(workspace, model=model, durable=False) as sup:
                for _ in range(runs):
                    sid = await sup.create_session()
                    server.on_close = trio.Event()
                    async with sup.log.subscribe(EventFilter(session_id=sid)) as records:
                        await sup.send(sid, "talk")
                        async for record in records:
                            if isinstance(record.event, TextStreamed):
                                break
                    start = trio.current_time()
                    await sup.interrupt(sid, "stop now")
                    await server.on_close.wait()
                    latencies.append(server.closed[-1] - start)
                    await sup.wait_idle(sid)
        await model.aclose()
        nursery.cancel_scope.cancel()
    return latencies


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


async def bench(args: argparse.Namespace) -> dict[str, object]:
    out: dict[str, object] = {"deltas": args.deltas}
    for name in ("anthropic", "openai"):
        body = anthropic_body(args.deltas) if name == "anthropic" else openai_body(args.deltas)
        server = Server(lambda _request, body=body: (body, False))
        figures: dict[str, float] = {}
        async with trio.open_nursery() as nursery:
            await nursery.start(server.serve)
            model = model_for(name, server)
            cases = {
                "bare_httpx": lambda m=model: bare_reader(m, args.deltas),
                "provider": lambda m=model: provider_alone(m, args.deltas),
                "runtime_memory": lambda m=model: through_runtime(m, args.deltas, False),
                "runtime_sqlite": lambda m=model: through_runtime(m, args.deltas, True),
            }
            for case, run in cases.items():
                figures[case] = max([await run() for _ in range(args.repeat)])
            await model.aclose()
            nursery.cancel_scope.cancel()
        latencies = await cancel_latencies(name, args.cancels)
        cancel = {
            "p50_ms": quantile(latencies, 0.5) * 1000,
            "p99_ms": quantile(latencies, 0.99) * 1000,
            "max_ms": max(latencies) * 1000,
        }
        ratio = figures["runtime_memory"] / figures["bare_httpx"]
        print(f"{name}: " + ", ".join(f"{k} {v:,.0f}/s" for k, v in figures.items()))
        print(
            f"{name}: runtime+memory log = {ratio:.2f}x the bare reader; cancel → closed p50 {cancel['p50_ms']:.2f} ms, p99 {cancel['p99_ms']:.2f} ms"
        )
        out[name] = {"deltas_per_s": figures, "memory_vs_bare": ratio, "cancel": cancel}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--deltas", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cancels", type=int, default=100)
    args = parser.parse_args()
    print(json.dumps(trio.run(bench, args)))


if __name__ == "__main__":
    main()
