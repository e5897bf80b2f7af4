import numpy as np
import pytest

import sdr
from sdr.key_table import LATE, MALFORMED, OUT_OF_RANGE, KeyTable, Placement
from sdr.transport import Bind, MemoryRegion

ATTR = sdr.QPAttr(mtu=1000, chunk_size=1000, max_message_size=10_000, max_messages=4,
                  generations=2)  # fmt: skip


def region(n: int) -> MemoryRegion:
    return MemoryRegion(key=1, view=memoryview(bytearray(n)))


def imm(msg: int, pkt: int) -> int:
    return ATTR.layout.encode(msg, pkt, 0)


def test_resolution_rules():
    kt = KeyTable(ATTR)
    mr = region(20_000)
    kt.bind(Bind(generation=1, slot=2, region=mr, offset=5_000, length=2_500, msg_id=7))
    base = 2 * ATTR.max_message_size
    assert kt.resolve(1, base + 1000, 1000, imm(7, 1)) == Placement(mr, 6_000)
    assert kt.resolve(1, base + 2000, 500, imm(7, 2)) == Placement(mr, 7_000)
    assert kt.resolve(0, base + 1000, 1000, imm(7, 1)) == LATE  # other generation: NULL
    assert kt.resolve(1, base + 1000, 1000, imm(8, 1)) == LATE  # other message id
    assert kt.resolve(1, base + 1000, 1000, imm(7, 2)) == MALFORMED  # imm/offset disagree
    assert kt.resolve(1, base + 2000, 1000, imm(7, 2)) == OUT_OF_RANGE  # past the binding
    assert kt.resolve(1, base + 1000, 999, imm(7, 1)) == MALFORMED  # short middle packet
    assert kt.resolve(1, 4 * ATTR.max_message_size, 1, imm(7, 0)) == OUT_OF_RANGE
    assert kt.resolve(1, -1, 1, imm(7, 0)) == OUT_OF_RANGE
    assert kt.resolve(5, base, 1, imm(7, 0)) == "stale_generation"
    assert kt.resolve(1, base, 0, imm(7, 3)) == Placement(mr, 5_000)  # imm-only packet
    kt.unbind(1, 2)
    assert kt.resolve(1, base + 1000, 1000, imm(7, 1)) == LATE
    assert kt.bound_count() == 0


def test_bind_outside_region_is_refused():
    kt = KeyTable(ATTR)
    try:
        kt.bind(Bind(generation=0, slot=0, region=region(100), offset=50, length=100, msg_id=0))
    except sdr.ConfigError as exc:
        assert "outside the registered region" in str(exc)
    else:
        raise AssertionError("bind past the region must fail")


def test_resolved_writes_never_leave_the_binding():
    rng = np.random.default_rng(3)
    kt = KeyTable(ATTR)
    mr = region(40_000)
    kt.bind(Bind(generation=0, slot=1, region=mr, offset=10_000, length=4_321, msg_id=3))
    for _ in range(5_000):
        gen = int(rng.integers(0, 3))
        roff = int(rng.integers(-10, 5 * ATTR.max_message_size))
        length = int(rng.integers(0, 2_000))
        where = kt.resolve(
            gen, roff, length, imm(int(rng.integers(0, 5)), int(rng.integers(0, 12)))
        )
        if isinstance(where, Placement):
            assert where.offset >= 10_000 and where.offset + length <= 14_321


def test_an_oversize_binding_is_a_config_error_as_in_every_backend() -> None:
    # the key table raised a bare ValueError where the verbs and offload backends raise
    # ConfigError for the same check
    from sdr.errors import ConfigError

    attr = sdr.QPAttr(mtu=1024, chunk_size="4KiB", max_message_size="16KiB")
    keys = KeyTable(attr)
    region = MemoryRegion(key=1, view=memoryview(bytearray(64 << 10)))
    with pytest.raises(ConfigError, match="exceeds slot size"):
        keys.bind(Bind(generation=0, slot=0, region=region, offset=0, length=32 << 10, msg_id=0))


def test_a_binding_is_one_record_with_named_fields() -> None:
    """The core's bind action is the record every bind takes, and it cannot be made with
    its six numbers in an order to get wrong."""
    import dataclasses

    from sdr.actions import Bind as BindAction

    assert BindAction is Bind
    mr = region(100)
    with pytest.raises(TypeError):
        Bind(0, 0, mr, 0, 10, 0)  # positional: refused
    binding = Bind(generation=0, slot=0, region=mr, offset=0, length=10, msg_id=0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        binding.length = 20  # frozen
