"""A fedgl message inside Flower: its encoded bytes inline in the one record (three Flower
objects with the message), a body over Flower's chunk size as an array record (chunked), both
read back exactly, and a reply in the layout of the message it answers."""

from __future__ import annotations

import os

import pytest

from tests.flower_helpers import needs_flwr


def _objects(content) -> int:
    from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects

    return len(get_all_nested_objects(content))


@needs_flwr
@pytest.mark.parametrize("size", [1, 300, 5 * 1024 * 1024])
def test_a_body_travels_inline_in_the_one_record(size: int) -> None:
    from fedgl.federation.flower.client_app import (
        INLINE_BODY,
        META,
        body_inline,
        fedgl_content,
        record_body,
    )

    assert size <= INLINE_BODY
    body = os.urandom(size)
    content = fedgl_content({"phase": "train", "refused": "x", "skip": b"no"}, body)
    assert body_inline(content) and record_body(content) == body
    assert list(content) == [META] and not content.array_records
    assert dict(content.config_records[META]) == {"phase": "train", "refused": "x",
                                                  "body": body}
    assert _objects(content) == 2   # the record dict and its record (plus the message: 3)
    tree = fedgl_content({"phase": "train"}, body, inline=False)
    assert not body_inline(tree) and record_body(tree) == body
    assert _objects(tree) >= 5      # + the array record, the array, its chunks


@needs_flwr
def test_a_body_over_the_chunk_size_goes_as_an_array_record() -> None:
    from fedgl.federation.flower.client_app import INLINE_BODY, body_inline, fedgl_content, record_body

    body = os.urandom(INLINE_BODY + 1)
    content = fedgl_content({"phase": "pretrain"}, body)
    assert not body_inline(content) and "fedgl" in content.array_records
    assert record_body(content) == body


@needs_flwr
def test_a_reply_keeps_the_layout_it_was_asked_in_and_no_body_is_no_record() -> None:
    from fedgl.federation.flower.client_app import (
        body_inline,
        fedgl_content,
        has_body,
        record_body,
        reply_content,
    )

    for inline in (True, False):
        asked = fedgl_content({"phase": "train"}, b"question", inline=inline)
        reply = reply_content(asked, {"type": "fedavg.fit"}, b"answer")
        assert body_inline(reply) is inline and record_body(reply) == b"answer"
        refusal = reply_content(asked, {"refused": "client 0 refused a message: ..."})
        assert not has_body(refusal)
        with pytest.raises(KeyError):
            record_body(refusal)
