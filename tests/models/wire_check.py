"""Request bodies checked against the official SDKs' request types, strictly.

The SDKs describe a request as nested ``TypedDict`` s (``anthropic.types.
MessageCreateParams``, ``openai.types.chat.CompletionCreateParams``). :func:`check`
walks a decoded JSON body against such a type and lists every problem: a field the
type does not define (a misspelling), a required field missing, a wrong type, a
literal not allowed. Unions match when any member does (the error shown is the
member whose ``type``/``role`` literal fits the value).

:func:`anthropic_problems` and :func:`openai_problems` add the conversation rules the
APIs enforce: every tool call answered by its result, next, before anything else.
"""

from __future__ import annotations

import collections.abc
import types
import typing
from typing import Any

import typing_extensions
from anthropic.types.message_create_params import MessageCreateParamsStreaming
from openai.types.chat.completion_create_params import CompletionCreateParamsStreaming

_WRAPPERS = {typing_extensions.Required, typing_extensions.NotRequired, typing.ClassVar}
_SEQUENCES = {
    collections.abc.Iterable,
    collections.abc.Sequence,
    list,
    typing.List,  # noqa: UP006
}


def check(value: object, hint: Any, path: str = "$") -> list[str]:
    """Problems of ``value`` against the type ``hint`` (empty when it conforms)."""
    origin = typing_extensions.get_origin(hint)
    args = typing_extensions.get_args(hint)
    if origin is typing_extensions.Annotated or origin in _WRAPPERS:
        return check(value, args[0], path)
    if hint is Any or hint is object:
        return []
    if hint is None or hint is type(None):
        return [] if value is None else [f"{path}: expected null, got {value!r:.60}"]
    if origin in (typing.Union, types.UnionType):
        return _union(value, args, path)
    if origin is typing_extensions.Literal or origin is typing.Literal:
        return [] if value in args else [f"{path}: {value!r:.60} is not one of {args}"]
    if typing_extensions.is_typeddict(hint):
        return _typeddict(value, hint, path)
    if origin in (dict, collections.abc.Mapping, typing.Dict):  # noqa: UP006
        if not isinstance(value, dict):
            return [f"{path}: expected an object"]
        return [p for k, v in value.items() for p in check(v, args[1], f"{path}.{k}")]
    if origin in _SEQUENCES or getattr(hint, "__name__", "") == "SequenceNotStr":
        if not isinstance(value, list):
            return [f"{path}: expected an array, got {type(value).__name__}"]
        inner = args[0] if args else Any
        return [p for i, v in enumerate(value) for p in check(v, inner, f"{path}[{i}]")]
    if hint is str:
        return [] if isinstance(value, str) else [f"{path}: expected a string"]
    if hint is bool:
        return [] if isinstance(value, bool) else [f"{path}: expected a boolean"]
    if hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
        return [] if ok else [f"{path}: expected an integer"]
    if hint is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return [] if ok else [f"{path}: expected a number"]
    if isinstance(hint, typing.TypeVar | typing.ForwardRef):
        return []
    return [f"{path}: the checker does not know the type {hint!r}"]


def _union(value: object, members: tuple[Any, ...], path: str) -> list[str]:
    """Any member will do; else the problems of the member that came closest (its tag
    fits the value, and its first problem lies deepest)."""
    tried: list[tuple[bool, int, list[str]]] = []
    for member in members:
        problems = check(value, member, path)
        if not problems:
            return []
        depth = max(len(p.split(":", 1)[0]) for p in problems)
        tried.append((_fits_tag(value, member), depth, problems))
    return max(tried, key=lambda t: (t[0], t[1]))[2] if tried else [f"{path}: empty union"]


def _fits_tag(value: object, member: Any) -> bool:
    if not (isinstance(value, dict) and typing_extensions.is_typeddict(member)):
        return False
    hints = typing_extensions.get_type_hints(member)
    for tag in ("type", "role"):
        if tag in value and tag in hints and not check(value[tag], hints[tag]):
            return True
    return False


def _typeddict(value: object, hint: Any, path: str) -> list[str]:
    if not isinstance(value, dict):
        return [f"{path}: expected an object ({hint.__name__})"]
    hints = typing_extensions.get_type_hints(hint, include_extras=True)
    problems = [f"{path}: unknown field {k!r} ({hint.__name__})" for k in value if k not in hints]
    problems += [
        f"{path}: missing required field {k!r} ({hint.__name__})"
        for k in hint.__required_keys__
        if k not in value
    ]
    for key, item in value.items():
        if key in hints:
            problems += check(item, hints[key], f"{path}.{key}")
    return problems


# --- the two APIs ------------------------------------------------------------------


def anthropic_problems(body: object) -> list[str]:
    """``POST /v1/messages``: the SDK type, then the tool-call pairing rule."""
    problems = check(body, MessageCreateParamsStreaming)
    if problems or not isinstance(body, dict):
        return problems
    messages = body["messages"]
    for index, message in enumerate(messages):
        content = message["content"] if isinstance(message["content"], list) else []
        calls = [b["id"] for b in content if b.get("type") == "tool_use"]
        if message["role"] != "assistant" or not calls:
            continue
        following = messages[index + 1] if index + 1 < len(messages) else None
        answered = (
            [b.get("tool_use_id") for b in following["content"] if b.get("type") == "tool_result"]
            if following and following["role"] == "user" and isinstance(following["content"], list)
            else []
        )
        for call in calls:
            if call not in answered:
                problems.append(f"$.messages[{index}]: tool_use {call} has no tool_result next")
    return problems


def openai_problems(body: object) -> list[str]:
    """``POST /chat/completions``: the SDK type, then: each assistant ``tool_calls`` id is
    answered by a ``role: tool`` message, right after it, before any other message."""
    problems = check(body, CompletionCreateParamsStreaming)
    if problems or not isinstance(body, dict):
        return problems
    messages = body["messages"]
    for index, message in enumerate(messages):
        if message["role"] != "assistant" or not message.get("tool_calls"):
            continue
        wanted = [c["id"] for c in message["tool_calls"]]
        answered = []
        for following in messages[index + 1 :]:
            if following["role"] != "tool":
                break
            answered.append(following["tool_call_id"])
        for call in wanted:
            if call not in answered:
                problems.append(f"$.messages[{index}]: tool call {call} has no tool message next")
    for index, message in enumerate(messages):
        if message["role"] == "tool":
            previous = [m for m in messages[:index] if m["role"] != "tool"]
            if not previous or previous[-1]["role"] != "assistant":
                problems.append(f"$.messages[{index}]: a tool message not after a call")
    return problems
