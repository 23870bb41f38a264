from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from corral.core.model import ZERO, Resources


def test_of_merges_and_sorts_gres() -> None:
    r = Resources.of(4, 1000, 2, [("gpu:a100", 1), ("nvme", 2), ("gpu:a100", 1)])
    assert r.gres == (("gpu:a100", 2), ("nvme", 2))
    assert r.gres_count("gpu:a100") == 2 and r.gres_count("fpga") == 0
    assert Resources.of(gres={"x": 0}).gres == ()
    assert r.gres_map == {"gpu:a100": 2, "nvme": 2}


def test_add_sub_scale() -> None:
    a = Resources.of(4, 1000, 1, {"gpu:a100": 1})
    b = Resources.of(2, 500, 1, {"gpu:a100": 1, "nvme": 1})
    assert a + b == Resources.of(6, 1500, 2, {"gpu:a100": 2, "nvme": 1})
    assert (a + b) - b == a
    assert a - a == ZERO and (a - a).is_zero()
    assert a.scale(3) == Resources.of(12, 3000, 3, {"gpu:a100": 3})
    neg = b - a
    assert not neg.nonnegative() and neg.gres == (("nvme", 1),)
    assert not (ZERO - Resources.of(cpus=1)).nonnegative()


def test_fits() -> None:
    cap = Resources.of(64, 512000, 4, {"gpu:a100": 4})
    assert Resources.of(64, 512000, 4, {"gpu:a100": 4}).fits(cap)
    assert not Resources.of(65).fits(cap)
    assert not Resources.of(mem_mb=512001).fits(cap)
    assert not Resources.of(gpus=5).fits(cap)
    assert not Resources.of(gres={"gpu:h100": 1}).fits(cap)
    assert not Resources.of(gres={"nvme": 1}).fits(cap)
    assert ZERO.fits(ZERO)


def test_tres_string() -> None:
    r = Resources.of(4, 8000, 2, {"gpu:a100": 2, "license:matlab": 1})
    assert r.tres_string(nodes=1) == (
        "cpu=4,mem=8000M,node=1,gres/gpu=2,gres/gpu:a100=2,license/matlab=1")
    assert ZERO.tres_string() == "cpu=0,mem=0M"


_res = st.builds(
    Resources.of,
    st.integers(0, 1000), st.integers(0, 10**6), st.integers(0, 8),
    st.dictionaries(st.sampled_from(["gpu:a100", "gpu:v100", "nvme"]), st.integers(0, 8)),
)


@given(_res, _res)
def test_arithmetic_laws(a: Resources, b: Resources) -> None:
    assert a + b == b + a
    assert (a + b) - b == a
    assert a.fits(a + b)
    assert (a + ZERO) == a
    assert a.fits(b) == (b - a).nonnegative()
