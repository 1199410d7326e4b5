"""The HTTP front after its runtime's log fail-stops: a clear error, then a reopen.

A commit that fails (here the journal write of a full disk) stops the workspace's
runtime (fail-stop, ``docs/design/event-log.md``). The rules checked here, end to end through a real server on loopback: the request whose
message was lost gets a clear ``503`` (no traceback, never acknowledged), the server
keeps serving, and the next request for that workspace opens the runtime again on the
same file, which holds the durable prefix: what was acknowledged before the failure is
there, the lost message is not, and new messages are answered.
"""

from __future__ import annotations

from pathlib import Path

import trio
from sqlite_faults import FlakyConnection, JournalFaults, journal_faults, writer_connection
from web_client import serve_harness, sse, wait_until

__all__ = ["journal_faults", "writer_connection"]  # fixtures, used by name


async def test_a_runtime_stopped_by_a_failed_commit_is_reopened_by_the_next_request(
    tmp_path: Path, writer_connection: list[FlakyConnection], journal_faults: JournalFaults
) -> None:
    with trio.fail_after(30):
        async with serve_harness(tmp_path) as harness, harness.client(harness.token()) as client:
            first = await sse(client, "POST", "/api/web/chat", json={"message": "first"})
            sid = str(first.frames[0].data["sessionId"])
            assert first.types()[-1] == "complete"
            runtimes = harness.server.front.runtimes
            assert len(runtimes.opened()) == 1 and len(writer_connection) == 1

            journal_faults.fails.append(OSError(28, "No space left on device"))
            lost = await client.post("/api/web/chat", json={"message": "lost", "sessionId": sid})
            assert lost.status_code == 503, lost.text
            assert "Traceback" not in lost.text and "No space left" in lost.json()["error"]
            assert journal_faults.torn == 1
            await wait_until(lambda: not runtimes.opened())  # the runtime ended, cleanly

            again = await sse(
                client, "POST", "/api/web/chat", json={"message": "third", "sessionId": sid}
            )
            assert again.types()[-1] == "complete"
            assert len(writer_connection) == 2  # a new log on the same file
            history = (await client.get("/api/web/history", params={"sessionId": sid})).json()
    said = [m["text"] for m in history["messages"] if m["role"] == "user"]
    assert said == ["first", "third"]  # the lost message is in no history, nor answered
    assert history["running"] is False
