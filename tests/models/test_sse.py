"""The SSE parser: the same events however the bytes are cut."""

from __future__ import annotations

from halo_actors.agent.providers.sse import SseEvent, SseParser

BODY = (
    ": a comment line\r\n"
    "event: content_block_delta\r\n"
    'data: {"text": "Grüße ✓ 日本 🎉"}\r\n'
    "\r\n"
    "event: ping\n"
    "data: {}\n"
    "\n"
    "id: 7\n"
    "data: first line\n"
    "data:second line\n"
    "data\n"
    "\n"
    "event: no-data-no-dispatch\n"
    "\n"
    "data: [DONE]\n"
    "\n"
).encode()

EXPECTED = [
    SseEvent("content_block_delta", '{"text": "Grüße ✓ 日本 🎉"}'),
    SseEvent("ping", "{}"),
    SseEvent("", "first line\nsecond line\n"),
    SseEvent("", "[DONE]"),
]


def test_every_cut_of_the_bytes_gives_the_same_events() -> None:
    """Rule: UTF-8 split across chunks is handled (and lines, and events): cut the body at
    every byte position, and in one-byte pieces; the events never change."""
    for cut in range(len(BODY) + 1):
        parser = SseParser()
        assert parser.feed(BODY[:cut]) + parser.feed(BODY[cut:]) == EXPECTED, cut
        assert not parser.pending
    parser = SseParser()
    assert [e for i in range(len(BODY)) for e in parser.feed(BODY[i : i + 1])] == EXPECTED
