"""Benchmark: the HTTP front against a bare Starlette-on-hypercorn-trio server, same run.

Each server runs in its own child process (this script with ``--serve``), one at a
time; this process is the client side, on raw loopback sockets (httpx would be the
bottleneck). Phases, each once against ``bare`` and once against ``halo``:

- ``sse``: ``--clients`` (1,000) SSE subscribers of one busy session; when all are
  attached the server appends ``--events`` events in bursts of ``--burst`` as fast
  as it can, then a terminal ``complete``. Delivered events/s = clients × events /
  (last client done − first frame seen). ``halo`` goes through the whole path:
  actor emit → SQLite group commit → fan-out → SSE route; ``bare`` broadcasts to
  per-client memory channels read by a ``StreamingResponse``.
- ``latency``: for each count of ``--latency-clients`` (1, 5, 10) subscribers,
  ``--rate`` (1,000) events/s for ``--seconds``; each event's text is its append time
  (ns); p50/p99 of receive − append over every frame of every client. The headline
  ``sse_p99_ms`` is the halo figure for ``--headline-clients`` (5).
- ``history``: ``--conns`` keep-alive connections doing small ``GET`` requests for
  ``--seconds``: ``/api/web/history`` of a two-message session vs a bare JSON route.

Loopback only, bounded in count and time. Human lines first; the last line is one
JSON object with ``sse_vs_bare``, ``sse_p99_ms`` and ``history_vs_bare``.

    .venv/bin/python scripts/bench_http.py [--clients 1000] [--events 200] [--rate 1000]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import trio
import trio.lowlevel

SID = "web_bench_1"
HISTORY_SID = "web_bench_hist"
_STAMP = re.compile(rb'"text":"(\d+)"')


# --- client side -----------------------------------------------------------------


async def _request(port: int, target: str, token: str) -> trio.SocketStream:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    head = f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nx-token: {token}\r\n\r\n"
    await stream.send_all(head.encode())
    return stream


async def _subscriber(
    port: int, target: str, token: str, stats: dict[str, list[float]], sample: bool
) -> None:
    """Count frames until the terminal ``complete``; optionally record latencies (ms)."""
    stream = await _request(port, target, token)
    frames, tail, first = 0, b"", None
    async with stream:
        while True:
            chunk = await stream.receive_some(1 << 16)
            if not chunk:
                break
            now = time.time_ns()
            if first is None and b'"stream"' in chunk:
                first = now  # the first event frame (not the session frame of the attach)
            buf = tail + chunk
            frames += buf.count(b"data: ")
            if sample:
                stamps = [int(m) for m in _STAMP.findall(chunk)]
                stats["latency"].extend((now - t) / 1e6 for t in stamps)
                stats["stamps"].extend(stamps[:1] + stamps[-1:])
            if b'"complete"' in buf:
                break
            tail = buf[-5:]
    stats["first"].append(first or 0)
    stats["done"].append(time.time_ns())
    stats["frames"].append(frames)


async def run_sse(port: int, token: str, clients: int, sampled: int) -> dict[str, list[float]]:
    stats: dict[str, list[float]] = {"latency": [], "first": [], "done": [], "frames": []}
    stats["stamps"] = []
    target = f"/api/web/subscribe?sessionId={SID}"
    async with trio.open_nursery() as nursery:
        for i in range(clients):
            nursery.start_soon(_subscriber, port, target, token, stats, i < sampled)
            if i % 50 == 49:
                await trio.sleep(0.01)  # spread the connects over the accept loop
    return stats


async def _requester(
    port: int, target: str, token: str, deadline: float, counts: list[int]
) -> None:
    head = f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nx-token: {token}\r\n\r\n".encode()
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    buf = b""
    async with stream:
        while trio.current_time() < deadline:
            await stream.send_all(head)
            while b"\r\n\r\n" not in buf:
                buf += await stream.receive_some(1 << 16)
            header, _, buf = buf.partition(b"\r\n\r\n")
            length = int(re.search(rb"content-length: (\d+)", header.lower()).group(1))  # type: ignore[union-attr]
            while len(buf) < length:
                buf += await stream.receive_some(1 << 16)
            assert header.startswith(b"HTTP/1.1 200"), header[:40]
            buf = buf[length:]
            counts.append(1)


async def run_history(port: int, token: str, target: str, conns: int, seconds: float) -> float:
    counts: list[int] = []
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        for _ in range(conns):
            nursery.start_soon(_requester, port, target, token, start + seconds, counts)
    return len(counts) / (trio.current_time() - start)


# --- the server children ---------------------------------------------------------------


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


Emit = Callable[[list[str]], Awaitable[None]]


async def _drive(
    emit: Emit, wait_clients: Callable[[], Awaitable[None]], args: argparse.Namespace
) -> None:
    """Wait for every subscriber, then append: bursts as fast as possible, or paced."""
    await wait_clients()
    await trio.sleep(0.2)
    if not args.rate:
        for _ in range(args.events // args.burst):
            await emit([str(time.time_ns())] * args.burst)
            await trio.lowlevel.checkpoint()
        return
    async with trio.open_nursery() as nursery:  # concurrent appends: the log group-commits
        start = trio.current_time()
        for i in range(int(args.rate * args.seconds)):
            await trio.sleep_until(start + i / args.rate)
            nursery.start_soon(emit, [str(time.time_ns())])


async def serve_halo(args: argparse.Namespace, tmp: Path) -> None:
    from halo_actors.agent.demo_agent import DEMO_SCRIPT
    from halo_actors.agent.scripted import Rule, Script, ScriptedModel, Step
    from halo_actors.core.events import TextStreamed
    from halo_actors.fronts.http.app import FrontSettings
    from halo_actors.fronts.http.limits import load_test_limits
    from halo_actors.fronts.http.server import open_server
    from halo_actors.fronts.http.tokens import TokenStore

    (tmp / "ws").mkdir()
    store = TokenStore(tmp / "state")
    token = store.create("bench", "full", tmp / "ws")
    hold = Rule(match="^hold$", steps=(Step(text="x", delay=3600),))
    model = ScriptedModel({}, fallback=Script(rules=(hold, *DEMO_SCRIPT.rules)))
    settings = FrontSettings(tokens=store, model=model, limits=load_test_limits())
    async with open_server(settings, port=0, workspaces=(tmp / "ws",)) as server:
        sup = await server.front.runtimes.get(str((tmp / "ws").resolve()))
        assert sup is not None
        await sup.create_session(HISTORY_SID)
        await sup.send(HISTORY_SID, "hi")
        await sup.wait_idle(HISTORY_SID)
        await sup.create_session(SID)
        await sup.send(SID, "hold")
        print(json.dumps({"port": server.port, "token": token}), flush=True)
        if args.clients:

            async def emit(texts: list[str]) -> None:
                # straight to the log (stream deltas change no session state): the actor's
                # emit would serialise the appends on commit latency, see docs/benchmarks.md
                await sup.log.append(SID, *(TextStreamed(text=t) for t in texts))

            async def wait_clients() -> None:
                while sup.log.subscriber_count < args.clients:  # type: ignore[attr-defined]  # noqa: ASYNC110
                    await trio.sleep(0.05)

            await _drive(emit, wait_clients, args)
            await sup.stop(SID)
        await trio.sleep_forever()


def _bare_app(channels: set[trio.MemorySendChannel[bytes]]) -> Any:
    """The baseline: a plain StreamingResponse per client and a plain JSONResponse."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, StreamingResponse
    from starlette.routing import Route

    async def sse(request: Request) -> StreamingResponse:
        send, receive = trio.open_memory_channel[bytes](4096)
        channels.add(send)

        async def frames() -> AsyncIterator[bytes]:
            try:
                yield b'id: 0\ndata: {"type":"session","sessionId":"%s"}\n\n' % SID.encode()
                async for frame in receive:
                    yield frame
            finally:
                channels.discard(send)

        return StreamingResponse(frames(), media_type="text/event-stream")

    body = {"sessionId": HISTORY_SID, "running": False, "messages": [
        {"id": 3, "timestamp": 1, "role": "user", "text": "hi"},
        {"id": 9, "timestamp": 2, "role": "assistant", "text": "Done: hi",
         "contentBlocks": [{"type": "text", "text": "Done: hi"}]},
    ]}  # fmt: skip

    async def history(request: Request) -> JSONResponse:
        return JSONResponse(body)

    return Starlette(routes=[Route("/api/web/subscribe", sse), Route("/api/web/history", history)])


async def serve_bare(args: argparse.Namespace) -> None:
    from hypercorn.config import Config
    from hypercorn.trio import serve

    channels: set[trio.MemorySendChannel[bytes]] = set()
    seq = [0]

    async def emit(texts: list[str]) -> None:
        for text in texts:
            seq[0] += 1
            frame = b'id: %d\ndata: {"type":"stream","text":"%s"}\n\n' % (seq[0], text.encode())
            for channel in list(channels):
                channel.send_nowait(frame)
        await trio.lowlevel.checkpoint()

    app = _bare_app(channels)
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.backlog = 1024  # as the HTTP front's
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(serve, app, config)
        print(json.dumps({"port": int(binds[0].rsplit(":", 1)[1]), "token": "-"}), flush=True)
        if args.clients:

            async def wait_clients() -> None:
                while len(channels) < args.clients:  # noqa: ASYNC110
                    await trio.sleep(0.05)

            await _drive(emit, wait_clients, args)
            for channel in list(channels):
                channel.send_nowait(b'id: %d\ndata: {"type":"complete"}\n\n' % (seq[0] + 1))
                channel.close()


def child_main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-http-") as tmp:
        if args.serve == "halo":
            from halo_actors.logging import configure_logging

            configure_logging()  # stderr: stdout carries only the hello line
            trio.run(serve_halo, args, Path(tmp))
        else:
            trio.run(serve_bare, args)


# --- orchestration -------------------------------------------------------------------


class Child:
    """One server child process; started with phase options, killed when done."""

    def __init__(self, kind: str, options: list[str]) -> None:
        cmd = [sys.executable, __file__, "--serve", kind, *options]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert self.proc.stdout is not None
        try:
            hello = json.loads(self.proc.stdout.readline())
        except BaseException:
            self.close()
            raise
        self.port: int = hello["port"]
        self.token: str = hello["token"]

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def sse_phase(kind: str, args: argparse.Namespace, clients: int, paced: bool) -> dict[str, float]:
    opts = ["--clients", str(clients), "--events", str(args.events), "--burst", str(args.burst)]
    opts += ["--rate", str(args.rate if paced else 0), "--seconds", str(args.seconds)]
    child = Child(kind, opts)
    try:
        sampled = clients if paced else 0
        stats = trio.run(run_sse, child.port, child.token, clients, sampled)
    finally:
        child.close()
    span = (max(stats["done"]) - min(f for f in stats["first"] if f)) / 1e9
    events = args.rate * args.seconds if paced else args.events
    out = {"clients": clients, "seconds": span, "delivered_per_s": clients * events / span}
    out["min_frames"] = min(stats["frames"])
    if paced:
        out |= {"p50_ms": _percentile(stats["latency"], 0.5)}
        out |= {"p99_ms": _percentile(stats["latency"], 0.99), "samples": len(stats["latency"])}
        appended = (max(stats["stamps"]) - min(stats["stamps"])) / 1e9
        out["append_rate"] = (events - 1) / appended if appended else float("nan")
    return out


def history_phase(kind: str, args: argparse.Namespace) -> float:
    child = Child(kind, ["--clients", "0"])
    try:
        target = f"/api/web/history?sessionId={HISTORY_SID}"
        return trio.run(run_history, child.port, child.token, target, args.conns, args.seconds)
    finally:
        child.close()


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--serve", choices=("halo", "bare"), help=argparse.SUPPRESS)
    p.add_argument("--clients", type=int, default=1000)
    p.add_argument("--events", type=int, default=100)
    p.add_argument("--burst", type=int, default=10)
    p.add_argument("--rate", type=float, default=1000.0)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--latency-clients", default="1,5,10", help="comma-separated client counts")
    p.add_argument("--headline-clients", type=int, default=5, help="the count sse_p99_ms is for")
    p.add_argument("--conns", type=int, default=16)
    p.add_argument("--rounds", type=int, default=3, help="history runs per server (best counts)")
    return p.parse_args()


def main() -> None:
    args = parse()
    if args.serve:
        child_main(args)
        return
    result: dict[str, Any] = {}
    for kind in ("bare", "halo"):
        result[f"sse_{kind}"] = sse_phase(kind, args, args.clients, paced=False)
        print(f"sse {kind}: {result[f'sse_{kind}']}", flush=True)
        for count in [int(c) for c in args.latency_clients.split(",")]:
            result[f"latency_{kind}_{count}"] = sse_phase(kind, args, count, paced=True)
            print(f"latency {kind} x{count}: {result[f'latency_{kind}_{count}']}", flush=True)
    for _ in range(args.rounds):  # alternate, keep each server's best: the host is shared
        for kind in ("bare", "halo"):
            rps = history_phase(kind, args)
            key = f"history_{kind}_rps"
            result[key] = max(rps, result.get(key, 0.0))
            print(f"history {kind}: {rps:.0f} req/s", flush=True)
    for kind in ("bare", "halo"):  # a client that missed events would inflate the rate
        expected = args.events + 2
        assert result[f"sse_{kind}"]["min_frames"] == expected, (kind, result[f"sse_{kind}"])
    sse_ratio = result["sse_halo"]["delivered_per_s"] / result["sse_bare"]["delivered_per_s"]
    summary = {
        "sse_vs_bare": round(sse_ratio, 3),
        "sse_p99_ms": round(result[f"latency_halo_{args.headline_clients}"]["p99_ms"], 2),
        "sse_p99_clients": args.headline_clients,
        "history_vs_bare": round(result["history_halo_rps"] / result["history_bare_rps"], 3),
        **result,
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
