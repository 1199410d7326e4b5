"""Server frames → ACP ``session/update`` payloads; live streams and replay share these builders.

Invariants: a tool call looks the same live and replayed (same ``toolCallId``,
title and kind); a result pairs with its call by ``toolUseId``, else with the
most recent open call (whose tool name must match when given); a result with
no call becomes a self-contained ``tool_call`` + ``tool_call_update``.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

from ..http.frames import MediaFilter

Update = dict[str, object]

TOOL_KINDS = {
    "file_read": "read",
    "file_write": "edit",
    "file_edit": "edit",
    "shell_exec": "execute",
    "grep": "search",
    "glob": "search",
    "file_list": "search",
    "web_fetch": "fetch",
}
TITLE_ARGS = ("command", "pattern", "url", "path")
OUTPUT_CAP = 500


def tool_kind(name: str) -> str:
    return TOOL_KINDS.get(name, "other")


def tool_title(name: str, tool_input: object) -> str:
    if isinstance(tool_input, dict):
        for key in TITLE_ARGS:
            value = tool_input.get(key)
            if isinstance(value, str) and value:
                return f"{name} {value[:80]}"
    return name


def text_chunk(kind: str, text: str) -> Update:
    return {"sessionUpdate": kind, "content": {"type": "text", "text": text}}


def tool_call(call_id: str, name: str, tool_input: object, status: str) -> Update:
    return {
        "sessionUpdate": "tool_call",
        "toolCallId": call_id,
        "title": tool_title(name, tool_input),
        "kind": tool_kind(name),
        "status": status,
        "rawInput": tool_input if isinstance(tool_input, dict) else {},
    }


def tool_done(call_id: str, output: str) -> Update:
    capped = output[:OUTPUT_CAP]
    return {
        "sessionUpdate": "tool_call_update",
        "toolCallId": call_id,
        "status": "completed",
        "rawOutput": capped,
        "content": [{"type": "content", "content": {"type": "text", "text": capped}}],
    }


def file_chunk(path: str) -> Update:
    """A ``file`` frame (a ``MEDIA:`` line of the reply), on a line of its own."""
    return text_chunk("agent_message_chunk", f"[file: {path}]\n")


@dataclass
class UpdateBuilder:
    """Stateful per prompt: pairs tool results with their calls, mints missing ids.

    Minted ids are random (``call-<hex>``), so two prompts of one session never
    reuse a ``toolCallId``.
    """

    open_calls: list[tuple[str, str]] = field(default_factory=list)
    """(toolCallId, tool name) of calls still waiting for a result, oldest first."""

    def live(self, frame: dict[str, object]) -> list[Update]:
        """The updates for one server frame; ``[]`` for the frames ACP drops."""
        text, use_id = frame.get("text"), frame.get("toolUseId")
        match frame.get("type"):
            case "stream" if isinstance(text, str) and text:
                return [text_chunk("agent_message_chunk", text)]
            case "thinking" if isinstance(text, str) and text:
                return [text_chunk("agent_thought_chunk", text)]
            case "tool_call":
                name, tool_input = str(frame.get("toolName") or "tool"), frame.get("toolInput")
                return [self.call(use_id, name, tool_input)]
            case "tool_result":
                return self.result(use_id, frame.get("toolName"), str(frame.get("result", "")))
            case "file":
                return [file_chunk(str(frame.get("path", "")))]
            case "error":
                return [text_chunk("agent_message_chunk", f"[error] {frame.get('error', '')}")]
            case _:
                return []

    def call(self, tool_use_id: object, name: str, tool_input: object) -> Update:
        call_id = _given(tool_use_id) or _mint()
        self.open_calls.append((call_id, name))
        return tool_call(call_id, name, tool_input, "in_progress")

    def result(self, tool_use_id: object, name: object, output: str) -> list[Update]:
        match = self._pair(tool_use_id, name)
        if match is not None:
            self.open_calls.remove(match)
            return [tool_done(match[0], output)]
        call_id = _given(tool_use_id) or _mint()
        tool_name = name if isinstance(name, str) and name else "tool"
        return [tool_call(call_id, tool_name, {}, "in_progress"), tool_done(call_id, output)]

    def _pair(self, tool_use_id: object, name: object) -> tuple[str, str] | None:
        if (given := _given(tool_use_id)) is not None:
            return next((c for c in self.open_calls if c[0] == given), None)
        if not self.open_calls:
            return None
        latest = self.open_calls[-1]
        if isinstance(name, str) and name and latest[1] != name:
            return None
        return latest


def _given(tool_use_id: object) -> str | None:
    """The server's id; empty counts as missing."""
    return tool_use_id if isinstance(tool_use_id, str) and tool_use_id else None


def _mint() -> str:
    return f"call-{secrets.token_hex(6)}"


REPLAYED_ROLES = frozenset({"user", "assistant", "error"})
"""Every other role (system rows: usage, context, notification, agent_start, agent_done;
standalone tool_call / tool_result rows) is skipped: the assistant rows' blocks carry
the tool calls with their ids and outputs."""


def replay_updates(rows: list[object]) -> list[Update]:
    """History rows (``GET /api/web/history``) → updates, with the live builders.

    Skipped: deleted rows (``deleted`` set), sub-agent rows (a ``taskId``), and
    every role outside :data:`REPLAYED_ROLES`. ``MEDIA:`` lines of assistant text
    become ``[file: …]`` chunks, as they do live.
    """
    updates: list[Update] = []
    for row in rows:
        if not isinstance(row, dict) or row.get("deleted") or row.get("taskId"):
            continue
        role, text = row.get("role"), row.get("text")
        if role not in REPLAYED_ROLES:
            continue
        if role == "user" and isinstance(text, str):
            updates.append(text_chunk("user_message_chunk", text))
        elif role == "assistant":
            updates.extend(_replay_assistant(row))
        elif role == "error" and isinstance(text, str):
            updates.append(text_chunk("agent_message_chunk", f"[error] {text}"))
    return updates


def _replay_assistant(row: dict[object, object]) -> list[Update]:
    blocks = row.get("contentBlocks")
    if not isinstance(blocks, list):
        return _replay_legacy(row)
    updates: list[Update] = []
    for index, block in enumerate(blocks):
        if not isinstance(block, dict):
            continue
        kind, text = block.get("type"), block.get("text")
        if kind == "thinking" and isinstance(text, str) and text:
            updates.append(text_chunk("agent_thought_chunk", text))
        elif kind == "text" and isinstance(text, str):
            updates.extend(reply_chunks(text))
        elif kind == "tool_use":
            updates.append(_replayed_call(row.get("id"), index, block))
    return updates


def _replay_legacy(row: dict[object, object]) -> list[Update]:
    """A row without blocks: its ``toolCalls`` first, then its text."""
    calls = row.get("toolCalls")
    updates = [
        _replayed_call(row.get("id"), index, call)
        for index, call in enumerate(calls if isinstance(calls, list) else [])
        if isinstance(call, dict)
    ]
    text = row.get("text")
    return updates + (reply_chunks(text) if isinstance(text, str) else [])


def reply_chunks(text: str) -> list[Update]:
    """Logged assistant text as the stream shows it: ``MEDIA:`` lines become ``[file: …]``."""
    media = MediaFilter()
    pieces = [*media.feed(text), *media.flush()]
    return [
        text_chunk("agent_message_chunk", value) if kind == "text" else file_chunk(value)
        for kind, value in pieces
        if value
    ]


def _replayed_call(row_id: object, index: int, block: dict[object, object]) -> Update:
    """Self-contained and completed; ``toolUseId`` (legacy: ``id``) else ``replay-<row>-<j>``."""
    use_id = block.get("toolUseId", block.get("id"))
    call_id = use_id if isinstance(use_id, str) and use_id else f"replay-{row_id}-{index}"
    name = block.get("toolName", block.get("name"))
    output = block.get("output")
    shown = (output if isinstance(output, str) else "")[:OUTPUT_CAP]
    update = tool_call(call_id, str(name or "tool"), block.get("input", {}), "completed")
    update["rawOutput"] = shown
    update["content"] = [{"type": "content", "content": {"type": "text", "text": shown}}]
    return update
