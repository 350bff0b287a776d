"""Scapy layer for the INA header (p4src/README.md), for tests and packet inspection.

`Ether()/IP()/UDP(sport=FLOW_ID, dport=INA_UDP_PORT)/INA(...)` builds a packet; UDP destination
port INA_UDP_PORT dissects as INA (the source port is the flow id, so it names no protocol).
"""

from __future__ import annotations

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

from dataplane.frame import ACK, CONTROL, DATA, INA_UDP_PORT, PROBE, RESULT, K

FLAG_NAMES = {DATA: "data", RESULT: "result", CONTROL: "control", ACK: "ack", PROBE: "probe"}


class INA(Packet):
    """INA header followed by K signed 32-bit elements."""

    name = "INA"
    fields_desc = [  # noqa: RUF012 (scapy reads this class attribute)
        ShortField("job", 0),
        ByteField("task", 0),
        ByteEnumField("flags", DATA, FLAG_NAMES),
        ShortField("flow_id", 0),
        ShortField("next_node", 0),
        IntField("frag_id", 0),
        ShortField("count", 1),
        ShortField("k", K),
        IntField("aux", 0),
        # Always K elements on the wire: `k` is a claim the switch checks, not a length.
        # scapy's hint asks for fields as the default; it is the values.
        FieldListField(
            "elements",
            [0] * K,  # type: ignore[list-item]
            SignedIntField("", 0),
            count_from=lambda _: K,
            max_count=K,  # scapy stops a list at 100 items unless told
        ),
    ]


bind_layers(UDP, INA, dport=INA_UDP_PORT)
