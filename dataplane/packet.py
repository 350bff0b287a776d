"""Scapy layer for the INA header (p4src/README.md), for tests and packet inspection.

`Ether()/IP()/UDP(sport=FLOW_ID, dport=INA_UDP_PORT)/INA(...)` builds a packet; UDP destination
port INA_UDP_PORT dissects as INA (the source port is the flow id, so it names no protocol).
"""

from __future__ import annotations

import struct

from scapy.fields import (
    ByteEnumField,
    ByteField,
    FieldListField,
    IntField,
    ShortField,
    SignedIntField,
)
from scapy.layers.inet import UDP
from scapy.packet import Packet, bind_layers

from dataplane.frame import (
    ACK,
    CONTROL,
    DATA,
    INA_UDP_PORT,
    KIND,
    PROBE,
    RESULT,
    WITH_ELEMENTS,
    K,
)

FLAG_NAMES = {DATA: "data", RESULT: "result", CONTROL: "control", ACK: "ack", PROBE: "probe"}


class INA(Packet):
    """INA header, followed by K signed 32-bit elements on a DATA or RESULT."""

    name = "INA"
    fields_desc = [  # noqa: RUF012 (scapy reads this class attribute)
        ShortField("job", 0),
        ByteField("task", 0),
        ByteEnumField("flags", DATA, FLAG_NAMES),
        ShortField("flow_id", 0),
        ShortField("next_node", 0),
        IntField("frag_id", 0),
        ShortField("count", 1),
        # None: K on a DATA or RESULT, 0 on the kinds that carry no elements (`post_build`).
        ShortField("k", None),
        IntField("aux", 0),
        FieldListField(
            "elements",
            [],  # type: ignore[arg-type]
            SignedIntField("", 0),
            count_from=lambda pkt: pkt.k,
            max_count=K,  # scapy stops a list at 100 items unless told
        ),
    ]

    def post_build(self, pkt: bytes, pay: bytes) -> bytes:
        """Fill in `k` and, on a DATA or RESULT given no elements, K zeros."""
        if self.k is None:
            carries = self.flags & KIND in WITH_ELEMENTS
            pkt = pkt[:14] + struct.pack("!H", K if carries else 0) + pkt[16:]
            if carries and not self.elements:
                pkt += bytes(4 * K)
        return pkt + pay


bind_layers(UDP, INA, dport=INA_UDP_PORT)
