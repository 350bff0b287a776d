"""The INA wire format and the P4Info: scapy layer, struct codec and names, without root."""

from __future__ import annotations

import re
import zlib
from pathlib import Path

import numpy as np
import pytest
from finsy.proto import p4i
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from controller.p4build import HOW_TO_GET_P4C, compile_for_bmv2, compiler_path
from dataplane.frame import (
    CONTROL,
    DATA,
    FRAME_LEN,
    INA_UDP_PORT,
    OFF_UDP,
    Endpoint,
    InaHeader,
    K,
    build_frame,
    ip_bytes,
    mac_bytes,
)
from dataplane.packet import INA
from dataplane.pipeline import slot_of
from dataplane.schema import P4INFO_PATH, Schema, SchemaError, load_p4info

P4SRC = Path(__file__).resolve().parents[2] / "p4src"


def test_scapy_layer_matches_the_struct_codec() -> None:
    elems = np.arange(-16, 16, dtype=np.int32)
    header = InaHeader(job=3, task=1, flags=DATA, flow_id=7, next_node=9, frag_id=70000,
                       count=2, aux=0)
    src = Endpoint(mac_bytes("02:00:00:00:00:01"), ip_bytes("10.0.0.1"))
    dst = Endpoint(mac_bytes("02:00:00:00:00:02"), ip_bytes("10.0.0.2"))
    raw = build_frame(src, dst, header, elems.astype(">i4").tobytes())
    assert len(raw) == FRAME_LEN
    assert int.from_bytes(raw[OFF_UDP:OFF_UDP + 2], "big") == 7, "UDP source port = flow id"

    pkt = Ether(raw)
    recomputed = pkt[IP].copy()
    del recomputed.chksum
    assert IP(bytes(recomputed)).chksum == pkt[IP].chksum
    ina = pkt[INA]
    assert (ina.job, ina.task, ina.flags, ina.flow_id, ina.next_node, ina.frag_id, ina.count,
            ina.k) == (3, 1, DATA, 7, 9, 70000, 2, K)
    assert ina.elements == elems.tolist()

    built = (Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
             / IP(src="10.0.0.1", dst="10.0.0.2", id=0, ttl=64)
             / UDP(sport=7, dport=INA_UDP_PORT, chksum=0)
             / INA(job=3, task=1, flags="data", flow_id=7, next_node=9, frag_id=70000, count=2,
                   elements=elems.tolist()))
    assert bytes(built) == raw


def test_scapy_layer_names_flags_and_defaults_to_k_elements() -> None:
    pkt = INA(flags=CONTROL)
    assert pkt.sprintf("%INA.flags%") == "control"
    assert len(bytes(pkt)) == 20 + 4 * K


def test_slot_hash_is_zlib_crc32_of_the_big_endian_fragment_id() -> None:
    assert slot_of(0x01020304, 100, 7) == 100 + zlib.crc32(b"\x01\x02\x03\x04") % 7
    assert slot_of(5, 0, 1) == 0


def test_p4info_parses_and_is_accepted() -> None:
    p4info = load_p4info(P4INFO_PATH)
    assert isinstance(p4info, p4i.P4Info)
    Schema(p4info)


def test_p4info_missing_a_table_is_rejected() -> None:
    p4info = load_p4info(P4INFO_PATH)
    del p4info.tables[0]
    with pytest.raises(SchemaError, match="port_pipeline"):
        Schema(p4info)


def test_p4info_names_are_the_programs() -> None:
    """Every P4Info name is pinned by an @name in ina.p4 and documented in the README."""
    program = (P4SRC / "ina.p4").read_text()
    readme = (P4SRC / "README.md").read_text()
    pinned = set(re.findall(r'@name\("(\w+)"\)', program))
    p4info = load_p4info(P4INFO_PATH)
    entities = [*p4info.tables, *p4info.actions, *p4info.counters, *p4info.registers]
    for entity in entities:
        name = entity.preamble.name
        if name == "NoAction":
            continue
        local = name.removeprefix("InaIngress.")
        assert local in pinned, f"{name} has no @name in ina.p4"
        assert local in readme, f"{name} is not documented in p4src/README.md"
    for table in p4info.tables:
        for field in table.match_fields:
            assert field.name in pinned, f"{table.preamble.name}.{field.name} not pinned"


def test_controller_headers_are_the_programs() -> None:
    """packet_in / packet_out exist in ina.p4 with the P4Info's one metadata field each."""
    program = (P4SRC / "ina.p4").read_text()
    readme = (P4SRC / "README.md").read_text()
    for header in load_p4info(P4INFO_PATH).controller_packet_metadata:
        name = header.preamble.name
        assert f'@controller_header("{name}")' in program
        assert f"`{name}`" in readme
        (field,) = header.metadata
        assert re.search(rf"bit<{field.bitwidth}> {field.name};", program), field.name
        assert f"`{field.name}`" in readme


def test_p4info_without_packet_out_is_rejected() -> None:
    p4info = load_p4info(P4INFO_PATH)
    del p4info.controller_packet_metadata[1]
    with pytest.raises(SchemaError, match="packet_out"):
        Schema(p4info)


def test_checked_in_p4info_is_what_p4c_writes_for_ina_p4(tmp_path: Path) -> None:
    """One program, one P4Info: the embedded target and bmv2 serve the same ids."""
    if compiler_path() is None:
        pytest.skip(HOW_TO_GET_P4C)
    built = compile_for_bmv2(tmp_path, force=True)
    assert load_p4info(P4INFO_PATH) == load_p4info(built.p4info), (
        "p4src/ina.p4info.txtpb differs from p4c's output: copy p4src/build/ina.p4info.txtpb "
        "over it after `make p4`")
