"""GET /api/web/subscribe: idle answer, live tail, Last-Event-ID resume, overflow."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from pathlib import Path

import pytest
import trio
from sandbox_check import needs_sandbox
from web_client import (
    TEST_SCRIPT,
    Frame,
    Harness,
    SseRead,
    SseStream,
    serve_harness,
    sse,
    wait_until,
)

from halo_actors.agent.model import ModelEvent, ModelRequest
from halo_actors.agent.scripted import ScriptedModel
from halo_actors.core.events import Compacted, TextStreamed
from halo_actors.core.log import EventFilter
from halo_actors.fronts.http import streams
from halo_actors.runtime.supervisor import Supervisor


async def test_an_idle_session_gets_session_then_one_complete(harness: Harness) -> None:
    with trio.fail_after(10):
        async with harness.client(harness.token()) as client:
            await sse(client, "POST", "/api/web/chat", json={"message": "hi"})
            read = await sse(client, "GET", "/api/web/subscribe")
    assert read.types() == ["session", "complete"]


async def test_a_resume_id_ahead_of_the_horizon_is_never_answered_with_a_lower_id(
    harness: Harness,
) -> None:
    """Frame ids only grow across a resume. A node whose log lags the node a client came
    from (other trees' commits not tailed yet) knows an idle session of its own whole,
    and its ``complete`` names the client's id, not its older horizon (seen in the nodes
    chaos suite: ``complete`` 4629 after 4647). Here, one node: an id past the horizon."""
    with trio.fail_after(10):
        async with harness.client(harness.token()) as client:
            nothing = await sse(client, "GET", "/api/web/subscribe", headers={"last-event-id": "5"})
            await sse(client, "POST", "/api/web/chat", json={"message": "hi"})
            ahead = (await harness.sup()).log.last_seq + 3
            read = await sse(
                client, "GET", "/api/web/subscribe", headers={"last-event-id": str(ahead)}
            )
    assert read.types() == nothing.types() == ["session", "complete"]
    assert [f.id.seq for f in read.frames] == [ahead, ahead]
    assert [f.id.seq for f in nothing.frames] == [5, 5]  # no session here yet


async def test_a_busy_session_streams_to_its_terminal_complete(harness: Harness) -> None:
    reads: list[SseRead] = []
    with trio.fail_after(10):
        async with harness.client(harness.token()) as client, trio.open_nursery() as nursery:

            async def chat() -> None:
                reads.append(await sse(client, "POST", "/api/web/chat", json={"message": "slow 8"}))

            nursery.start_soon(chat)
            sup = await harness.sup()
            await wait_until(lambda: any(s.turn_open for s in sup.sessions()))
            sub = await sse(client, "GET", "/api/web/subscribe")
    assert sub.types()[0] == "session" and sub.types()[-1] == "complete"
    assert sub.types().count("complete") == 1
    tail = [f for f in reads[0].frames if f.id > sub.frames[0].id]
    assert _payloads(sub.frames[1:]) == _payloads(tail)


async def test_last_event_id_resumes_with_no_gap_and_no_duplicate(harness: Harness) -> None:
    reads: list[SseRead] = []
    with trio.fail_after(10):
        async with harness.client(harness.token()) as client, trio.open_nursery() as nursery:

            async def chat() -> None:
                reads.append(
                    await sse(client, "POST", "/api/web/chat", json={"message": "slow 12"})
                )

            nursery.start_soon(chat)
            sup = await harness.sup()
            await wait_until(lambda: any(s.turn_open for s in sup.sessions()))
            part1 = await sse(client, "GET", "/api/web/subscribe", stop_after=3)
            last = part1.frames[-1].id
            await trio.sleep(0.2)  # miss some frames on purpose
            part2 = await sse(
                client, "GET", "/api/web/subscribe", headers={"last-event-id": str(last)}
            )
            part3 = await sse(client, "GET", f"/api/web/subscribe?lastEventId={last}")
    reference = [f for f in reads[0].frames if f.id > part1.frames[0].id]
    assert _payloads(part1.frames[1:] + part2.frames[1:]) == _payloads(reference)
    assert [f.id for f in part2.frames[1:]] == [f.id for f in reference if f.id > last]
    assert _payloads(part3.frames[1:]) == _payloads(part2.frames[1:])


async def test_resume_after_the_run_ended_replays_the_missed_frames(harness: Harness) -> None:
    with trio.fail_after(10):
        async with harness.client(harness.token()) as client:
            full = await sse(client, "POST", "/api/web/chat", json={"message": "slow 4"})
            cut = full.frames[2].id
            resumed = await sse(
                client, "GET", "/api/web/subscribe", headers={"last-event-id": str(cut)}
            )
            done = await sse(
                client,
                "GET",
                "/api/web/subscribe",
                headers={"last-event-id": str(full.frames[-1].id)},
            )
    assert _payloads(resumed.frames[1:]) == _payloads(full.frames[3:])
    assert done.types() == ["session", "complete"]


async def test_resume_inside_a_media_line_rebuilds_the_line_filter(harness: Harness) -> None:
    with trio.fail_after(10):
        async with harness.client(harness.token()) as client:
            full = await sse(client, "POST", "/api/web/chat", json={"message": "media"})
            sup = await harness.sup()
            sid = str(full.frames[0].data["sessionId"])
            records = await sup.log.read(EventFilter(session_id=sid, kinds=frozenset({"stream"})))
            held = next(
                r.seq
                for r in records
                if isinstance(r.event, TextStreamed) and r.event.text == "MEDI"
            )
            resumed = await sse(
                client, "GET", "/api/web/subscribe", headers={"last-event-id": str(held)}
            )
    assert resumed.types()[:2] == ["session", "file"]
    assert set(resumed.types()[2:-1]) == {"stream"} and resumed.types()[-1] == "complete"
    assert resumed.frames[1].data["path"] == "out/report.txt"
    assert resumed.text() == "Done.\n"


async def test_an_overflowing_listener_closes_its_stream_and_resume_misses_nothing(
    tmp_path: Path,
) -> None:
    with trio.fail_after(15):
        async with (
            serve_harness(tmp_path, subscriber_buffer=4) as harness,
            harness.client(harness.token()) as client,
            trio.open_nursery() as nursery,
        ):
            nursery.start_soon(
                lambda: sse(client, "POST", "/api/web/chat", json={"message": "slow 10"})
            )
            sup = await harness.sup()
            await wait_until(lambda: any(s.turn_open for s in sup.sessions()))
            (sid,) = [s.session_id for s in sup.sessions()]
            burst = [TextStreamed(text=f"burst{i} ") for i in range(20)]
            async with client.stream("GET", "/api/web/subscribe") as resp:
                reader = SseStream(resp)
                (first,) = await reader.take(1)
                await sup.actor(sid).emit(*burst)
                cut = await reader.take()
            assert "complete" not in [f.type for f in cut]
            last = cut[-1].id if cut else first.id
            rest = await sse(
                client, "GET", "/api/web/subscribe", headers={"last-event-id": str(last)}
            )
    texts = "".join(str(f.data.get("text", "")) for f in [*cut, *rest.frames])
    assert all(f"burst{i} " in texts for i in range(20))
    assert texts.count("burst0 ") == 1
    assert rest.types()[-1] == "complete"


async def test_resume_from_any_frame_of_a_record_shown_as_several_frames_misses_nothing(
    harness: Harness,
) -> None:
    with trio.fail_after(15):
        async with harness.client(harness.token()) as client:
            full = await sse(client, "POST", "/api/web/chat", json={"message": "media"})
            resumed = [
                await sse(
                    client, "GET", "/api/web/subscribe", headers={"last-event-id": str(frame.id)}
                )
                for frame in full.frames[1:-1]
            ]
    ids = [f.id for f in full.frames[1:]]
    assert any(i.part for i in ids), "the file frame shares a record with text"
    assert len(set(ids)) == len(ids) and ids == sorted(ids)
    for cut, read in enumerate(resumed, start=2):
        assert [(f.id, f.data) for f in read.frames[1:]] == [
            (f.id, f.data) for f in full.frames[cut:]
        ]


@needs_sandbox()
async def test_subscribe_sends_keepalives_while_idle_and_they_stop_with_the_stream(
    harness: Harness,
) -> None:
    reads: list[SseRead] = []
    with trio.fail_after(10):
        async with harness.client(harness.token()) as client, trio.open_nursery() as nursery:

            async def chat() -> None:
                body = {"message": "run sleep 0.8"}  # no frame while the command runs
                reads.append(await sse(client, "POST", "/api/web/chat", json=body))

            nursery.start_soon(chat)
            sup = await harness.sup()
            await wait_until(lambda: any(s.turn_open for s in sup.sessions()))
            async with client.stream("GET", "/api/web/subscribe") as resp:
                raw = await resp.aread()  # returns once the body has ended
        front = harness.server.front
        await wait_until(lambda: front.open_streams == 0)
    blocks = [b for b in raw.split(b"\n\n") if b]
    assert b": keepalive" in blocks
    *_, last = blocks
    chat_end = reads[0].frames[-1]
    assert chat_end.type == "complete"
    assert last.startswith(b"id: %s\n" % str(chat_end.id).encode())  # the terminal complete
    assert last.endswith(b'data: {"type":"complete","reason":"end_turn"}')  # nothing after


BAD_RESUME_IDS = ["-1", "1.", ".1", "0.1", "1.2.3", "1.-2", "1.x", "1." + "9" * 19]


@pytest.mark.parametrize("resume", BAD_RESUME_IDS)
async def test_a_malformed_resume_id_is_refused(harness: Harness, resume: str) -> None:
    with trio.fail_after(10):
        async with harness.client(harness.token()) as client:
            bad = await client.get("/api/web/subscribe", headers={"last-event-id": resume})
    assert bad.status_code == 400 and bad.json() == {"error": "Invalid lastEventId"}


async def test_bad_resume_ids_and_unknown_sessions_are_refused(harness: Harness) -> None:
    with trio.fail_after(10):
        async with harness.client(harness.token()) as client:
            bad = await client.get("/api/web/subscribe", headers={"last-event-id": "-1"})
            unknown = await client.get("/api/web/subscribe?sessionId=web_alice_nope")
            fresh = await sse(client, "GET", "/api/web/subscribe")
    assert bad.status_code == 400 and bad.json() == {"error": "Invalid lastEventId"}
    assert unknown.status_code == 404 and unknown.json() == {"error": "session not found"}
    assert fresh.types() == ["session", "complete"]


def _payloads(frames: list[Frame]) -> list[dict[str, object]]:
    return [f.data for f in frames]


async def test_a_run_ending_between_registration_and_idle_check_streams_to_its_complete(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = streams.stream_state_at

    async def late(sup: Supervisor, session_id: str, seq: int) -> streams.StreamState:
        await sup.wait_idle(session_id)  # the run ends after the listener registered
        return await real(sup, session_id, seq)

    reads: list[SseRead] = []
    with trio.fail_after(10):
        async with harness.client(harness.token()) as client, trio.open_nursery() as nursery:

            async def chat() -> None:
                reads.append(await sse(client, "POST", "/api/web/chat", json={"message": "slow 6"}))

            nursery.start_soon(chat)
            sup = await harness.sup()
            await wait_until(lambda: any(s.turn_open for s in sup.sessions()))
            monkeypatch.setattr(streams, "stream_state_at", late)
            sub = await sse(client, "GET", "/api/web/subscribe")
    tail = [f for f in reads[0].frames if f.id > sub.frames[0].id]
    assert _payloads(sub.frames[1:]) == _payloads(tail)
    assert sub.frames[-1].id == reads[0].frames[-1].id  # the run's own complete


class SlowCompaction(ScriptedModel):
    """The test script, but a compaction takes a while (the scripted summary is instant)."""

    def __init__(self) -> None:
        super().__init__({}, fallback=TEST_SCRIPT)

    async def stream(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        if request.purpose == "compact":
            await trio.sleep(0.5)
        async for item in super().stream(request):
            yield item


@pytest.mark.parametrize("queued", [False, True], ids=["nothing queued", "a message queued"])
async def test_a_compacting_session_is_not_idle_subscribe_streams_to_the_run_end(
    tmp_path: Path, queued: bool
) -> None:
    with trio.fail_after(15):
        async with (
            serve_harness(tmp_path, model=SlowCompaction()) as harness,
            harness.client(harness.token()) as client,
            trio.open_nursery() as nursery,
        ):
            for text in ("first", "second"):
                await sse(client, "POST", "/api/web/chat", json={"message": text})
            nursery.start_soon(
                lambda: sse(client, "POST", "/api/web/chat", json={"message": "/compact"})
            )
            sup = await harness.sup()
            (sid,) = [s.session_id for s in sup.sessions()]
            await wait_until(lambda: sup.state(sid).is_compacting)
            history = (await client.get("/api/web/history")).json()
            if queued:
                assert await sup.send(sid, "third") == "queued"
            sub = await sse(client, "GET", "/api/web/subscribe")
            (compacted,) = [
                r.seq
                for r in await sup.log.read(EventFilter(session_id=sid))
                if isinstance(r.event, Compacted)
            ]
    assert history["running"] is True
    assert sub.types()[0] == "session" and sub.types()[-1] == "complete"
    assert sub.frames[-1].id > compacted  # the run's own end, after the summary
    shown = sub.types()[1:]
    runs = [t for i, t in enumerate(shown) if i == 0 or shown[i - 1] != t]  # one per run of a kind
    assert runs == (["user", "stream", "complete"] if queued else ["complete"])
    if queued:
        assert sub.text() == "Done: third"


async def test_the_session_frame_of_a_part_id_resume_names_what_came_before_it(
    harness: Harness,
) -> None:
    """Rule (``docs/http.md``): every frame id names exactly what came before it. A
    resume from a part id ``N.k`` opens with a ``session`` frame whose id is ``N.k``
    itself, so a client cut right after that frame resumes from it and gets no frame
    a second time."""
    with trio.fail_after(15):
        async with harness.client(harness.token()) as client:
            full = await sse(client, "POST", "/api/web/chat", json={"message": "media"})
            cut = next(i for i, f in enumerate(full.frames) if f.id.part)
            resumed = await sse(
                client,
                "GET",
                "/api/web/subscribe",
                headers={"last-event-id": str(full.frames[cut].id)},
                stop_after=1,
            )
            (opening,) = resumed.frames
            assert opening.type == "session"
            assert opening.id == full.frames[cut].id
            again = await sse(
                client, "GET", "/api/web/subscribe", headers={"last-event-id": str(opening.id)}
            )
    assert [(f.id, f.data) for f in again.frames[1:]] == [
        (f.id, f.data) for f in full.frames[cut + 1 :]
    ]
