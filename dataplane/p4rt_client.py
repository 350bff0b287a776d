"""A small synchronous P4Runtime client over the raw `finsy.proto` stubs, addressing by name.

Used by the tests, the demo and the benchmark to program one switch directly, so every RPC and
every error is visible as sent; the controller's southbound (finsy) is not needed for that.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass

import grpc
from finsy.proto import p4i, p4r, p4r_grpc, rpc_status


@dataclass
class WriteFailed(Exception):
    """A Write answered UNKNOWN: one canonical code per update, in order."""

    codes: list[grpc.StatusCode]


def _code(number: int) -> grpc.StatusCode:
    return next(c for c in grpc.StatusCode if c.value[0] == number)


def _bytes(value: int) -> bytes:
    return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")


class Client:
    """One arbitrated stream plus unary RPCs for device `device_id` at `address`."""

    def __init__(self, address: str, device_id: int, election_id: int, p4info: p4i.P4Info):
        self.channel = grpc.insecure_channel(address)
        grpc.channel_ready_future(self.channel).result(timeout=10)
        self.stub = p4r_grpc.P4RuntimeStub(self.channel)
        self.device_id = device_id
        self.election_id = election_id
        self.p4info = p4info
        self._requests: queue.Queue[p4r.StreamMessageRequest | None] = queue.Queue()
        self._stream = self.stub.StreamChannel(iter(self._requests.get, None))
        request = p4r.StreamMessageRequest()
        request.arbitration.device_id = device_id
        request.arbitration.election_id.low = election_id
        self._requests.put(request)
        self.arbitration = next(self._stream).arbitration
        # Later stream messages (PacketIns, StreamErrors) are collected by a reader thread so
        # that `stream_message` can wait with a timeout.
        self._responses: queue.Queue[p4r.StreamMessageResponse] = queue.Queue()
        threading.Thread(target=self._read_stream, daemon=True).start()

    def _read_stream(self) -> None:
        try:
            for message in self._stream:
                self._responses.put(message)
        except grpc.RpcError:
            return  # the channel closed

    def stream_message(self, timeout: float = 1.0) -> p4r.StreamMessageResponse | None:
        """The next message on the stream after the arbitration reply, or None on timeout."""
        try:
            return self._responses.get(timeout=timeout)
        except queue.Empty:
            return None

    def packet_out(self, payload: bytes, **metadata: int) -> None:
        """Send a PacketOut; `metadata` by name (the P4Info's `packet_out` header)."""
        header = next(
            h for h in self.p4info.controller_packet_metadata if h.preamble.name == "packet_out"
        )
        request = p4r.StreamMessageRequest()
        request.packet.payload = payload
        for field in header.metadata:
            request.packet.metadata.add(metadata_id=field.id, value=_bytes(metadata[field.name]))
        self._requests.put(request)

    def close(self) -> None:
        self._requests.put(None)
        self.channel.close()

    # *** pipeline

    def set_pipeline(self, device_config: bytes = b"", cookie: int = 1) -> None:
        request = p4r.SetForwardingPipelineConfigRequest(
            device_id=self.device_id,
            action=p4r.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT,
        )
        request.election_id.low = self.election_id
        request.config.p4info.CopyFrom(self.p4info)
        request.config.p4_device_config = device_config
        request.config.cookie.cookie = cookie
        self.stub.SetForwardingPipelineConfig(request, timeout=30)

    # *** entities by name

    def _table(self, name: str) -> p4i.Table:
        names = (f"InaIngress.{name}", f"InaEgress.{name}")
        return next(t for t in self.p4info.tables if t.preamble.name in names)

    def _action(self, name: str) -> p4i.Action:
        names = (f"InaIngress.{name}", f"InaEgress.{name}")
        return next(a for a in self.p4info.actions if a.preamble.name in names)

    def table_entry(
        self, table: str, match: dict[str, int | tuple[int, int]], action: str, **params: int
    ) -> p4r.Entity:
        spec = self._table(table)
        entity = p4r.Entity()
        entry = entity.table_entry
        entry.table_id = spec.preamble.id
        for field in spec.match_fields:
            value = match[field.name]
            fm = entry.match.add(field_id=field.id)
            if isinstance(value, tuple):
                fm.lpm.value, fm.lpm.prefix_len = _bytes(value[0]), value[1]
            else:
                fm.exact.value = _bytes(value)
        act = self._action(action)
        entry.action.action.action_id = act.preamble.id
        for param in act.params:
            entry.action.action.params.add(param_id=param.id, value=_bytes(params[param.name]))
        return entity

    @staticmethod
    def group(group_id: int, ports: list[int]) -> p4r.Entity:
        entity = p4r.Entity()
        group = entity.packet_replication_engine_entry.multicast_group_entry
        group.multicast_group_id = group_id
        for port in ports:
            group.replicas.add(egress_port=port, instance=1)
        return entity

    @staticmethod
    def clone_session(session: int, port: int) -> p4r.Entity:
        entity = p4r.Entity()
        entry = entity.packet_replication_engine_entry.clone_session_entry
        entry.session_id = session
        entry.replicas.add(egress_port=port, instance=1)
        return entity

    def write(self, *entities: p4r.Entity, kind: int = p4r.Update.INSERT) -> None:
        request = p4r.WriteRequest(device_id=self.device_id)
        request.election_id.low = self.election_id
        for entity in entities:
            request.updates.add(type=kind, entity=entity)
        try:
            self.stub.Write(request, timeout=10)
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.UNKNOWN:
                raise
            status = rpc_status.Status()
            for key, value in exc.trailing_metadata():
                if key == "grpc-status-details-bin":
                    status.ParseFromString(value)
            codes = []
            for detail in status.details:
                error = p4r.Error()
                detail.Unpack(error)
                codes.append(_code(error.canonical_code))
            raise WriteFailed(codes) from None

    def read(self, *entities: p4r.Entity) -> list[p4r.Entity]:
        request = p4r.ReadRequest(device_id=self.device_id)
        request.entities.extend(entities)
        return [e for reply in self.stub.Read(request, timeout=10) for e in reply.entities]

    def counter(self, name: str) -> list[int]:
        """Packet counts of counter `name`, one per index (per pipe; per job for `forged`;
        per port for `port_packets`)."""
        spec = next(c for c in self.p4info.counters if c.preamble.name == f"InaIngress.{name}")
        query = p4r.Entity()
        query.counter_entry.counter_id = spec.preamble.id
        cells = {
            e.counter_entry.index.index: e.counter_entry.data.packet_count for e in self.read(query)
        }
        return [cells.get(i, 0) for i in range(spec.size)]
