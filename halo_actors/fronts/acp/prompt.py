"""ACP prompt content blocks → one halo message plus images, in prompt order.

Consecutive text blocks concatenate; every other block is a paragraph of its
own: an image goes to ``images`` (as a ``data:`` URL carrying its MIME type, or
its ``uri`` when it has no data); a text resource becomes a ``[resource: <uri>]``
line and its text in a fence longer than any backtick run inside; a blob
resource becomes ``[binary resource omitted: <uri>]``; a resource link becomes
``[resource link: <name> <uri>]``. Anything else is dropped and reported in
``dropped`` (the adapter warns on stderr).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field


@dataclass
class ComposedPrompt:
    message: str
    images: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)


def _fence(text: str) -> str:
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def _paragraph(block: dict[str, object]) -> str | None:
    kind = block.get("type")
    if kind == "resource_link":
        named = [
            str(block[k]) for k in ("name", "uri") if isinstance(block.get(k), str) and block[k]
        ]
        return f"[resource link: {' '.join(named)}]"
    if kind == "resource":
        resource = block.get("resource")
        if not isinstance(resource, dict):
            return None
        uri = resource.get("uri", "")
        text = resource.get("text")
        if isinstance(text, str):
            fence = _fence(text)
            return f"[resource: {uri}]\n{fence}\n{text}\n{fence}"
        if "blob" in resource:
            return f"[binary resource omitted: {uri}]"
    return None


def _image(block: dict[str, object]) -> str | None:
    data, mime, uri = block.get("data"), block.get("mimeType"), block.get("uri")
    if isinstance(data, str) and data:
        if data.startswith("data:"):
            return data
        return f"data:{mime if isinstance(mime, str) and mime else 'image/png'};base64,{data}"
    return uri if isinstance(uri, str) and uri else None


def compose_prompt(blocks: list[object]) -> ComposedPrompt:
    composed = ComposedPrompt(message="")
    parts: list[str] = []
    text_run: list[str] = []

    def flush_text() -> None:
        if text_run:
            parts.append("".join(text_run))
            text_run.clear()

    for block in blocks:
        if not isinstance(block, dict):
            composed.dropped.append(type(block).__name__)
            continue
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            text_run.append(str(block["text"]))
            continue
        flush_text()
        if kind == "image" and (image := _image(block)) is not None:
            composed.images.append(image)
        elif (paragraph := _paragraph(block)) is not None:
            parts.append(paragraph)
        else:
            composed.dropped.append(str(kind))
    flush_text()
    composed.message = "\n\n".join(p for p in parts if p)
    return composed
