"""Wire messages: frames, versions, node specs."""

from __future__ import annotations

import pytest

from corral.controller.env import tasks_per_node_text
from corral.core.model.node import GpuSpec, NodeSpec, NumaDomain
from corral.protocol import (
    ProtocolError,
    decode_frame,
    encode_frame,
    node_spec_from_json,
    node_spec_to_json,
)


def test_frame_roundtrip_and_version() -> None:
    msgs = [{"t": "launch", "req": {"job_id": 1}}, {"t": "ack", "job_id": 2, "restarts": 0}]
    assert decode_frame(encode_frame(msgs)) == msgs
    with pytest.raises(ProtocolError, match="version"):
        decode_frame('{"v": 99, "msgs": []}')
    with pytest.raises(ProtocolError, match="'t'"):
        decode_frame('{"v": 1, "msgs": [{"x": 1}]}')
    with pytest.raises(ProtocolError, match="JSON"):
        decode_frame("{nope")


def test_node_spec_roundtrip() -> None:
    spec = NodeSpec(name="g1", sockets=2, cores_per_socket=4, threads_per_core=2, mem_mb=1000,
                    gpus=(GpuSpec(0, "a100", 40000, 0, "GPU-x"),),
                    numa=(NumaDomain(0, (0, 1, 2, 3), 500), NumaDomain(1, (4, 5, 6, 7), 500)),
                    features=frozenset({"avx2", "gpu"}), gres=(("nvme", 2),), switch="s1",
                    core_cpus=tuple((c, c + 8) for c in range(8)))
    assert node_spec_from_json(node_spec_to_json(spec)) == spec
    with pytest.raises(ProtocolError):
        node_spec_from_json({"sockets": 1})


def test_tasks_per_node_text() -> None:
    assert tasks_per_node_text([2, 2, 2, 1]) == "2(x3),1"
    assert tasks_per_node_text([4]) == "4"


def test_a_frame_with_messages_encoded_once_decodes_as_the_plain_one() -> None:
    from corral.protocol.messages import Encoded

    step = {"t": "step", "job_id": 3, "restarts": 0, "launch": {"env": {"A": "é\n\"x"}}}
    other = {"t": "cancel", "job_id": 4}
    plain = decode_frame(encode_frame([other, step, other]))
    assert decode_frame(encode_frame([other, Encoded(step), other])) == plain
    assert decode_frame(encode_frame([Encoded(step)])) == [step]
