from __future__ import annotations

import pytest

from corral.core.parse.errors import ParseError
from corral.core.parse.gres import (
    GresRequest,
    format_gres,
    gpu_request,
    parse_gpus,
    parse_gres,
)


@pytest.mark.parametrize(
    ("text", "reqs"),
    [
        ("gpu", (GresRequest("gpu"),)),
        ("gpu:2", (GresRequest("gpu", None, 2),)),
        ("gpu:a100", (GresRequest("gpu", "a100", 1),)),
        ("gpu:a100:2", (GresRequest("gpu", "a100", 2),)),
        ("gres/gpu:a100:2", (GresRequest("gpu", "a100", 2),)),
        ("gpu:3g.20gb:1", (GresRequest("gpu", "3g.20gb", 1),)),
        ("gpu:a100:2,nvme:1", (GresRequest("gpu", "a100", 2), GresRequest("nvme", None, 1))),
        ("bandwidth:2k", (GresRequest("bandwidth", None, 2048),)),
        ("gpu:0", (GresRequest("gpu", None, 0),)),
        ("none", ()),
    ],
)
def test_parse_gres(text: str, reqs: tuple[GresRequest, ...]) -> None:
    assert parse_gres(text) == reqs


@pytest.mark.parametrize(
    ("text", "fragment"),
    [("", "empty GRES"), ("gpu:a100:x", "count 'x'"), ("gpu:a:b:c", "too many ':'"),
     ("gpu,,nvme", "empty item"), ("9gpu", "resource name '9gpu'"), ("gpu:a$:1", "type 'a$'")],
)
def test_parse_gres_errors(text: str, fragment: str) -> None:
    with pytest.raises(ParseError) as ei:
        parse_gres(text)
    assert fragment in str(ei.value)


@pytest.mark.parametrize(
    ("text", "reqs"),
    [
        ("2", (GresRequest("gpu", None, 2),)),
        ("a100:2", (GresRequest("gpu", "a100", 2),)),
        ("gpu:a100:2", (GresRequest("gpu", "a100", 2),)),
        ("a100:1,v100:1", (GresRequest("gpu", "a100", 1), GresRequest("gpu", "v100", 1))),
    ],
)
def test_parse_gpus(text: str, reqs: tuple[GresRequest, ...]) -> None:
    assert parse_gpus(text) == reqs


@pytest.mark.parametrize("text", ["", "a100", "a100:x", "a:b:c", "1,"])
def test_parse_gpus_errors(text: str) -> None:
    with pytest.raises(ParseError, match="GPU specification"):
        parse_gpus(text)


def test_gpu_request_folds_into_jobspec_fields() -> None:
    assert gpu_request(parse_gres("gpu:a100:2,nvme:1,fpga:xilinx:1")) == (
        2, "a100", (("fpga:xilinx", 1), ("nvme", 1)))
    assert gpu_request(parse_gres("gpu:1,gpu:1")) == (2, None, ())
    with pytest.raises(ParseError, match="one GPU type per job"):
        gpu_request(parse_gpus("a100:1,v100:1"), "a100:1,v100:1")


def test_format_gres_round_trip() -> None:
    for text in ["gpu", "gpu:2", "gpu:a100:2,nvme:3", "gpu:a100:1"]:
        assert format_gres(parse_gres(text)) == text
