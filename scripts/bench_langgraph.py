"""The LangGraph peer of ``bench_runtime.py``'s turns case (the ``bench`` extra).

One thread, one node that answers "ok" (``MessagesState``: the conversation grows by
two messages a turn, as ours does), ``graph.invoke`` per turn, checkpointed by
``InMemorySaver`` or by ``SqliteSaver`` on a WAL file with ``synchronous=NORMAL`` (our
SQLite log's setting, so both make the same durability promise). LangGraph saves a
checkpoint of the thread's state at every step, so a turn's cost grows with the
conversation: the first and last tenth are reported, as for ours.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, START, MessagesState, StateGraph
except ImportError as missing:  # pragma: no cover - the peer is a bench-only extra
    raise SystemExit(f"langgraph is missing ({missing}): pip install -e '.[bench]'") from None

WARM_TURNS = 20


@dataclass
class PeerTurns:
    per_second: float
    first_tenth_per_second: float
    last_tenth_per_second: float


def _answer(state: MessagesState) -> dict[str, list[AIMessage]]:
    return {"messages": [AIMessage(content="ok")]}


def _graph(checkpointer: Any) -> Any:
    builder = StateGraph(MessagesState)
    builder.add_node("answer", _answer)
    builder.add_edge(START, "answer")
    builder.add_edge("answer", END)
    return builder.compile(checkpointer=checkpointer)


def langgraph_turns(count: int, saver: str, folder: str) -> PeerTurns:
    """``count`` sequential ``invoke`` calls on one thread; ``saver``: memory or sqlite."""
    conn: sqlite3.Connection | None = None
    if saver == "sqlite":
        conn = sqlite3.connect(Path(folder) / "langgraph.db", check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        checkpointer: Any = SqliteSaver(conn)
    else:
        checkpointer = InMemorySaver()
    try:
        graph = _graph(checkpointer)
        config = {"configurable": {"thread_id": "bench"}}
        for _ in range(min(WARM_TURNS, count)):
            graph.invoke({"messages": [HumanMessage(content="ping")]}, config)
        tenth = max(1, count // 10)
        stamps = [time.perf_counter()]
        for i in range(count):
            result = graph.invoke({"messages": [HumanMessage(content="ping")]}, config)
            if (i + 1) % tenth == 0:
                stamps.append(time.perf_counter())
        if result["messages"][-1].content != "ok":
            raise RuntimeError("langgraph: the node did not answer 'ok'")
        expected = 2 * (count + min(WARM_TURNS, count))
        if len(result["messages"]) != expected:
            raise RuntimeError(f"langgraph: {len(result['messages'])} messages, not {expected}")
    finally:
        if conn is not None:
            conn.close()
    return PeerTurns(
        per_second=count / (stamps[-1] - stamps[0]),
        first_tenth_per_second=tenth / (stamps[1] - stamps[0]),
        last_tenth_per_second=tenth / (stamps[-1] - stamps[-2]),
    )
