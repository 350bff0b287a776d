"""P4Runtime gRPC service of the embedded target (grpc.aio, protobufs from `finsy.proto`).

Written by hand because no Python P4Runtime server exists to reuse (finsy ships only a test
stub); the messages, stubs and transport are the libraries'. It follows P4Runtime v1.4 (v1.4.1
and v1.5.0 word every rule below the same way):

- arbitration ("Rules for Handling MasterArbitrationUpdate Messages"): the server remembers
  the highest election id it has ever seen; the live client holding it is primary, and there is
  none after that client leaves until a client advertises an id at least as high (a backup is
  not promoted). Every client gets a MasterArbitrationUpdate (OK for the primary,
  ALREADY_EXISTS for backups, NOT_FOUND for all while there is no primary) and all are told
  when the primary changes; a repeated election id is INVALID_ARGUMENT, an unknown device
  NOT_FOUND;
- Write/SetForwardingPipelineConfig from anyone but the primary: PERMISSION_DENIED; Write without
  a pipeline: FAILED_PRECONDITION; failed updates: UNKNOWN plus one p4.v1.Error per update, in
  order, in the grpc-status-details-bin trailer ("Error Reporting"). gRPC clients refuse
  trailers over 8 KiB by default (and drop the call over 16 KiB), so `error_status` keeps the
  details within `DETAILS_BUDGET`, shortening them in steps (see there): per-update codes reach
  a default client for batches of up to `MAX_COMPACT_UPDATES` updates, messages as room allows;
- a request whose bytes do not parse: INVALID_ARGUMENT naming the innermost field that does
  not (gRPC's own deserialisation would answer UNKNOWN);
- SetForwardingPipelineConfig with no config, or a P4Info this target cannot realise (a
  missing table, an unknown match type, ...): INVALID_ARGUMENT;
- SetForwardingPipelineConfig VERIFY, VERIFY_AND_COMMIT (which clears all forwarding state),
  VERIFY_AND_SAVE (Read and Write address the saved config and its own, initially empty, state
  while the switch keeps forwarding with the realized one) and COMMIT (realizes the saved
  config with the writes made since it was saved; NOT_FOUND when nothing is saved,
  INVALID_ARGUMENT when a config is given); an unknown action INVALID_ARGUMENT;
- GetForwardingPipelineConfig with every response type (the saved config once VERIFY_AND_SAVE
  ran), `config` unset before any config is set;
- Read of table entries (default entries included), counters, multicast groups and clone
  sessions, request by request ("Batch Processing"): the entities of the requests that can be
  read, then UNKNOWN with one p4.Error per request if any cannot; Capabilities;
- an unknown table or counter id is a malformed entity (INVALID_ARGUMENT), an entry that does
  not exist NOT_FOUND;
- PacketOut from the primary (metadata `egress_port` of the P4Info's `packet_out` header): the
  payload leaves out of that port; PacketIn (metadata `ingress_port`) to the primary for every
  frame the pipeline sends to CPU_PORT. A PacketOut that cannot be taken (no pipeline, not
  primary, bad metadata) is answered with a StreamError naming it.

Not implemented (answered UNIMPLEMENTED or not offered): roles other than the default role,
atomicity other than CONTINUE_ON_ERROR, RECONCILE_AND_COMMIT, digests, idle timeouts, action
profiles, meters, registers, value sets, direct counters, and the `p4_device_config` (ignored:
the pipeline is built in). PacketIns beyond PACKET_IN_BACKLOG waiting for a slow primary are
dropped.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import grpc
from finsy.proto import p4i, p4r, p4r_grpc, rpc_status
from google.protobuf import empty_pb2
from google.protobuf.internal.wire_format import WIRETYPE_LENGTH_DELIMITED
from google.protobuf.message import DecodeError, Message
from google.protobuf.message_factory import GetMessageClass
from google.protobuf.unknown_fields import UnknownFieldSet

from dataplane.entities import Entities, P4Error, canonical
from dataplane.pipeline import Pipeline
from dataplane.schema import Schema, SchemaError

LOG = logging.getLogger(__name__)
API_VERSION = "1.4.0"
NO_PIPELINE = "No forwarding pipeline config set for this device."
PACKET_IN_BACKLOG = 1024  # stream messages queued for one client before PacketIns are dropped
# Bytes of grpc-status-details-bin that every default gRPC client accepts: its metadata soft
# limit is 8 KiB for all trailers together (grpc-message, grpc-status and this one).
DETAILS_BUDGET = 7 * 1024
SHORT_TYPE_URL = "/"  # Any's type URL may be just "/p4.v1.Error": only the last segment counts
# One update's p4.Error with its code and nothing else, packed under the short URL, takes 20
# bytes of the status: the batch size up to which every update's code fits the budget.
MAX_COMPACT_UPDATES = DETAILS_BUDGET // 20 - 2
# A controller that hangs without closing its stream (SIGSTOP, a wedged host) would stay
# primary for as long as its stream is open, so the transport closes that stream: an HTTP/2
# PING every second, which the client's gRPC threads must answer within 2 s (they do while its
# Python is busy; a stopped process cannot). With grpcio 1.85 the unanswered PING is timed by
# `grpc.http2.ping_timeout_ms` (default 60 s): `grpc.keepalive_timeout_ms` alone left a stopped
# client connected; both are set so either reading applies. Clients need not allow anything:
# only servers enforce a ping policy (GOAWAY too_many_pings), on pings they receive.
KEEPALIVE_OPTIONS = (
    ("grpc.keepalive_time_ms", 1000),
    ("grpc.keepalive_timeout_ms", 2000),
    ("grpc.http2.ping_timeout_ms", 2000),
)


@dataclass(eq=False)
class _Client:
    """One StreamChannel: its election id (None until given) and its outgoing queue."""

    outbox: asyncio.Queue[p4r.StreamMessageResponse | None] = field(default_factory=asyncio.Queue)
    election_id: int | None = None
    arbitrated: bool = False


class P4RuntimeService(p4r_grpc.P4RuntimeServicer):
    """Serves one device: arbitration, pipeline config, Write, Read, packet-in/out.

    `transmit(port, frame)` sends a frame out of a port; the switch loop supplies it.
    """

    def __init__(
        self,
        device_id: int,
        pipeline: Pipeline,
        transmit: Callable[[int, bytes], None] | None = None,
    ) -> None:
        self.device_id = device_id
        self.pipeline = pipeline
        self.transmit = transmit
        self.entities: Entities | None = None  # of the realized config, which forwards
        self.config: p4r.ForwardingPipelineConfig | None = None
        # VERIFY_AND_SAVE's config and its entities (over a pipeline of their own), which Read
        # and Write address until COMMIT realizes them.
        self.saved: tuple[p4r.ForwardingPipelineConfig, Entities] | None = None
        self.clients: list[_Client] = []
        self.highest_election_id: int | None = None  # ever seen (until the process restarts)

    # *** Arbitration

    @property
    def primary_election_id(self) -> int | None:
        """The highest election id ever seen, while a live client holds it; else None."""
        highest = self.highest_election_id
        if highest is not None and any(c.election_id == highest for c in self.clients):
            return highest
        return None

    def _update_for(self, client: _Client) -> p4r.StreamMessageResponse:
        primary = self.primary_election_id
        msg = p4r.StreamMessageResponse()
        arb = msg.arbitration
        arb.device_id = self.device_id
        if (highest := self.highest_election_id) is not None:
            arb.election_id.high, arb.election_id.low = highest >> 64, highest & (2**64 - 1)
        if primary is None:
            arb.status.code = grpc.StatusCode.NOT_FOUND.value[0]
            arb.status.message = "No primary controller"
            return msg
        if client.election_id == primary:
            arb.status.code = grpc.StatusCode.OK.value[0]
            arb.status.message = "Is primary"
        else:
            arb.status.code = grpc.StatusCode.ALREADY_EXISTS.value[0]
            arb.status.message = "Not primary"
        return msg

    def _arbitrate(self, client: _Client, request: p4r.MasterArbitrationUpdate) -> None:
        if request.device_id != self.device_id:
            raise P4Error(grpc.StatusCode.NOT_FOUND, f"unknown device id {request.device_id}")
        if request.HasField("role") and request.role.name:
            raise P4Error(grpc.StatusCode.UNIMPLEMENTED, "only the default role is supported")
        new_id = _election_id(request) if request.HasField("election_id") else None
        if new_id is not None and any(
            c.election_id == new_id for c in self.clients if c is not client
        ):
            raise P4Error(grpc.StatusCode.INVALID_ARGUMENT, "Election id already exists")
        before = self.primary_election_id
        client.election_id, client.arbitrated = new_id, True
        if new_id is not None and (
            self.highest_election_id is None or new_id >= self.highest_election_id
        ):
            self.highest_election_id = new_id
        after = self.primary_election_id
        if after != before or (after is not None and after == new_id):
            self._announce()
        else:
            client.outbox.put_nowait(self._update_for(client))

    def _announce(self) -> None:
        """The primary changed: every arbitrated client learns it."""
        for other in self.clients:
            if other.arbitrated:
                other.outbox.put_nowait(self._update_for(other))

    async def StreamChannel(
        self,
        request_iterator: AsyncIterator[p4r.StreamMessageRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[p4r.StreamMessageResponse]:
        client = _Client()
        self.clients.append(client)
        failure: list[P4Error] = []

        async def pump() -> None:
            try:
                async for request in request_iterator:
                    if request.WhichOneof("update") == "arbitration":
                        self._arbitrate(client, request.arbitration)
                    elif not client.arbitrated:
                        raise P4Error(
                            grpc.StatusCode.FAILED_PRECONDITION,
                            "the first stream message must be an arbitration update",
                        )
                    elif request.WhichOneof("update") == "packet":
                        self._packet_out(client, request.packet)
            except P4Error as exc:
                failure.append(exc)
            finally:
                client.outbox.put_nowait(None)

        reader = asyncio.create_task(pump())
        try:
            while (message := await client.outbox.get()) is not None:
                yield message
            if failure:
                await context.abort(failure[0].code, str(failure[0]))
        finally:
            reader.cancel()
            was_primary = (
                client.election_id is not None and client.election_id == self.primary_election_id
            )
            self.clients.remove(client)
            if was_primary:
                self._announce()

    # *** Packet-in / packet-out

    def _packet_out(self, client: _Client, packet: p4r.PacketOut) -> None:
        try:
            if client.election_id is None or client.election_id != self.primary_election_id:
                raise P4Error(grpc.StatusCode.PERMISSION_DENIED, "PacketOut from a non-primary")
            if self.entities is None:
                raise P4Error(grpc.StatusCode.FAILED_PRECONDITION, NO_PIPELINE)
            schema = self.entities.schema
            field_id = schema.packet_metadata_id("packet_out")
            values = {m.metadata_id: m.value for m in packet.metadata}
            if set(values) != {field_id}:
                raise P4Error(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    "PacketOut needs exactly the metadata egress_port",
                )
            port = int.from_bytes(canonical(values[field_id], 16, "egress_port"), "big")
        except P4Error as exc:
            reply = p4r.StreamMessageResponse()
            reply.error.canonical_code = exc.code.value[0]
            reply.error.message = str(exc)
            reply.error.packet_out.packet_out.CopyFrom(packet)
            client.outbox.put_nowait(reply)
            return
        if self.transmit is not None:
            for out_port, frame in self.pipeline.packet_out(port, packet.payload):
                self.transmit(out_port, frame)

    def packet_in(self, port: int, frame: bytes) -> None:
        """Hand `frame`, which arrived on `port`, to the primary client (if any)."""
        primary = self.primary_election_id
        client = next(
            (c for c in self.clients if primary is not None and c.election_id == primary), None
        )
        if client is None or self.entities is None or client.outbox.qsize() >= PACKET_IN_BACKLOG:
            return
        message = p4r.StreamMessageResponse()
        message.packet.payload = frame
        message.packet.metadata.add(
            metadata_id=self.entities.schema.packet_metadata_id("packet_in"),
            value=port.to_bytes(max(1, (port.bit_length() + 7) // 8), "big"),
        )
        client.outbox.put_nowait(message)

    def _require_primary(self, device_id: int, election: p4r.Uint128 | None) -> None:
        if device_id != self.device_id:
            raise P4Error(grpc.StatusCode.NOT_FOUND, f"unknown device id {device_id}")
        primary = self.primary_election_id
        if primary is None or election is None or _uint128(election) != primary:
            raise P4Error(
                grpc.StatusCode.PERMISSION_DENIED,
                "Not primary: election id does not match the primary's",
            )

    # *** Pipeline config

    async def SetForwardingPipelineConfig(
        self,
        request: p4r.SetForwardingPipelineConfigRequest,
        context: grpc.aio.ServicerContext,
    ) -> p4r.SetForwardingPipelineConfigResponse:
        """VERIFY, VERIFY_AND_SAVE, VERIFY_AND_COMMIT and COMMIT as "SetForwardingPipelineConfig
        RPC" defines them; RECONCILE_AND_COMMIT, which the spec lets a target refuse, is
        UNIMPLEMENTED."""
        action = p4r.SetForwardingPipelineConfigRequest
        try:
            self._require_primary(request.device_id, request.election_id)
            if request.role:
                raise P4Error(grpc.StatusCode.UNIMPLEMENTED, "only the default role is supported")
            if request.action == action.COMMIT:
                if request.HasField("config"):
                    raise P4Error(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        "COMMIT takes no config: it realizes the one VERIFY_AND_SAVE saved",
                    )
                if self.saved is None:
                    raise P4Error(
                        grpc.StatusCode.NOT_FOUND,
                        "no saved config to commit (no VERIFY_AND_SAVE since the last commit)",
                    )
            elif request.action == action.RECONCILE_AND_COMMIT:
                raise P4Error(
                    grpc.StatusCode.UNIMPLEMENTED, "RECONCILE_AND_COMMIT is not supported"
                )
            elif request.action not in (
                action.VERIFY,
                action.VERIFY_AND_SAVE,
                action.VERIFY_AND_COMMIT,
            ):
                raise P4Error(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"SetForwardingPipelineConfig action {request.action} is not one "
                    "of VERIFY, VERIFY_AND_SAVE, VERIFY_AND_COMMIT, COMMIT",
                )
            elif not request.HasField("config"):
                raise P4Error(grpc.StatusCode.INVALID_ARGUMENT, "no config provided")
            else:
                entities = _entities(request.config.p4info, Pipeline(self.pipeline.clock))
        except P4Error as exc:
            await context.abort(exc.code, str(exc))
        if request.action == action.VERIFY_AND_SAVE:
            self.saved = (_copy(request.config), entities)
            LOG.info("pipeline saved (cookie %d)", request.config.cookie.cookie)
        elif request.action in (action.VERIFY_AND_COMMIT, action.COMMIT):
            if request.action == action.VERIFY_AND_COMMIT:
                config, entities = _copy(request.config), entities
            else:
                assert self.saved is not None  # a COMMIT with nothing saved is refused above
                config, entities = self.saved
            self.pipeline.adopt(entities.pipeline)
            entities.pipeline = self.pipeline
            self.entities, self.config, self.saved = entities, config, None
            LOG.info("pipeline committed (cookie %d)", config.cookie.cookie)
        return p4r.SetForwardingPipelineConfigResponse()

    async def GetForwardingPipelineConfig(
        self,
        request: p4r.GetForwardingPipelineConfigRequest,
        context: grpc.aio.ServicerContext,
    ) -> p4r.GetForwardingPipelineConfigResponse:
        """ "GetForwardingPipelineConfig RPC": the config Read and Write refer to (a saved one
        once VERIFY_AND_SAVE has run); `config` unset while there is none."""
        if request.device_id != self.device_id:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown device {request.device_id}")
        kind = p4r.GetForwardingPipelineConfigRequest
        reply = p4r.GetForwardingPipelineConfigResponse()
        config = self.saved[0] if self.saved is not None else self.config
        if config is None:
            return reply
        reply.config.cookie.CopyFrom(config.cookie)
        if request.response_type in (kind.ALL, kind.P4INFO_AND_COOKIE):
            reply.config.p4info.CopyFrom(config.p4info)
        if request.response_type in (kind.ALL, kind.DEVICE_CONFIG_AND_COOKIE):
            reply.config.p4_device_config = config.p4_device_config
        return reply

    def _addressed(self) -> Entities:
        """The entities Read and Write address: the saved config's, else the realized one's."""
        if self.saved is not None:
            return self.saved[1]
        if self.entities is None:
            raise P4Error(grpc.StatusCode.FAILED_PRECONDITION, NO_PIPELINE)
        return self.entities

    # *** Write and Read

    async def Write(
        self,
        request: p4r.WriteRequest,
        context: grpc.aio.ServicerContext,
    ) -> p4r.WriteResponse:
        try:
            self._require_primary(request.device_id, request.election_id)
            if request.role:
                raise P4Error(grpc.StatusCode.UNIMPLEMENTED, "only the default role is supported")
            entities = self._addressed()
            if request.atomicity != p4r.WriteRequest.CONTINUE_ON_ERROR:
                raise P4Error(
                    grpc.StatusCode.UNIMPLEMENTED, "only CONTINUE_ON_ERROR atomicity is supported"
                )
        except P4Error as exc:
            await context.abort(exc.code, str(exc))
        errors = [_outcome(functools.partial(entities.write, update)) for update in request.updates]
        if any(e.canonical_code != grpc.StatusCode.OK.value[0] for e in errors):
            status = error_status(errors)
            await context.abort(
                grpc.StatusCode.UNKNOWN,
                status.message,
                trailing_metadata=(("grpc-status-details-bin", status.SerializeToString()),),
            )
        return p4r.WriteResponse()

    async def Read(
        self,
        request: p4r.ReadRequest,
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[p4r.ReadResponse]:
        """ "Read RPC", "Batch Processing": the entities of every request that can be read, then
        (when a request cannot) UNKNOWN with one p4.Error per request, in order."""
        reply = p4r.ReadResponse()
        try:
            if request.device_id != self.device_id:
                raise P4Error(grpc.StatusCode.NOT_FOUND, f"unknown device {request.device_id}")
            entities = self._addressed()
        except P4Error as exc:
            await context.abort(exc.code, str(exc))

        def read(entity: p4r.Entity) -> None:
            reply.entities.extend(list(entities.read(entity)))

        errors = [_outcome(functools.partial(read, entity)) for entity in request.entities]
        yield reply
        if any(e.canonical_code != grpc.StatusCode.OK.value[0] for e in errors):
            status = error_status(errors, "Read", "request")
            await context.abort(
                grpc.StatusCode.UNKNOWN,
                status.message,
                trailing_metadata=(("grpc-status-details-bin", status.SerializeToString()),),
            )

    async def Capabilities(
        self,
        request: p4r.CapabilitiesRequest,
        context: grpc.aio.ServicerContext,
    ) -> p4r.CapabilitiesResponse:
        return p4r.CapabilitiesResponse(p4runtime_api_version=API_VERSION)


def _uint128(value: p4r.Uint128) -> int:
    return (value.high << 64) | value.low


def _election_id(request: p4r.MasterArbitrationUpdate) -> int:
    return _uint128(request.election_id)


def _outcome(step: Callable[[], object]) -> p4r.Error:
    """The p4.Error of one update or read request: OK, or the P4Error it raised."""
    try:
        step()
    except P4Error as exc:
        return p4r.Error(canonical_code=exc.code.value[0], message=str(exc))
    return p4r.Error(canonical_code=grpc.StatusCode.OK.value[0])


def _copy(config: p4r.ForwardingPipelineConfig) -> p4r.ForwardingPipelineConfig:
    out = p4r.ForwardingPipelineConfig()
    out.CopyFrom(config)
    return out


def _entities(p4info: p4i.P4Info, pipeline: Pipeline) -> Entities:
    """Entities of a new config over `pipeline`; one the target cannot realize (its initial
    default actions included) is INVALID_ARGUMENT."""
    schema = _schema(p4info)
    try:
        return Entities(schema, pipeline)
    except P4Error as exc:
        raise P4Error(grpc.StatusCode.INVALID_ARGUMENT, f"pipeline rejected: {exc}") from None


def _schema(p4info: p4i.P4Info) -> Schema:
    """The spec's "SetForwardingPipelineConfig RPC": a config the target cannot realise is
    INVALID_ARGUMENT."""
    known = set(p4i.MatchField.MatchType.values())
    for table in p4info.tables:
        for match in table.match_fields:
            if (
                match.WhichOneof("match") != "match_type"
                or match.match_type not in known
                or match.match_type == p4i.MatchField.UNSPECIFIED
            ):
                raise P4Error(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"pipeline rejected: table {table.preamble.name} field "
                    f"{match.name}: match type {_match_kind(match)} is not supported",
                )
    try:
        return Schema(p4info)
    except SchemaError as exc:
        raise P4Error(grpc.StatusCode.INVALID_ARGUMENT, f"pipeline rejected: {exc}") from None


def _match_kind(match: p4i.MatchField) -> str:
    if match.WhichOneof("match") == "other_match_type":
        return repr(match.other_match_type)
    return str(match.match_type)


def error_status(
    errors: list[p4r.Error], rpc: str = "Write", item: str = "update"
) -> rpc_status.Status:
    """The google.rpc.Status of a failed Write (or Read: `rpc`, `item` name them): UNKNOWN,
    one p4.Error per update (request), in order.

    The truncation rule, applied until the details fit `DETAILS_BUDGET`:
    1. every error as it is, under Any's usual type URL;
    2. the short type URL, and each distinct message only on the first update that has it
       (later updates with the same message carry their code alone);
    3. codes only (no messages);
    4. no details: the status message then says how many updates failed and why the details
       are missing (a batch of more than `MAX_COMPACT_UPDATES` updates, all failing).
    The status message always gives the count and the first failure's message.
    """
    ok = grpc.StatusCode.OK.value[0]
    failed = [(i, e) for i, e in enumerate(errors) if e.canonical_code != ok]
    first_index, first = failed[0]
    code = _code_name(first.canonical_code)
    message = (
        f"{rpc} failure: {len(failed)} of {len(errors)} {item}s failed; "
        f"first: {item} {first_index}: {code}: {first.message}"
    )
    status = rpc_status.Status(code=grpc.StatusCode.UNKNOWN.value[0], message=message)
    for shorten in (_as_is, _messages_once, _codes_only):
        status.ClearField("details")
        for error, prefix in shorten(errors):
            status.details.add().Pack(error, type_url_prefix=prefix)
        if status.ByteSize() <= DETAILS_BUDGET:
            return status
    status.ClearField("details")
    status.message = (
        f"{message} (per-{item} details omitted: {len(errors)} {item}s do not "
        f"fit the 8 KiB trailer limit of gRPC clients; send smaller batches)"
    )
    return status


def _code_name(number: int) -> str:
    return next((c.name for c in grpc.StatusCode if c.value[0] == number), str(number))


def _as_is(errors: list[p4r.Error]) -> list[tuple[p4r.Error, str]]:
    return [(e, "type.googleapis.com/") for e in errors]


def _messages_once(errors: list[p4r.Error]) -> list[tuple[p4r.Error, str]]:
    seen: set[str] = set()
    out = []
    for error in errors:
        if error.message in seen:
            error = p4r.Error(canonical_code=error.canonical_code)
        seen.add(error.message)
        out.append((error, SHORT_TYPE_URL))
    return out


def _codes_only(errors: list[p4r.Error]) -> list[tuple[p4r.Error, str]]:
    return [(p4r.Error(canonical_code=e.canonical_code), SHORT_TYPE_URL) for e in errors]


# *** Requests that do not parse


@dataclass(frozen=True)
class Undecodable:
    """A request message whose bytes do not parse, and why: gRPC's own deserialisation would
    answer UNKNOWN (and log a traceback); the handler answers INVALID_ARGUMENT instead."""

    reason: str


def _lenient(message_type: type[Message]) -> Callable[[bytes], Message | Undecodable]:
    def parse(data: bytes) -> Message | Undecodable:
        try:
            return message_type.FromString(data)
        except DecodeError:
            return Undecodable(
                f"{message_type.DESCRIPTOR.full_name} does not parse: "
                f"{_undecodable(message_type, data)}"
            )

    return parse


def _undecodable(message_type: type[Message], data: bytes, path: str = "") -> str:
    """Why `data` does not parse as `message_type`, naming the innermost field at fault."""
    where = f"field {path} is " if path else ""
    try:
        fields = UnknownFieldSet(empty_pb2.Empty.FromString(data))
    except DecodeError:
        return f"{where}cut short or not protobuf"
    for raw in fields:
        spec = message_type.DESCRIPTOR.fields_by_number.get(raw.field_number)
        if spec is None or raw.wire_type != WIRETYPE_LENGTH_DELIMITED:
            continue
        name = f"{path}.{spec.name}" if path else spec.name
        if spec.message_type is not None:
            inner = GetMessageClass(spec.message_type)
            try:
                inner.FromString(raw.data)
            except DecodeError:
                return _undecodable(inner, raw.data, name)
        elif spec.type == spec.TYPE_STRING:
            try:
                raw.data.decode()
            except UnicodeDecodeError:
                return f"field {name} is not UTF-8"
    return f"{where}not valid protobuf"


def _handler(service: P4RuntimeService) -> grpc.GenericRpcHandler:
    """The service's methods as `p4r_grpc.add_P4RuntimeServicer_to_server` registers them,
    except that a request which does not parse is answered INVALID_ARGUMENT."""
    handlers = {}
    for method in p4r.DESCRIPTOR.services_by_name["P4Runtime"].methods:
        behaviour = getattr(service, method.name)
        if method.client_streaming:
            make, handle = grpc.stream_stream_rpc_method_handler, _checked_stream(behaviour)
        elif method.server_streaming:
            make, handle = grpc.unary_stream_rpc_method_handler, _checked_reply_stream(behaviour)
        else:
            make, handle = grpc.unary_unary_rpc_method_handler, _checked_unary(behaviour)
        handlers[method.name] = make(
            handle,
            request_deserializer=_lenient(getattr(p4r, method.input_type.name)),
            response_serializer=getattr(p4r, method.output_type.name).SerializeToString,
        )
    return grpc.method_handlers_generic_handler("p4.v1.P4Runtime", handlers)


def _checked_unary(method: Callable) -> Callable:
    async def handle(request: Message | Undecodable, context: grpc.aio.ServicerContext):
        if isinstance(request, Undecodable):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.reason)
        return await method(request, context)

    return handle


def _checked_reply_stream(method: Callable) -> Callable:
    async def handle(request: Message | Undecodable, context: grpc.aio.ServicerContext):
        if isinstance(request, Undecodable):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.reason)
        async for reply in method(request, context):
            yield reply

    return handle


def _checked_stream(method: Callable) -> Callable:
    """A stream message that does not parse ends the stream with INVALID_ARGUMENT (a P4Error
    raised where the stream is read)."""

    async def handle(
        requests: AsyncIterator[Message | Undecodable], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[Message]:
        async def checked() -> AsyncIterator[Message]:
            async for request in requests:
                if isinstance(request, Undecodable):
                    raise P4Error(grpc.StatusCode.INVALID_ARGUMENT, request.reason)
                yield request

        async for reply in method(checked(), context):
            yield reply

    return handle


async def serve(
    address: str, service: P4RuntimeService, credentials: grpc.ServerCredentials | None = None
) -> grpc.aio.Server:
    """Start the gRPC server on `address` (host:port), over TLS with `credentials`, and
    return it."""
    # Without SO_REUSEPORT (gRPC's default sets it): a second switch started on an address in
    # use must fail, not silently share the controllers' connections with the first.
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0), *KEEPALIVE_OPTIONS])
    server.add_generic_rpc_handlers((_handler(service),))
    try:
        port = (
            server.add_secure_port(address, credentials)
            if credentials is not None
            else server.add_insecure_port(address)
        )
    except RuntimeError:  # grpc.aio's way of saying the bind failed
        port = 0
    if port == 0:
        raise OSError(f"cannot listen on {address} (in use, or not an address of this machine)")
    await server.start()
    return server
