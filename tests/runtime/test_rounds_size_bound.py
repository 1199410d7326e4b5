"""The cheap size bound ``deliver`` and ``fitting`` use to skip encoding a message
(``runtime/rounds.py``): skipping is safe only if the bound is never below the size."""

from __future__ import annotations

import itertools

from halo_actors.core.state import QueuedMessage
from halo_actors.runtime.rounds import (
    ROUND_OVERHEAD_BYTES,
    fitting,
    message_bytes,
    message_bytes_at_most,
)

TEXTS = (
    "",
    "ok",
    'quote " and \\ backslash',
    "\x00\x01\x1f control",
    "é ü ß",
    "𝄞 🎉 non-BMP",
    "\u2028\u2029",
)
SOURCES = (None, "cli_1700000000000_0badcafe", "cli_1700000000000_0badcafe>c1_a1b2c3")
IMAGES = ((), ("data:image/png;base64,iVBORw0KGgo=",), ("\x7f\x00", "𝄞"))


def test_the_bound_is_never_below_the_encoded_size() -> None:
    """ "an upper bound of message_bytes, with no encoding": for text of any kind (control
    characters escaped to six bytes, multi-byte UTF-8), with or without a source and images."""
    for text, source, images in itertools.product(TEXTS, SOURCES, IMAGES):
        for repeat in (1, 50):
            message = QueuedMessage(text * repeat, images, source)
            assert message_bytes_at_most(message) >= message_bytes(message), message


def test_a_mailbox_at_the_cap_is_split_as_the_exact_size_says() -> None:
    """ "one round record under cap bytes holds" only what fits: with the cap set between
    the exact size and the bound, the exact count decides, not the bound."""
    messages = [QueuedMessage("\x01" * 100, (), None) for _ in range(3)]
    exact = ROUND_OVERHEAD_BYTES + sum(map(message_bytes, messages))
    assert fitting(messages, exact) == 3
    assert fitting(messages, exact - 1) == 2
