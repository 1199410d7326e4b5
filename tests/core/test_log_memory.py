"""What only the in-memory backend does: its per-session and per-tree indexes share
entries (a lone root's, a one-record session's) and must still answer every read
exactly. The shared contract is in ``test_log_contract.py``."""

from __future__ import annotations

import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from halo_actors.core.events import TextStreamed
from halo_actors.core.log import EventFilter, MemoryEventLog

SESSIONS = ["a", "a>x", "a>x>y", "b", "b>z", "c"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(SESSIONS), st.integers(1, 3)), max_size=30))
def test_session_and_tree_reads_are_exact_whatever_the_order_of_appends(
    appends: list[tuple[str, int]],
) -> None:
    """Rule: a read by session or by tree gives exactly the matching records, in seq
    order, however a tree's appends interleave (root first or not, one record or many)."""

    async def check() -> None:
        log = MemoryEventLog()
        for n, (sid, count) in enumerate(appends):
            log.append_nowait(sid, *(TextStreamed(text=f"{n}.{i}") for i in range(count)))
        everything = await log.read()
        for sid in SESSIONS:
            mine = await log.read(EventFilter(session_id=sid))
            assert mine == [r for r in everything if r.session_id == sid]
        for root in ("a", "b", "c"):
            tree = await log.read(EventFilter(tree=root))
            assert tree == [r for r in everything if r.session_id.split(">")[0] == root]
            after = await log.read(EventFilter(tree=root), after_seq=len(everything) // 2)
            assert after == [r for r in tree if r.seq > len(everything) // 2]
        await log.aclose()

    trio.run(check)
