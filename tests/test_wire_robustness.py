"""Crafted message bytes are refused in one line (a WireError, a ProtocolViolation at an
endpoint, a ``refused`` line at a deployed party), never a RuntimeError, RecursionError or
MemoryError: shapes whose element count overflows, negative or absurd dimensions, headers
nested 200,000 deep, integers of thousands of digits, truncated frames."""

from __future__ import annotations

import json
import struct

import pytest
import torch

from fedgl.federation.codec import MAX_DIM, Encoded, WireError, decode, encode
from fedgl.federation.protocol import Arr, Endpoint, ProtocolViolation, handles


def _message(header: bytes | str, *buffers: bytes) -> bytes:
    head = header.encode() if isinstance(header, str) else header
    out = b"FGW1" + struct.pack("<I", len(head)) + head
    for b in buffers:
        out += struct.pack("<Q", len(b)) + b
    return out


def _array(shape, kind="$T", dtype="float32", buffers=(b"",)) -> bytes:
    node = {kind: 0, "dtype": dtype if kind == "$T" else "<f4", "shape": shape}
    return _message(json.dumps({"type": "t.add", "payload": {"$D": [["x", node]]}}), *buffers)


DEEP = 200_000
CRAFTED = {
    # 2^62 * 4 elements: the int64 product wraps to 0, which matched the empty buffer
    "product wraps int64 (tensor)": _array([2**62, 4]),
    "product wraps int64 (numpy)": _array([2**62, 4], kind="$N"),
    "product beyond int64, each dim allowed": _array([MAX_DIM, MAX_DIM, MAX_DIM]),
    "zero elements, absurd dim": _array([0, 10**30]),
    "negative dim": _array([-1, 4]),
    "nine dims": _array([1] * 9),
    "dim not an integer": _array([2.5]),
    "header nested 200,000 deep (lists)": _message(
        '{"type":"t.add","payload":' + "[" * DEEP + "]" * DEEP + "}"),
    "header nested 200,000 deep (objects)": _message(
        '{"type":"t.add","payload":' + '{"a":' * DEEP + "1" + "}" * DEEP + "}"),
    "integer of 5000 digits": _message('{"type":"t.add","payload":' + "9" * 5000 + "}"),
    "buffer index of 5000 digits": _message(
        '{"type":"t.add","payload":{"$B":' + "9" * 5000 + "}}"),
    "not UTF-8": _message(b'{"type":"t.add","payload":"\xff"}'),
    "only the magic": b"FGW1",
    "magic and one byte": b"FGW1\x00",
    "header length beyond the message": b"FGW1" + struct.pack("<I", 1 << 20) + b"{}",
    "buffer length beyond the message": _message('{"type":"t","payload":null}')
    + struct.pack("<Q", 1 << 62),
    "size does not match the shape": _array([3, 4], buffers=(b"\x00" * 47,)),
}


class _Adder:
    total = 0.0

    @handles("t.add", schema={"x": Arr(ndim=2)})
    def add(self, x):
        self.total += float(x.sum())


@pytest.mark.parametrize("name", sorted(CRAFTED))
def test_crafted_bytes_are_one_line_refusals(name):
    raw = CRAFTED[name]
    with pytest.raises(WireError) as err:
        decode(Encoded.from_bytes(raw))
    assert "\n" not in str(err.value)
    role = _Adder()
    endpoint = Endpoint(role, "client 0")
    with pytest.raises(ProtocolViolation, match="client 0 refused a message: malformed") as err:
        endpoint.handle(Encoded.from_bytes(raw) if raw[:4] == b"FGW1" and len(raw) >= 8
                        and _frames_ok(raw) else _Raw(raw), "train")
    assert "\n" not in str(err.value) and role.total == 0.0


def _frames_ok(raw: bytes) -> bool:
    try:
        Encoded.from_bytes(raw)
    except WireError:
        return False
    return True


class _Raw(Encoded):
    """Frames that fail to split: the endpoint sees them as an undecodable message."""

    def __init__(self, raw: bytes) -> None:
        super().__init__(raw, [])


def test_an_honest_message_still_decodes():
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    msg_type, payload = decode(Encoded.from_bytes(encode("t.add", {"x": x}).to_bytes()))
    assert msg_type == "t.add" and torch.equal(payload["x"], x)
    empty = torch.zeros(0, 7)
    assert decode(encode("t.add", {"x": empty}))[1]["x"].shape == (0, 7)


@pytest.mark.parametrize("name", ["product wraps int64 (tensor)",
                                  "header nested 200,000 deep (lists)", "only the magic"])
def test_a_deployed_party_refuses_crafted_bytes_in_one_line(tmp_path, name):
    from fedgl.data.shard_format import write_shard
    from fedgl.deployment.party import Party
    from fedgl.privacy.identity import write_keys
    from tests.flower_helpers import tiny_shard

    roster = write_keys(tmp_path / "keys", 3)
    party = Party(write_shard(tiny_shard(1), tmp_path / "shard"),
                  tmp_path / "keys" / "client-1.key", roster)
    head, body = party.answer({"op": "message", "phase": "setup", "node_id": 1, "run_id": 1},
                              CRAFTED[name])
    assert body == b"" and "\n" not in head["refused"]
    assert head["refused"].startswith("client 1 refused a message: malformed message")
    assert "Error:" not in head["refused"]  # not a Python exception's name and text
