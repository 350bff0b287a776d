"""The INA wire format and the P4Info: scapy layer, struct codec and names, without root."""

from __future__ import annotations

import ast
import re
import struct
from pathlib import Path

import numpy as np
import pytest
from finsy.proto import p4i
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from dataplane import frame as wire
from dataplane.frame import (
    ACK,
    CONTROL,
    DATA,
    FRAME_LEN,
    INA_UDP_PORT,
    OFF_UDP,
    PROBE,
    RESULT,
    SHORT_FRAME_LEN,
    SHORT_UDP_LEN,
    Endpoint,
    InaHeader,
    K,
    build_frame,
    ip_bytes,
    mac_bytes,
)
from dataplane.p4build import HOW_TO_GET_P4C, compile_for_bmv2, compiler_path
from dataplane.packet import INA
from dataplane.pipeline import COUNTERS, slot_of
from dataplane.schema import P4INFO_PATH, Schema, SchemaError, load_p4info

P4SRC = Path(__file__).resolve().parents[2] / "p4src"
SRC = Endpoint(mac_bytes("02:00:00:00:00:01"), ip_bytes("10.0.0.1"))
DST = Endpoint(mac_bytes("02:00:00:00:00:02"), ip_bytes("10.0.0.2"))


def test_scapy_layer_matches_the_struct_codec() -> None:
    elems = np.arange(-K // 2, K // 2, dtype=np.int32)
    header = InaHeader(
        job=3, task=1, flags=DATA, flow_id=7, next_node=9, frag_id=70000, count=2, aux=0
    )
    src = Endpoint(mac_bytes("02:00:00:00:00:01"), ip_bytes("10.0.0.1"))
    dst = Endpoint(mac_bytes("02:00:00:00:00:02"), ip_bytes("10.0.0.2"))
    raw = build_frame(src, dst, header, elems.astype(">i4").tobytes())
    assert len(raw) == FRAME_LEN
    assert int.from_bytes(raw[OFF_UDP : OFF_UDP + 2], "big") == 7, "UDP source port = flow id"

    pkt = Ether(raw)
    recomputed = pkt[IP].copy()
    del recomputed.chksum
    assert IP(bytes(recomputed)).chksum == pkt[IP].chksum
    ina = pkt[INA]
    assert (
        ina.job,
        ina.task,
        ina.flags,
        ina.flow_id,
        ina.next_node,
        ina.frag_id,
        ina.count,
        ina.k,
    ) == (3, 1, DATA, 7, 9, 70000, 2, K)
    assert ina.elements == elems.tolist()

    built = (
        Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
        / IP(src="10.0.0.1", dst="10.0.0.2", id=0, ttl=64)
        / UDP(sport=7, dport=INA_UDP_PORT, chksum=0)
        / INA(
            job=3,
            task=1,
            flags="data",
            flow_id=7,
            next_node=9,
            frag_id=70000,
            count=2,
            elements=elems.tolist(),
        )
    )
    assert bytes(built) == raw


def test_scapy_layer_names_flags_and_gives_elements_to_data_and_results_only() -> None:
    pkt = INA(flags=CONTROL)
    assert pkt.sprintf("%INA.flags%") == "control"
    assert len(bytes(pkt)) == 20 and INA(bytes(pkt)).k == 0
    for kind in (DATA, RESULT):
        assert len(bytes(INA(flags=kind))) == 20 + 4 * K and INA(bytes(INA(flags=kind))).k == K


@pytest.mark.parametrize("kind", [ACK, PROBE, CONTROL])
def test_a_kind_without_elements_is_a_short_frame_the_scapy_layer_reads(kind: int) -> None:
    header = InaHeader(3, 1, kind, 7, 9, 70000, 2, aux=5)
    raw = build_frame(SRC, DST, header, bytes(4 * K))
    assert len(raw) == SHORT_FRAME_LEN == 14 + 20 + SHORT_UDP_LEN
    packet = Ether(raw)
    assert packet[UDP].len == SHORT_UDP_LEN and packet[IP].len == 20 + SHORT_UDP_LEN
    assert (packet[INA].flags, packet[INA].k, packet[INA].aux) == (kind, 0, 5)
    assert not packet[INA].elements


def test_slot_is_the_fragment_id_mod_the_region_so_neighbours_never_share_one() -> None:
    assert slot_of(0x01020304, 100, 7) == 100 + 0x01020304 % 7
    assert slot_of(5, 0, 1) == 0
    for count in (1, 7, 4096):
        ids = range(4096 - count // 2, 4096 + count)  # across an aligned block of `count`
        window = [slot_of(f, 0, count) for f in ids[:count]]
        assert sorted(window) == list(range(count))


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
        local = name.removeprefix("InaIngress.").removeprefix("InaEgress.")
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
        "over it after `make p4`"
    )


# *** sizes: ina.p4 and the one Python module that holds them

ROOT = P4SRC.parent
# ina.p4's names that are the program's own business (verdicts, clone plumbing): no Python twin.
P4_INTERNAL = re.compile(r"V_\w+|PKT_INSTANCE_TYPE_\w+|FL_\w+")


def _p4_sizes() -> dict[str, int]:
    """Every `#define NAME number` and `const bit<N> NAME = number;` of ina.p4."""
    program = (P4SRC / "ina.p4").read_text()
    found = dict(re.findall(r"^#define (\w+) (\w+)", program, re.MULTILINE))
    found |= dict(re.findall(r"^const bit<\d+> (\w+) = (\w+);", program, re.MULTILINE))
    return {name: int(value, 0) for name, value in found.items() if not P4_INTERNAL.fullmatch(name)}


def _p4_header_bits(name: str) -> list[int]:
    """Field widths of `header NAME { ... }` in ina.p4, in order."""
    program = (P4SRC / "ina.p4").read_text()
    body = re.search(rf"header {name} \{{(.*?)\}}", program, re.DOTALL)
    assert body, name
    sizes = _p4_sizes()  # a width may be a #define (HALF_BITS)
    return [
        int(bits) if bits.isdigit() else sizes[bits]
        for bits in re.findall(r"bit<(\w+)>", body.group(1))
    ]


def test_every_size_in_ina_p4_is_the_wire_modules() -> None:
    """One value per size: what ina.p4 defines is what dataplane.frame says, name by name."""
    expected = {
        "K": wire.K,
        "MAX_PIPES": wire.MAX_PIPES,
        "MAX_JOBS": wire.MAX_JOBS,
        "SLOTS_PER_PIPE": wire.SLOTS_PER_PIPE,
        "CELLS": wire.MAX_PIPES * wire.SLOTS_PER_PIPE,
        "VALUE_CELLS": wire.MAX_PIPES * wire.SLOTS_PER_PIPE * 2,  # a slot's two halves
        "HALF_BITS": 16 * wire.K,
        "PORTS": wire.PORTS,
        "STALE_AFTER_US": round(wire.STALE_AFTER_SECONDS * 1_000_000),
        "BMV2_QUEUE_DEPTH": wire.BMV2_QUEUE_DEPTH,
        "MAX_FAN_IN": wire.MAX_FAN_IN,
        "ETHERTYPE_IPV4": wire.ETHERTYPE_IPV4,
        "ETHERTYPE_LLDP": wire.ETHERTYPE_LLDP,
        "CPU_PORT": wire.CPU_PORT,
        "PROTO_UDP": wire.PROTO_UDP,
        "INA_UDP_PORT": wire.INA_UDP_PORT,
        "INA_UDP_LEN": wire.INA_UDP_LEN,
        "SHORT_UDP_LEN": wire.SHORT_UDP_LEN,
        "FLAG_DATA": wire.DATA,
        "FLAG_RESULT": wire.RESULT,
        "FLAG_CONTROL": wire.CONTROL,
        "FLAG_ACK": wire.ACK,
        "FLAG_PROBE": wire.PROBE,
        "FLAG_CONGESTED": wire.CONGESTED,
        "FLAG_KIND": wire.KIND,
        "AUX_RETRANSMITTED": wire.RETRANSMITTED,
        "HELD": wire.HELD,
        "NAMED": wire.NAMED,
    }
    assert _p4_sizes() == expected


def test_header_layouts_in_ina_p4_are_the_wire_modules() -> None:
    assert sum(_p4_header_bits("ethernet_t")) == 8 * wire.OFF_IP
    assert sum(_p4_header_bits("ipv4_t")) == 8 * (wire.OFF_UDP - wire.OFF_IP)
    assert sum(_p4_header_bits("udp_t")) == 8 * (wire.OFF_INA - wire.OFF_UDP)
    ina = _p4_header_bits("ina_t")
    assert sum(ina) == 8 * wire.INA_HEADER_LEN == 8 * wire.INA_HEADER.size
    # field by field, the struct codec reads what the parser extracts
    codec = [8 * struct.calcsize("!" + code) for code in wire.INA_HEADER.format.lstrip("!")]
    assert codec == ina
    assert _p4_header_bits("ina_data_t") == [16 * wire.K] * 2
    assert wire.FRAME_LEN == wire.OFF_ELEMS + 4 * wire.K


def test_the_p4info_widths_are_the_wire_modules() -> None:
    """The member bitmap is MAX_FAN_IN bits wide (one bit per merged flow), flow-id generations
    are the `generation` match field's values, and every per-pipe or per-port array is sized
    like the Python twin."""
    p4info = load_p4info(P4INFO_PATH)
    aggregate = next(a for a in p4info.actions if a.preamble.name == "InaIngress.aggregate")
    widths = {p.name: p.bitwidth for p in aggregate.params}
    assert widths["member"] == widths["full"] == wire.MAX_FAN_IN >= 64
    bitmap = next(r for r in p4info.registers if r.preamble.name == "InaIngress.slot_bitmap")
    assert bitmap.type_spec.bitstring.bit.bitwidth == wire.MAX_FAN_IN
    assert bitmap.size == wire.MAX_PIPES * wire.SLOTS_PER_PIPE
    slots = next(t for t in p4info.tables if t.preamble.name == "InaIngress.job_slots")
    generation = next(f for f in slots.match_fields if f.name == "generation")
    assert 1 << generation.bitwidth == wire.GENERATIONS
    assert wire.FLOW_IDS_PER_GENERATION * wire.GENERATIONS == 1 << 16
    sizes = {c.preamble.name.removeprefix("InaIngress."): c.size for c in p4info.counters}
    assert sizes == COUNTERS
    assert sizes["forged"] == wire.MAX_JOBS and sizes["port_packets"] == wire.PORTS


# Names of the wire module that no other module may set: each has one value, in dataplane.frame.
WIRE_NAMES = frozenset(
    {
        "K",
        "MAX_PIPES",
        "MAX_JOBS",
        "SLOTS_PER_PIPE",
        "MAX_FAN_IN",
        "PORTS",
        "CPU_PORT",
        "INA_UDP_PORT",
        "INA_UDP_LEN",
        "INA_HEADER_LEN",
        "FRAME_LEN",
        "STALE_AFTER_SECONDS",
        "GENERATIONS",
        "FLOW_IDS_PER_GENERATION",
        "ETHERTYPE_IPV4",
        "ETHERTYPE_LLDP",
        "ECN_CE",
        "PROTO_UDP",
    }
)
# Same names, other meanings: RFC 6298's variance factor, the ports of a generated pool switch.
NOT_WIRE = {("dataplane/rto.py", "K"), ("controller/tools/bench/atro.py", "PORTS")}


def _module_sets(path: Path) -> set[str]:
    """Names a module assigns at its top level."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AnnAssign)
            else []
        )
        for target in targets:
            for name in ast.walk(target):
                if isinstance(name, ast.Name):
                    names.add(name.id)
    return names


def test_no_module_but_the_wire_module_sets_a_wire_size() -> None:
    wire_path = Path(wire.__file__)
    offenders = []
    for package in ("controller", "dataplane", "mininet"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path == wire_path:
                continue
            relative = path.relative_to(ROOT).as_posix()
            offenders += [
                f"{relative}: {name}"
                for name in sorted(_module_sets(path) & WIRE_NAMES)
                if (relative, name) not in NOT_WIRE
            ]
    assert offenders == [], "import these from dataplane.frame instead"
    assert vars(wire).keys() >= WIRE_NAMES


def test_the_wire_module_imports_nothing_of_ours() -> None:
    """The bottom layer: dataplane/ and controller/ both import it, it imports neither."""
    tree = ast.parse(Path(wire.__file__).read_text())
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    } | {
        node.module.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
    }
    assert not imported & {"controller", "dataplane", "mininet", "tests"}


def test_the_data_plane_imports_nothing_of_the_controller():
    """dataplane/ is the switch and host side: it stands on its own (the controller may
    import it, never the other way round)."""
    offenders = []
    for path in sorted((Path(__file__).resolve().parents[2] / "dataplane").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            offenders += [
                f"{path.name}: {n}"
                for n in names
                if n == "controller" or n.startswith("controller.")
            ]
    assert not offenders, offenders
