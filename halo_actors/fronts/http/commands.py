"""Slash commands a person types into ``/api/web/chat``.

- ``/session new``: mint and create a root session in the caller's namespace, make
  it the active session, answer ``session`` (the old one), ``switch`` (the new
  one), ``complete``;
- ``/session switch <id>``: make ``<id>`` the active session (safe id, owned by the
  token; an unknown owned id is created by its first chat), same frames;
- ``/compact``: compact the session now when idle (stream to the end of that run),
  else at the end of the current turn (answer ``queued``);
- ``/tree``: the session's tree as one ``stream`` frame of text, then ``complete``;
- ``/help``: the list of these commands as one ``stream`` frame, then ``complete``.

``/session switch`` to an id that does not exist yet also says, in a ``stream``
frame, that the next message starts it as a new session.

Frames these commands build take the log's current sequence number as their id.
Any other text starting with ``/`` is an ordinary message for the agent.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from functools import partial
from typing import Literal

from ...core import ids
from ...runtime.supervisor import Supervisor
from .addressing import Caller, check_session_id
from .app import Front
from .errors import ApiError
from .frames import Frame, complete_frame, session_frame, switch_frame, text_frame
from .remote import describe_tree_from_log, owned_here, reader_for
from .sse import StreamPlan
from .streams import FixedPlan, RunPlan

USAGE = "usage: /session new | /session switch <id> (/help lists every command)"
HELP = """Commands:
  /help                 this list
  /session new          start a new session and make it the active one
  /session switch <id>  make <id> the active session (an id that does not exist yet
                        is started by your next message)
  /compact              compact this session's conversation (now when idle, else
                        at the end of the current turn)
  /tree                 this session's tree, with each session's state
Any other text, also one starting with /, is a message for the agent.
"""


@dataclass(frozen=True)
class Command:
    name: Literal["session_new", "session_switch", "compact", "tree", "help"]
    arg: str = ""


def parse_command(message: str) -> Command | None:
    match message.split():
        case ["/session", "new"]:
            return Command("session_new")
        case ["/session", "switch", target]:
            return Command("session_switch", target)
        case ["/session", *_]:
            raise ApiError(400, USAGE)
        case ["/compact"]:
            return Command("compact")
        case ["/tree"]:
            return Command("tree")
        case ["/help"]:
            return Command("help")
        case _:
            return None


async def command_stream(
    front: Front,
    caller: Caller,
    sup: Supervisor,
    workspace: str,
    session_id: str,
    command: Command,
) -> StreamPlan:
    """The stream plan answering ``command`` (argument errors raise before any stream)."""
    match command.name:
        case "session_new":
            return FixedPlan(partial(_session_new, front, caller, sup, workspace, session_id))
        case "session_switch":
            target = check_session_id(caller, command.arg)
            front.active.set(workspace, caller, target)
            frames = [switch_frame(0, target)]
            if not (await reader_for(sup, target)).exists(target):  # its owner, or the log
                note = f"session {target} does not exist yet: your next message starts it\n"
                frames.append(text_frame(0, note))
            return FixedPlan(partial(_fixed, sup, session_id, frames))
        case "compact":
            if not sup.exists(session_id):
                return FixedPlan(partial(_fixed, sup, session_id, []))
            return RunPlan(
                sup,
                session_id,
                partial(sup.compact, session_id),
                front.settings.subscriber_buffer,
            )
        case "tree":
            if sup.exists(session_id) or await owned_here(sup, session_id):
                text = render_tree(sup.describe_tree, sup.exists(session_id), session_id)
            else:  # another node owns the tree: from the shared log
                rows = await describe_tree_from_log(sup, ids.root_of(session_id))
                exists = any(row["sessionId"] == session_id for row in rows)
                text = render_tree(lambda _: rows, exists, session_id)
            return FixedPlan(partial(_fixed, sup, session_id, [text_frame(0, text)]))
        case "help":
            return FixedPlan(partial(_fixed, sup, session_id, [text_frame(0, HELP)]))


async def _session_new(
    front: Front,
    caller: Caller,
    sup: Supervisor,
    workspace: str,
    session_id: str,
    stack: AsyncExitStack,
) -> list[Frame]:
    new = await sup.create_session(namespace=caller.namespace, access=caller.token.access)
    front.active.set(workspace, caller, new)
    return await _fixed(sup, session_id, [switch_frame(0, new)], stack)


async def _fixed(
    sup: Supervisor, session_id: str, middle: list[Frame], stack: AsyncExitStack
) -> list[Frame]:
    """``session``, the command's own frames, ``complete``, all at the current seq."""
    seq = sup.log.last_seq
    frames = [session_frame(seq, session_id), *middle, complete_frame(seq)]
    return [Frame(seq, f.payload) for f in frames]


def render_tree(
    describe: Callable[[str], list[dict[str, object]]], exists: bool, session_id: str
) -> str:
    if not exists:
        return "No session yet: the first message creates it.\n"
    root = ids.root_of(session_id)
    lines = []
    for row in describe(root):
        sid = str(row["sessionId"])
        indent = "  " * ids.depth(sid)
        mark = " (this session)" if sid == session_id else ""
        label = row["title"] or row["agentId"]
        queued = f", {row['queued']} queued" if row["queued"] else ""
        lines.append(f"{indent}- {sid} [{row['status']}{queued}] {label}{mark}\n")
    return "".join(lines)
