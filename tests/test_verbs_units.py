"""The verbs backend without a device: state sequence, work requests, immediate, keys, config.

Where pyverbs imports (Debian python3-pyverbs here), the tests build the real pyverbs
objects (QPAttr, AHAttr, SendWR, SGE, RecvWR, WC) and read them back; tests that need
pyverbs skip with the loader's reason otherwise. Nothing here needs an RDMA device.
"""

from __future__ import annotations

import socket
import sys

import numpy as np
import pytest

import sdr
from sdr.backends.verbs.loader import device_names, load_pyverbs
from sdr.backends.verbs.qp_states import (
    RATE_LIMIT_STEP,
    UC_STEPS,
    Endpoint,
    check_port_mtu,
    gid_text,
    path_mtu,
    qp_attr_for,
    step_mask,
)
from sdr.backends.verbs.remote_keys import RemoteKey, RemoteKeys, frame, unframe
from sdr.backends.verbs.work_requests import (
    completion_kind,
    imm_from_wire,
    imm_to_wire,
    recv_wr,
    write_with_imm,
)


@pytest.fixture(scope="module")
def pv():
    try:
        return load_pyverbs()
    except sdr.TransportError as exc:
        pytest.skip(f"pyverbs not importable: {exc}")


LOCAL = Endpoint(qpn=0x11, psn=0x123, lid=3, gid=gid_text("fe80::1"))
REMOTE = Endpoint(qpn=0x22, psn=0x456, lid=7, gid=gid_text("fe80::abcd:2"))
RC_ONLY = {
    "IBV_QP_TIMEOUT",
    "IBV_QP_RETRY_CNT",
    "IBV_QP_RNR_RETRY",
    "IBV_QP_MAX_QP_RD_ATOMIC",
    "IBV_QP_MAX_DEST_RD_ATOMIC",
    "IBV_QP_MIN_RNR_TIMER",
}
BIT_FOR_FIELD = {
    "pkey_index": "IBV_QP_PKEY_INDEX",
    "port_num": "IBV_QP_PORT",
    "qp_access_flags": "IBV_QP_ACCESS_FLAGS",
    "ah_attr": "IBV_QP_AV",
    "path_mtu": "IBV_QP_PATH_MTU",
    "dest_qp_num": "IBV_QP_DEST_QPN",
    "rq_psn": "IBV_QP_RQ_PSN",
    "sq_psn": "IBV_QP_SQ_PSN",
    "rate_limit": "IBV_QP_RATE_LIMIT",
}


def test_uc_sequence_is_init_rtr_rts_with_uc_masks_only() -> None:
    assert [s.state for s in UC_STEPS] == ["IBV_QPS_INIT", "IBV_QPS_RTR", "IBV_QPS_RTS"]
    for step in (*UC_STEPS, RATE_LIMIT_STEP):
        assert not RC_ONLY & set(step.mask)
        # every field the step reads is announced by its mask bit, and nothing else
        assert {BIT_FOR_FIELD[f] for f in step.fields} == set(step.mask) - {"IBV_QP_STATE"}
    assert all("IBV_QP_STATE" in s.mask for s in UC_STEPS)


def test_step_masks_are_real_enum_values(pv) -> None:
    e = pv.enums
    init = step_mask(UC_STEPS[0], e)
    assert init == e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_ACCESS_FLAGS
    rts = step_mask(UC_STEPS[2], e)
    assert rts == e.IBV_QP_STATE | e.IBV_QP_SQ_PSN
    assert step_mask(RATE_LIMIT_STEP, e) == e.IBV_QP_RATE_LIMIT


def test_qp_attrs_for_each_step(pv) -> None:
    e = pv.enums
    kw = {"port": 1, "sgid_index": 3, "mtu": 4096, "local": LOCAL, "remote": REMOTE}
    init = qp_attr_for(pv, UC_STEPS[0], **kw)
    assert init.qp_state == e.IBV_QPS_INIT and init.port_num == 1 and init.pkey_index == 0
    assert init.qp_access_flags & e.IBV_ACCESS_REMOTE_WRITE
    rtr = qp_attr_for(pv, UC_STEPS[1], **kw)
    assert rtr.qp_state == e.IBV_QPS_RTR
    assert (rtr.dest_qp_num, rtr.rq_psn, rtr.path_mtu) == (0x22, 0x456, e.IBV_MTU_4096)
    ah = rtr.ah_attr
    assert (str(ah.dgid), ah.is_global, ah.sgid_index, ah.dlid, ah.port_num) == (
        REMOTE.gid,
        1,
        3,
        7,
        1,
    )
    rts = qp_attr_for(pv, UC_STEPS[2], **kw)
    assert rts.qp_state == e.IBV_QPS_RTS and rts.sq_psn == LOCAL.psn
    paced = qp_attr_for(pv, RATE_LIMIT_STEP, **kw, rate_kbps=10_000_000)
    assert paced.rate_limit == 10_000_000
    with pytest.raises(sdr.ConfigError, match="remote"):
        qp_attr_for(pv, UC_STEPS[1], port=1, sgid_index=0, mtu=4096, local=LOCAL)


@pytest.mark.parametrize(
    ("mtu", "name"),
    [(256, "IBV_MTU_256"), (1000, "IBV_MTU_1024"), (2048, "IBV_MTU_2048"), (4096, "IBV_MTU_4096")],
)
def test_path_mtu_fits_one_packet(pv, mtu: int, name: str) -> None:
    assert path_mtu(mtu, pv.enums) == getattr(pv.enums, name)


def test_path_mtu_beyond_4096_is_refused(pv) -> None:
    with pytest.raises(sdr.ConfigError, match="4096"):
        path_mtu(8192, pv.enums)


def test_port_active_mtu_limits_the_packet_size(pv) -> None:
    e = pv.enums
    assert check_port_mtu(1024, e.IBV_MTU_1024, e) == e.IBV_MTU_1024
    assert check_port_mtu(512, e.IBV_MTU_4096, e) == e.IBV_MTU_512
    with pytest.raises(sdr.ConfigError, match="active MTU is 1024"):
        check_port_mtu(4096, e.IBV_MTU_1024, e)


def test_gid_text_is_what_pyverbs_parses(pv) -> None:
    assert gid_text("fe80::1") == "fe80:0000:0000:0000:0000:0000:0000:0001"
    assert str(pv.addr.GID(gid_text("::ffff:10.0.0.1"))) == gid_text("::ffff:10.0.0.1")
    with pytest.raises(sdr.ConfigError):
        gid_text("not-a-gid")


def test_immediate_travels_big_endian() -> None:
    layout = sdr.ImmediateLayout()
    imm = layout.encode(1023, 5, 0xA)
    wire = imm_to_wire(imm)
    assert wire.to_bytes(4, sys.byteorder) == imm.to_bytes(4, "big")
    assert imm_from_wire(wire) == imm
    rng = np.random.default_rng(2)
    for value in rng.integers(0, 1 << 32, 200, dtype=np.uint64).tolist():
        assert imm_from_wire(imm_to_wire(value)) == value == socket.ntohl(socket.htonl(value))


def test_write_with_imm_work_request(pv) -> None:
    e = pv.enums
    kw = {"addr": 0x1000, "lkey": 0x55, "remote_addr": 0x9000, "rkey": 0x77, "imm": 0x01020304}
    wr = write_with_imm(pv, wr_id=7, length=4096, signaled=True, **kw)
    assert wr.opcode == e.IBV_WR_RDMA_WRITE_WITH_IMM
    assert (wr.wr_id, wr.num_sge, wr.send_flags) == (7, 1, e.IBV_SEND_SIGNALED)
    assert wr.imm_data == imm_to_wire(0x01020304)
    quiet = write_with_imm(pv, wr_id=8, length=0, signaled=False, **kw)  # immediate-only
    assert quiet.send_flags == 0 and quiet.num_sge == 1
    recv = recv_wr(pv, 0x30002, 0x2000, 0x66)
    assert (recv.wr_id, recv.num_sge) == (0x30002, 1)


def test_completion_kinds_from_real_wcs(pv) -> None:
    e = pv.enums
    data = pv.cq.WC(status=e.IBV_WC_SUCCESS, opcode=e.IBV_WC_RECV_RDMA_WITH_IMM,
                    wc_flags=e.IBV_WC_WITH_IMM, imm_data=imm_to_wire(99), qp_num=5)  # fmt: skip
    assert completion_kind(pv, data) == "data" and imm_from_wire(data.imm_data) == 99
    sent = pv.cq.WC(status=e.IBV_WC_SUCCESS, opcode=e.IBV_WC_RDMA_WRITE)
    assert completion_kind(pv, sent) == "send"
    failed = pv.cq.WC(status=e.IBV_WC_REM_ACCESS_ERR, opcode=e.IBV_WC_RDMA_WRITE)
    assert completion_kind(pv, failed) == f"error:{int(e.IBV_WC_REM_ACCESS_ERR)}"


def test_cts_frames_carry_address_and_rkey() -> None:
    key = RemoteKey(generation=3, slot=513, addr=0x7F00_0000_1000, rkey=0xABCDEF01, length=8 << 20)
    cts = sdr.transport.MAX_CONTROL_SIZE.to_bytes(2, "big")  # any payload travels unchanged
    assert unframe(frame(cts, key)) == (key, cts)
    assert unframe(frame(b"\x40ack")) == (None, b"\x40ack")
    for bad in (b"", b"\x01short", b"\x07xyz"):
        with pytest.raises(sdr.ProtocolError):
            unframe(bad)


def test_remote_keys_turn_offsets_into_addresses() -> None:
    keys = RemoteKeys(slot_size=1 << 20)
    keys.learn(RemoteKey(1, 2, addr=0x5000, rkey=9, length=10_000))
    assert keys.target(1, 2 * (1 << 20) + 4096, 4096) == (0x5000 + 4096, 9)
    assert keys.target(1, 2 * (1 << 20) + 8 * 4096, 0) == (0x5000, 9)  # immediate-only
    with pytest.raises(sdr.ProtocolError, match="past"):
        keys.target(1, 2 * (1 << 20) + 8192, 4096)
    with pytest.raises(sdr.ProtocolError, match="no receive key"):
        keys.target(0, 2 * (1 << 20), 10)
    keys.learn(RemoteKey(1, 2, addr=0x9000, rkey=10, length=100))  # re-bound: the latest wins
    assert keys.target(1, 2 * (1 << 20), 100) == (0x9000, 10)


def test_no_device_is_a_clear_transport_error(pv) -> None:
    try:
        names = device_names(pv)
    except sdr.TransportError as exc:
        assert str(exc).startswith("no RDMA device")
        from sdr.backends.verbs import VerbsTransport

        with pytest.raises(sdr.TransportError, match="no RDMA device"):
            VerbsTransport()
    else:
        assert names and all(isinstance(n, str) for n in names)
