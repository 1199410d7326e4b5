"""The model-facing conversation: messages made of typed content blocks.

These Structs travel inside events (an assistant reply is logged with its
blocks) and are what a session's conversation fold produces. They are plain
data with no behaviour beyond small helpers; repair lives in ``agent.repair``.
"""

from __future__ import annotations

from typing import Literal

import msgspec


class _Block(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", rename="camel", gc=False):
    """Base of the content blocks (one tagged union)."""


class TextBlock(_Block, frozen=True, tag="text"):
    text: str


class ThinkingBlock(_Block, frozen=True, tag="thinking"):
    text: str
    signature: str = ""
    """The model API's proof that the text is its own (kept: some APIs need it back)."""
    redacted: str = ""
    """An encrypted thinking block, passed back as it came (``text`` is then empty)."""


class ImageBlock(_Block, frozen=True, tag="image"):
    data: str
    """Base64 data or a URL, passed to the model as given."""
    media_type: str = "image/png"


class ToolUseBlock(_Block, frozen=True, tag="tool_use"):
    id: str
    name: str
    input: dict[str, object] = msgspec.field(default_factory=dict)


class ToolResultBlock(_Block, frozen=True, tag="tool_result"):
    tool_use_id: str
    content: str
    is_error: bool = False


Block = TextBlock | ThinkingBlock | ImageBlock | ToolUseBlock | ToolResultBlock


class Message(msgspec.Struct, frozen=True, kw_only=True, rename="camel", gc=False):
    role: Literal["user", "assistant"]
    content: tuple[Block, ...]

    def text(self) -> str:
        """The concatenated text blocks (what a person would call the message)."""
        return "".join(b.text for b in self.content if isinstance(b, TextBlock))

    def tool_uses(self) -> tuple[ToolUseBlock, ...]:
        return tuple(b for b in self.content if isinstance(b, ToolUseBlock))


def user_text(text: str, images: tuple[str, ...] = ()) -> Message:
    if not images:  # the usual message: no generator, no list
        return Message(role="user", content=(TextBlock(text=text),))
    return Message(role="user", content=(TextBlock(text=text), *map(_image, images)))


def _image(data: str) -> ImageBlock:
    return ImageBlock(data=data)


CHARS_PER_TOKEN = 4
"""The size estimate's rule of thumb."""

MESSAGE_OVERHEAD_CHARS = 24
"""What a message adds around its blocks in a model request (role, brackets)."""


def block_chars(block: Block) -> int:
    """Characters ``block`` takes in a model request (its JSON form)."""
    return len(msgspec.json.encode(block))


def message_chars(message: Message) -> int:
    return MESSAGE_OVERHEAD_CHARS + sum(map(block_chars, message.content))
