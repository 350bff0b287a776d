"""P4Runtime v1.4 conformance of the embedded target, one rule of the spec per test.

Each test names the spec section it checks and quotes the rule; the target is a real `ina
switch` process (no interfaces: P4Runtime only, no root) driven over gRPC by a client with
gRPC's default settings.
"""

from __future__ import annotations

import asyncio
import threading

import grpc
import pytest
from conftest import free_port
from finsy.proto import p4i, p4r, p4r_grpc, rpc_status
from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from dataplane.entities import Entities, P4Error
from dataplane.frame import INA_UDP_PORT, MAX_PIPES
from dataplane.p4rt_client import Client, WriteFailed
from dataplane.pipeline import Pipeline
from dataplane.schema import Schema, load_p4info
from dataplane.server import P4RuntimeService, serve

DEVICE_ID = 1


@pytest.fixture
def primary(embedded_switch) -> Client:
    client = Client(embedded_switch, DEVICE_ID, 10, load_p4info())
    client.set_pipeline()
    yield client
    client.close()


def _slots(client: Client, job: int, *, base: int = 0, count: int = 8) -> p4r.Entity:
    return client.table_entry(
        "job_slots", {"job": job, "generation": 0}, "set_job_slots", base=base, count=count
    )


def _all_of(client: Client, table: str) -> p4r.Entity:
    entity = p4r.Entity()
    entity.table_entry.table_id = client._table(table).preamble.id
    return entity


def _write(client: Client, *updates: tuple[int, p4r.Entity]) -> list[grpc.StatusCode]:
    """Per-update codes of one Write ([] when every update succeeded)."""
    request = p4r.WriteRequest(device_id=client.device_id)
    request.election_id.low = client.election_id
    for kind, entity in updates:
        request.updates.add(type=kind, entity=entity)
    try:
        client.stub.Write(request, timeout=10)
    except grpc.RpcError as exc:
        assert exc.code() == grpc.StatusCode.UNKNOWN, exc.details()
        status = rpc_status.Status()
        for key, value in exc.trailing_metadata():
            if key == "grpc-status-details-bin":
                status.ParseFromString(value)
        codes = []
        for detail in status.details:
            error = p4r.Error()
            assert detail.Unpack(error)
            codes.append(next(c for c in grpc.StatusCode if c.value[0] == error.canonical_code))
        return codes
    return []


def test_update_type_unspecified_is_rejected(primary):
    """ "Write RPC": an update "can be one of the following types: INSERT, MODIFY, DELETE";
    UNSPECIFIED (0) is none of them, so it is malformed: INVALID_ARGUMENT, nothing applied."""
    codes = _write(
        primary,
        (p4r.Update.UNSPECIFIED, _slots(primary, 1)),
        (p4r.Update.INSERT, _slots(primary, 2)),
    )
    assert codes == [grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.OK]
    assert primary.read(_all_of(primary, "job_slots")) == [_slots(primary, 2)]


def test_is_const_in_a_written_entry_is_rejected(primary):
    """ "TableEntry": "The `const` field must be `false` in any `INSERT`, `MODIFY`, or `DELETE`
    write request of a table entry. If it is true, the server must reject the operation and
    return an `INVALID_ARGUMENT` error." """
    entry = _slots(primary, 1)
    entry.table_entry.is_const = True
    assert _write(primary, (p4r.Update.INSERT, entry)) == [grpc.StatusCode.INVALID_ARGUMENT]
    assert primary.read(_all_of(primary, "job_slots")) == []
    primary.write(_slots(primary, 1))
    for kind in (p4r.Update.MODIFY, p4r.Update.DELETE):
        assert _write(primary, (kind, entry)) == [grpc.StatusCode.INVALID_ARGUMENT]
    assert primary.read(_all_of(primary, "job_slots")) == [_slots(primary, 1)]


def test_writes_to_a_constant_table_are_permission_denied(embedded_switch):
    """ "Constant Tables": "If the P4Runtime client attempts to perform any other kind of write
    update on a constant table the server must return a `PERMISSION_DENIED` error." """
    p4info = load_p4info()
    next(t for t in p4info.tables if t.preamble.name == "InaIngress.ipv4_lpm").is_const_table = True
    client = Client(embedded_switch, DEVICE_ID, 10, p4info)
    try:
        client.set_pipeline()
        route = client.table_entry("ipv4_lpm", {"dst_addr": (0x0A000000, 8)}, "forward", port=2)
        assert _write(
            client, (p4r.Update.INSERT, route), (p4r.Update.INSERT, _slots(client, 1))
        ) == [grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.OK]
        assert client.read(_all_of(client, "ipv4_lpm")) == []
    finally:
        client.close()


@pytest.mark.parametrize("kind", ["unknown enum value", "other_match_type", "UNSPECIFIED"])
def test_a_p4info_with_an_unknown_match_type_is_refused(primary, kind):
    """ "SetForwardingPipelineConfig RPC", VERIFY_AND_COMMIT: "Returns an `INVALID_ARGUMENT` error
    if the forwarding config is not provided or if the provided config cannot be realized."
    The pipeline in place stays."""
    primary.write(_slots(primary, 1))
    p4info = load_p4info()
    field = next(t for t in p4info.tables if t.preamble.name == "InaIngress.ipv4_lpm").match_fields[
        0
    ]
    if kind == "unknown enum value":
        field.match_type = 99  # proto3 keeps unknown enum values
    elif kind == "other_match_type":
        field.other_match_type = "custom"
    else:
        field.match_type = p4i.MatchField.UNSPECIFIED
    request = p4r.SetForwardingPipelineConfigRequest(
        device_id=DEVICE_ID, action=p4r.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT
    )
    request.election_id.low = primary.election_id
    request.config.p4info.CopyFrom(p4info)
    with pytest.raises(grpc.RpcError) as failure:
        primary.stub.SetForwardingPipelineConfig(request, timeout=10)
    assert failure.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "dst_addr" in failure.value.details()
    assert primary.read(_all_of(primary, "job_slots")) == [_slots(primary, 1)]


def test_a_read_of_all_tables_takes_no_other_filter(primary):
    """ "Wildcard Reads" (TableEntry): "`table_id`: If default (0), entries from all tables ...
    will be selected and no other filter can be used." A match with table_id 0 is an invalid
    request: INVALID_ARGUMENT in its p4.Error ("Read RPC", "Batch Processing")."""
    primary.write(_slots(primary, 1))
    query = _slots(primary, 1)
    query.table_entry.table_id = 0
    query.table_entry.ClearField("action")
    assert _read_batch(primary, query) == (
        [],
        grpc.StatusCode.UNKNOWN,
        [grpc.StatusCode.INVALID_ARGUMENT],
    )
    assert primary.read(p4r.Entity(table_entry=p4r.TableEntry())) == [_slots(primary, 1)]


@pytest.mark.parametrize(
    ("where", "value"),
    [
        ("match", b""),
        ("match", b"\x01\x00\x00"),  # job is bit<16>
        ("param", b""),
        ("param", b"\x01\x00\x00\x00\x00"),  # base is bit<32>
    ],
)
def test_out_of_range_bytestrings_are_out_of_range(primary, where, value):
    """ "Bytestrings": "If the string's byte length is zero, the server always rejects the string.
    When the server rejects a binary string due to any of the previous criteria [a value that
    does not fit the bitwidth], it returns an `OUT_OF_RANGE` error." """
    entry = _slots(primary, 1)
    target = (
        entry.table_entry.match[0].exact
        if where == "match"
        else entry.table_entry.action.action.params[0]
    )
    target.value = value
    assert _write(primary, (p4r.Update.INSERT, entry)) == [grpc.StatusCode.OUT_OF_RANGE]


def test_leading_zero_bytes_are_accepted_and_read_back_canonical(primary):
    """ "Bytestrings": "a P4Runtime server must accept a wide assortment of possible binary string
    encodings for the same integer value"; "Read-Write Symmetry": reads use the shortest."""
    entry = _slots(primary, 0x63)
    entry.table_entry.match[0].exact.value = b"\x00\x63"
    assert _write(primary, (p4r.Update.INSERT, entry)) == []
    assert primary.read(_all_of(primary, "job_slots")) == [_slots(primary, 0x63)]


def _counter(client: Client, index: int | None, packets: int | None = None) -> p4r.Entity:
    spec = next(c for c in client.p4info.counters if c.preamble.name == "InaIngress.collisions")
    entity = p4r.Entity()
    entity.counter_entry.counter_id = spec.preamble.id
    if index is not None:
        entity.counter_entry.index.index = index
    if packets is not None:
        entity.counter_entry.data.packet_count = packets
    return entity


def test_counter_indices_follow_the_spec(primary):
    """ "CounterEntry": "The server must return `INVALID_ARGUMENT` for a negative index value and
    `OUT_OF_RANGE` if the index value exceeds the size of the counter array"; "the counter value
    is not modified if this Protobuf field [data] is not set"."""
    modify = p4r.Update.MODIFY
    assert _write(
        primary,
        (modify, _counter(primary, -1, 5)),
        (modify, _counter(primary, 1, 7)),
        (modify, _counter(primary, MAX_PIPES, 5)),
    ) == [grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.OK, grpc.StatusCode.OUT_OF_RANGE]
    assert primary.counter("collisions") == [0, 7, 0, 0]
    assert _write(primary, (modify, _counter(primary, 1))) == []  # no data: unchanged
    assert primary.counter("collisions") == [0, 7, 0, 0]
    assert _read_batch(primary, _counter(primary, -1), _counter(primary, MAX_PIPES)) == (
        [],
        grpc.StatusCode.UNKNOWN,
        [grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.OUT_OF_RANGE],
    )


def test_there_is_no_primary_after_the_primary_leaves_until_an_id_as_high_arrives(
    embedded_switch, primary
):
    """ "Client Arbitration and Controller Replication": when a primary channel gets broken, "the
    P4Runtime server will be without a primary controller, until a client sends a successful
    `MasterArbitrationUpdate`"; "Rules for Handling MasterArbitrationUpdate Messages": a client
    becomes primary only "If `election_id` is greater than or equal to `election_id_past`", the
    highest election id the server has ever seen. Backups hear NOT_FOUND while there is none
    ("Client Arbitration Notifications"), and a backup's Write is PERMISSION_DENIED."""
    p4info = primary.p4info
    backup = Client(embedded_switch, DEVICE_ID, 5, p4info)
    late = None
    successor = None
    try:
        assert backup.arbitration.status.code == grpc.StatusCode.ALREADY_EXISTS.value[0]
        primary.close()
        advisory = backup.stream_message(timeout=5)
        assert advisory is not None and advisory.HasField("arbitration")
        assert advisory.arbitration.status.code == grpc.StatusCode.NOT_FOUND.value[0]
        assert advisory.arbitration.election_id.low == 10  # the highest ever seen
        with pytest.raises(grpc.RpcError) as failure:
            backup.write(_slots(backup, 1))
        assert failure.value.code() == grpc.StatusCode.PERMISSION_DENIED
        late = Client(embedded_switch, DEVICE_ID, 9, p4info)  # higher than any live one
        assert late.arbitration.status.code == grpc.StatusCode.NOT_FOUND.value[0]
        with pytest.raises(grpc.RpcError) as failure:
            late.write(_slots(late, 1))
        assert failure.value.code() == grpc.StatusCode.PERMISSION_DENIED
        successor = Client(embedded_switch, DEVICE_ID, 10, p4info)  # as high: primary
        assert successor.arbitration.status.code == grpc.StatusCode.OK.value[0]
        successor.write(_slots(successor, 1))
        told = backup.stream_message(timeout=5)
        assert told is not None
        assert told.arbitration.status.code == grpc.StatusCode.ALREADY_EXISTS.value[0]
    finally:
        for client in (backup, late, successor):
            if client is not None:
                client.close()


def test_a_failing_batch_of_300_updates_keeps_every_code_for_a_default_client(primary):
    """ "Error Reporting": "The number of `p4.Error` messages packed into
    `google.rpc.Status.details` field should therefore always match the number of updates in
    the `WriteRequest`, and the order of `p4.Error` messages must be in the same order as the
    corresponding updates." The client here has gRPC's default 8 KiB metadata limit."""
    primary.write(*(_slots(primary, job) for job in range(0, 300, 3)))  # every third exists
    batch = [_slots(primary, job, count=8 if job % 2 else 99999) for job in range(300)]
    # Independent expectation: existing keys collide first; new ones fail on the bad count.
    expected = [
        grpc.StatusCode.ALREADY_EXISTS
        if job % 3 == 0
        else grpc.StatusCode.OK
        if job % 2
        else grpc.StatusCode.INVALID_ARGUMENT
        for job in range(300)
    ]
    with pytest.raises(WriteFailed) as failure:
        primary.write(*batch)
    assert failure.value.codes == expected


def test_a_batch_too_large_for_any_details_says_so_instead_of_failing_the_call(primary):
    """The truncation rule of `dataplane.server.error_status`, step 4: above the budget even
    codes alone exceed a default client's trailer limit; the call still ends with UNKNOWN and a
    message that counts the failures, instead of the client dropping the call."""
    batch = [_slots(primary, job, count=99999) for job in range(1000)]
    request = p4r.WriteRequest(device_id=DEVICE_ID)
    request.election_id.low = primary.election_id
    for entity in batch:
        request.updates.add(type=p4r.Update.INSERT, entity=entity)
    with pytest.raises(grpc.RpcError) as failure:
        primary.stub.Write(request, timeout=10)
    assert failure.value.code() == grpc.StatusCode.UNKNOWN
    assert "1000 of 1000 updates failed" in failure.value.details()
    assert "details omitted" in failure.value.details()


# *** Pipeline config, default entries, Read batches and ids (spec v1.4.1; v1.5.0 words the
# quoted rules the same way)

SetAction = p4r.SetForwardingPipelineConfigRequest


def _codes_of(error: grpc.RpcError) -> list[grpc.StatusCode]:
    """The per-request p4.Error codes in an RPC's grpc-status-details-bin trailer."""
    status = rpc_status.Status()
    for key, value in error.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            status.ParseFromString(value)
    codes = []
    for detail in status.details:
        error_detail = p4r.Error()
        assert detail.Unpack(error_detail)
        codes.append(next(c for c in grpc.StatusCode if c.value[0] == error_detail.canonical_code))
    return codes


def _read_batch(
    client: Client, *entities: p4r.Entity
) -> tuple[list[p4r.Entity], grpc.StatusCode, list[grpc.StatusCode]]:
    """Entities streamed before the end of a Read, the final code and its per-request codes."""
    request = p4r.ReadRequest(device_id=client.device_id)
    request.entities.extend(entities)
    got: list[p4r.Entity] = []
    try:
        for reply in client.stub.Read(request, timeout=10):
            got.extend(reply.entities)
    except grpc.RpcError as exc:
        return got, exc.code(), _codes_of(exc)
    return got, grpc.StatusCode.OK, []


def _set_config(
    client: Client, action: int, p4info: p4i.P4Info | None = None, cookie: int = 0
) -> None:
    request = SetAction(device_id=client.device_id, action=action)
    request.election_id.low = client.election_id
    if p4info is not None:
        request.config.p4info.CopyFrom(p4info)
        request.config.cookie.cookie = cookie
    client.stub.SetForwardingPipelineConfig(request, timeout=10)


def _varint(number: int) -> bytes:
    out = bytearray()
    while True:
        out.append(number & 0x7F | (0x80 if number > 0x7F else 0))
        number >>= 7
        if not number:
            return bytes(out)


def _field(number: int, data: bytes) -> bytes:
    """One length-delimited protobuf field, hand-encoded (so it may hold anything)."""
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _raw_set_config(address: str, config: bytes) -> grpc.RpcError | None:
    """A VERIFY_AND_COMMIT from election id 10 whose `config` field holds `config` as is."""
    head = SetAction(device_id=DEVICE_ID, action=SetAction.VERIFY_AND_COMMIT)
    head.election_id.low = 10
    with grpc.insecure_channel(address) as channel:
        call = channel.unary_unary(
            "/p4.v1.P4Runtime/SetForwardingPipelineConfig",
            request_serializer=bytes,
            response_deserializer=bytes,
        )
        try:
            call(head.SerializeToString() + _field(5, config), timeout=10)
        except grpc.RpcError as exc:
            return exc
    return None


@pytest.mark.parametrize(
    ("config", "where"),
    [
        (_field(1, b"\xff\xff\xff\xff"), "config.p4info"),  # p4info: not a message
        (
            _field(1, _field(1, _field(2, b"\xff\xfe"))),
            "config.p4info.pkg_info.version",
        ),  # a string not UTF-8
        (_field(2, b"x") + b"\x12\x40abc", "config"),  # p4_device_config cut short
        (b"\x0a\x10abc", "config"),  # p4info cut short
    ],
)
def test_an_undecodable_pipeline_config_is_invalid_argument(
    primary, embedded_switch, config, where
):
    """ "SetForwardingPipelineConfig RPC": VERIFY_AND_COMMIT "Returns an `INVALID_ARGUMENT` error
    if the forwarding config is not provided or if the provided config cannot be realized."
    Bytes that do not even parse are such a config: INVALID_ARGUMENT naming the part that does
    not parse (not UNKNOWN from a failed deserialisation), and the pipeline in place stays."""
    primary.write(_slots(primary, 1))
    failure = _raw_set_config(embedded_switch, config)
    assert failure is not None and failure.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "SetForwardingPipelineConfigRequest does not parse: " in failure.details()
    assert f"field {where} is " in failure.details()
    assert primary.read(_all_of(primary, "job_slots")) == [_slots(primary, 1)]


def test_an_undecodable_write_or_stream_message_is_invalid_argument(primary, embedded_switch):
    """ "Write RPC": "If the entity is malformed, an `INVALID_ARGUMENT` error is usually
    returned"; bytes that do not parse are the most malformed kind, in a Write as on the
    stream, where an invalid message ends the stream with INVALID_ARGUMENT."""
    head = p4r.WriteRequest(device_id=DEVICE_ID)
    head.election_id.low = 10
    with grpc.insecure_channel(embedded_switch) as channel:
        write = channel.unary_unary(
            "/p4.v1.P4Runtime/Write", request_serializer=bytes, response_deserializer=bytes
        )
        with pytest.raises(grpc.RpcError) as failure:  # an update whose entity is cut short
            write(head.SerializeToString() + _field(4, _field(2, b"\x0a\x09ab")), timeout=10)
        assert failure.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "field updates.entity is cut short" in failure.value.details()
        stream = channel.stream_stream(
            "/p4.v1.P4Runtime/StreamChannel",
            request_serializer=bytes,
            response_deserializer=p4r.StreamMessageResponse.FromString,
        )
        arbitration = p4r.StreamMessageRequest()
        arbitration.arbitration.device_id = DEVICE_ID
        arbitration.arbitration.election_id.low = 3
        with pytest.raises(grpc.RpcError) as failure:
            list(stream(iter([arbitration.SerializeToString(), b"\x0a\x05ab"]), timeout=10))
        assert failure.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert primary.read(_all_of(primary, "job_slots")) == []


def test_get_pipeline_config_before_any_is_set_leaves_config_unset(embedded_switch):
    """ "GetForwardingPipelineConfig RPC": "If a P4Runtime server is in a state where the
    forwarding-pipeline config is not known, the top-level `config` field will be unset in the
    response. Examples are (i) a server that only allows configuration via
    `SetForwardingPipelineConfig` but this RPC hasn't been invoked yet" """
    with grpc.insecure_channel(embedded_switch) as channel:
        stub = p4r_grpc.P4RuntimeStub(channel)
        for kind in p4r.GetForwardingPipelineConfigRequest.ResponseType.values():
            reply = stub.GetForwardingPipelineConfig(
                p4r.GetForwardingPipelineConfigRequest(device_id=DEVICE_ID, response_type=kind),
                timeout=10,
            )
            assert not reply.HasField("config")


def _default_of(client: Client, table: str, action: str | None = None, **params: int) -> p4r.Entity:
    """The default entry of `table`, with `action` (None: the action field unset)."""
    entity = p4r.Entity()
    entity.table_entry.table_id = client._table(table).preamble.id
    entity.table_entry.is_default_action = True
    if action is not None:
        spec = next(
            a for a in client.p4info.actions if a.preamble.name in (action, f"InaIngress.{action}")
        )
        entity.table_entry.action.action.action_id = spec.preamble.id
        for param in spec.params:
            entity.table_entry.action.action.params.add(
                param_id=param.id,
                value=params[param.name].to_bytes(
                    max(1, (params[param.name].bit_length() + 7) // 8), "big"
                ),
            )
    return entity


def test_default_entries_read_back_the_p4infos_initial_default_action(primary):
    """ "Default Entry": "the default entry for a table is always set. It can be set at
    compile-time by the P4 programmer --- or defaults to `NoAction`"; "The default entry is
    identified by setting the `is_default_action` boolean field to true"; "Wildcard Reads":
    "`is_default_action`: If default (false), all non-default entries from the specified table
    will be considered. Otherwise, only the default entry will be considered." The reference is
    the P4Info's `initial_default_action` of each table."""
    primary.write(_slots(primary, 1))
    for table in primary.p4info.tables:
        query = p4r.Entity()
        query.table_entry.table_id = table.preamble.id
        query.table_entry.is_default_action = True
        expected = p4r.Entity()
        expected.table_entry.table_id = table.preamble.id
        expected.table_entry.is_default_action = True
        expected.table_entry.action.action.action_id = table.initial_default_action.action_id
        assert primary.read(query) == [expected], table.preamble.name
    assert primary.read(_all_of(primary, "job_slots")) == [_slots(primary, 1)]  # not the default


def test_modify_sets_and_resets_the_default_entry(primary):
    """ "Default Entry": "When performing a `MODIFY` update on the default entry, the client can
    either provide a valid action for the table or leave the action field unset, in which case
    the default entry will be reset to its original value, as defined in the P4 program. When
    resetting the default entry, its `controller_metadata` and `metadata` value ... will be
    reset to their defaults." """
    modify = p4r.Update.MODIFY
    changed = _default_of(primary, "port_pipeline", "set_pipeline", pipe=1)
    changed.table_entry.metadata = b"note"
    assert _write(primary, (modify, changed)) == []
    assert primary.read(_default_of(primary, "port_pipeline")) == [changed]
    assert _write(primary, (modify, _default_of(primary, "port_pipeline"))) == []
    assert primary.read(_default_of(primary, "port_pipeline")) == [
        _default_of(primary, "port_pipeline", "NoAction")
    ]
    # an action the table does not have is malformed; parameters are checked as for entries
    assert _write(
        primary,
        (modify, _default_of(primary, "port_pipeline", "forward", port=1)),
        (modify, _default_of(primary, "job_slots", "set_job_slots", base=0, count=2**33)),
    ) == [grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.OUT_OF_RANGE]


def test_insert_delete_or_a_key_on_the_default_entry_is_invalid_argument(primary):
    """ "Default Entry": "we do not allow `INSERT` and `DELETE` updates on the default entry and
    the P4Runtime server must return an `INVALID_ARGUMENT` error code if the client attempts
    one"; "When this flag is set to true, the repeated `match` field must be empty and the
    `priority` field must be set to zero, otherwise the P4Runtime server must return an
    `INVALID_ARGUMENT` error code." """
    entry = _default_of(primary, "port_pipeline", "set_pipeline", pipe=1)
    keyed = _slots(primary, 1)
    keyed.table_entry.is_default_action = True
    with_priority = _default_of(primary, "port_pipeline", "NoAction")
    with_priority.table_entry.priority = 3
    invalid = grpc.StatusCode.INVALID_ARGUMENT
    assert (
        _write(
            primary,
            (p4r.Update.INSERT, entry),
            (p4r.Update.DELETE, entry),
            (p4r.Update.MODIFY, keyed),
            (p4r.Update.MODIFY, with_priority),
        )
        == [invalid] * 4
    )
    assert primary.read(_default_of(primary, "port_pipeline")) == [
        _default_of(primary, "port_pipeline", "NoAction")
    ]


def test_a_constant_default_action_is_permission_denied_and_still_readable(embedded_switch):
    """ "Default Entry": "If the default entry is constant (as indicated by the P4 program and
    the P4Info message), the server must return a `PERMISSION_DENIED` error code if the client
    attempts to modify it"; "Constant Tables": "The only write updates which are allowed for
    constant tables are `MODIFY` operations on direct resources, and the default action
    (assuming the default action itself is not constant)." """
    p4info = load_p4info()
    tables = {t.preamble.name: t for t in p4info.tables}
    no_action = tables["InaIngress.job_slots"].initial_default_action.action_id
    tables["InaIngress.job_slots"].const_default_action_id = no_action
    tables["InaIngress.ipv4_lpm"].is_const_table = True
    client = Client(embedded_switch, DEVICE_ID, 10, p4info)
    try:
        client.set_pipeline()
        assert _write(
            client,
            (p4r.Update.MODIFY, _default_of(client, "job_slots", "set_job_slots", base=0, count=1)),
        ) == [grpc.StatusCode.PERMISSION_DENIED]
        assert client.read(_default_of(client, "job_slots")) == [
            _default_of(client, "job_slots", "NoAction")
        ]
        route = _default_of(client, "ipv4_lpm", "forward", port=2)
        assert _write(client, (p4r.Update.MODIFY, route)) == []
        assert client.read(_default_of(client, "ipv4_lpm")) == [route]
    finally:
        client.close()


def test_a_table_only_action_as_default_is_permission_denied(embedded_switch):
    """ "Action": "If the client uses a valid `action_id` for the table but does not respect the
    action scope specified in P4Info (e.g. tries to set a `TABLE_ONLY` action as the default
    action), the server must return a `PERMISSION_DENIED` error code." """
    p4info = load_p4info()
    table = next(t for t in p4info.tables if t.preamble.name == "InaIngress.port_pipeline")
    set_pipeline = next(
        a.preamble.id for a in p4info.actions if a.preamble.name == "InaIngress.set_pipeline"
    )
    next(r for r in table.action_refs if r.id == set_pipeline).scope = p4i.ActionRef.TABLE_ONLY
    client = Client(embedded_switch, DEVICE_ID, 10, p4info)
    try:
        client.set_pipeline()
        assert _write(
            client,
            (p4r.Update.MODIFY, _default_of(client, "port_pipeline", "set_pipeline", pipe=1)),
        ) == [grpc.StatusCode.PERMISSION_DENIED]
        client.write(
            client.table_entry("port_pipeline", {"ingress_port": 1}, "set_pipeline", pipe=1)
        )
    finally:
        client.close()


def test_a_read_batch_returns_what_it_can_then_a_status_per_request(primary):
    """ "Read RPC", "Batch Processing": "If a client asked to read `{a,b,c,d}` and `b` and `d`
    *requests* didn't validate, the server will return entities corresponding to `a` and `c`,
    followed by a status `{p4.Error(OK), p4.Error(xxx), p4.Error(yyy), p4.Error(OK)}` in the
    `details` field"; the overall code "should be set to `UNKNOWN`"."""
    primary.write(_slots(primary, 1))
    unsupported = p4r.Entity()
    unsupported.register_entry.register_id = 1
    got, code, codes = _read_batch(
        primary, _all_of(primary, "job_slots"), unsupported, _counter(primary, 1)
    )
    assert got == [_slots(primary, 1), _counter(primary, 1, 0)]
    assert code == grpc.StatusCode.UNKNOWN
    assert codes == [grpc.StatusCode.OK, grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.OK]


def test_unknown_ids_are_invalid_argument_and_a_missing_entry_not_found(primary):
    """ "Write RPC": "If the entity is malformed, an `INVALID_ARGUMENT` error is usually returned
    (unless a more specific error code applies)" - a table or counter id that is not in the
    P4Info is such an entity, in a Write and as a Read request; "`DELETE`: ... If the entity
    does not exist, a `NOT_FOUND` error is returned." """
    unknown_table = _slots(primary, 1)
    unknown_table.table_entry.table_id = 7
    unknown_counter = _counter(primary, 0, 1)
    unknown_counter.counter_entry.counter_id = 7
    invalid = grpc.StatusCode.INVALID_ARGUMENT
    assert _write(
        primary,
        (p4r.Update.INSERT, unknown_table),
        (p4r.Update.MODIFY, unknown_counter),
        (p4r.Update.DELETE, _slots(primary, 1)),
    ) == [invalid, invalid, grpc.StatusCode.NOT_FOUND]
    query = p4r.Entity()
    query.table_entry.table_id = 7
    counters = p4r.Entity()
    counters.counter_entry.counter_id = 7
    assert _read_batch(primary, query, counters)[1:] == (
        grpc.StatusCode.UNKNOWN,
        [invalid, invalid],
    )


@pytest.fixture
def in_process():
    """A P4Runtime service on this process's own event loop thread, with its pipeline: what
    the switch forwards with can be looked at directly. Yields (address, pipeline)."""
    pipeline = Pipeline()
    service = P4RuntimeService(DEVICE_ID, pipeline)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    address = f"127.0.0.1:{free_port()}"
    server = asyncio.run_coroutine_threadsafe(serve(address, service), loop).result(10)
    yield address, pipeline
    asyncio.run_coroutine_threadsafe(server.stop(0), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.close()


def _renumbered(p4info: p4i.P4Info, offset: int) -> p4i.P4Info:
    """The same program with every table id moved by `offset`."""
    out = p4i.P4Info()
    out.CopyFrom(p4info)
    for table in out.tables:
        table.preamble.id += offset
    return out


def test_verify_and_save_then_commit_replays_the_writes_made_in_between(in_process):
    """ "SetForwardingPipelineConfig RPC": "`VERIFY_AND_SAVE`: saves the config if the P4Runtime
    target can realize it. The forwarding state in the target is not modified. However, any
    subsequent `Read` / `Write` requests must refer to fields in the new config"; "`COMMIT`:
    realizes the last saved, but not yet committed, config. The forwarding state in the target
    is updated by replaying the write requests to the target device since the last config was
    saved." """
    address, pipeline = in_process
    old = Client(address, DEVICE_ID, 10, load_p4info())
    try:
        old.set_pipeline(cookie=1)
        old.write(_slots(old, 1))
        new_info = _renumbered(old.p4info, 100)
        _set_config(old, SetAction.VERIFY_AND_SAVE, new_info, cookie=2)
        assert pipeline.fwd.job_slots == {(1, 0): (0, 8)}  # still forwarding with the old
        new = Client(address, DEVICE_ID, 11, new_info)
        try:
            assert new.read(_all_of(new, "job_slots")) == []  # the new config's (empty) state
            new.write(_slots(new, 2, base=8))
            assert _write(new, (p4r.Update.INSERT, _slots(old, 3))) == [
                grpc.StatusCode.INVALID_ARGUMENT
            ]  # an id of the old config only
            assert pipeline.fwd.job_slots == {(1, 0): (0, 8)}
            got = new.stub.GetForwardingPipelineConfig(
                p4r.GetForwardingPipelineConfigRequest(device_id=DEVICE_ID), timeout=10
            )
            assert got.config.cookie.cookie == 2 and got.config.p4info == new_info
            _set_config(new, SetAction.COMMIT)
            assert pipeline.fwd.job_slots == {(2, 0): (8, 8)}
            assert new.read(_all_of(new, "job_slots")) == [_slots(new, 2, base=8)]
            with pytest.raises(grpc.RpcError) as failure:  # nothing saved any more
                _set_config(new, SetAction.COMMIT)
            assert failure.value.code() == grpc.StatusCode.NOT_FOUND
        finally:
            new.close()
    finally:
        old.close()


def test_commit_codes_follow_the_spec(primary):
    """ "SetForwardingPipelineConfig RPC", `COMMIT`: "Returns a `NOT_FOUND` error if no saved
    config is found, i.e. if no `VERIFY_AND_SAVE` action preceded this one. Returns an
    `INVALID_ARGUMENT` error if a config is provided with this message"; `VERIFY_AND_SAVE`:
    "Returns an `INVALID_ARGUMENT` error if the forwarding config is not provided or if the
    provided config cannot be realized"; `RECONCILE_AND_COMMIT`: "A target that does not
    support this option may return an `UNIMPLEMENTED` error." """

    def code(action: int, p4info: p4i.P4Info | None = None) -> grpc.StatusCode:
        try:
            _set_config(primary, action, p4info)
        except grpc.RpcError as exc:
            return exc.code()
        return grpc.StatusCode.OK

    broken = load_p4info()
    del broken.tables[0]
    assert code(SetAction.COMMIT) == grpc.StatusCode.NOT_FOUND
    assert code(SetAction.VERIFY_AND_SAVE) == grpc.StatusCode.INVALID_ARGUMENT
    assert code(SetAction.VERIFY_AND_SAVE, broken) == grpc.StatusCode.INVALID_ARGUMENT
    assert code(SetAction.COMMIT) == grpc.StatusCode.NOT_FOUND
    assert code(SetAction.VERIFY_AND_SAVE, load_p4info()) == grpc.StatusCode.OK
    assert code(SetAction.COMMIT, load_p4info()) == grpc.StatusCode.INVALID_ARGUMENT
    assert code(SetAction.RECONCILE_AND_COMMIT, load_p4info()) == grpc.StatusCode.UNIMPLEMENTED
    assert code(SetAction.UNSPECIFIED, load_p4info()) == grpc.StatusCode.INVALID_ARGUMENT
    assert code(SetAction.COMMIT) == grpc.StatusCode.OK


def test_a_default_action_takes_effect_where_the_program_applies_it(in_process):
    """ "Default Entry": "A default action is executed when a matching table entry is not found"
    (P4Info `const_default_action_id`). In the program, `port_pipeline` and `ina_aggregate`
    apply their action on a miss; the other tables act only on a hit (`.apply().hit`), so
    their default actions change no forwarding, on bmv2 as here."""
    address, pipeline = in_process
    client = Client(address, DEVICE_ID, 10, load_p4info())
    try:
        client.set_pipeline()
        malformed = bytes(Ether() / IP() / UDP(dport=INA_UDP_PORT) / (b"\0" * 20))
        pipeline.process(7, malformed)
        assert pipeline.counters["malformed"] == [1, 0, 0, 0]
        client.write(
            _default_of(client, "port_pipeline", "set_pipeline", pipe=2), kind=p4r.Update.MODIFY
        )
        pipeline.process(7, malformed)
        assert pipeline.counters["malformed"] == [1, 0, 1, 0]
        client.write(_default_of(client, "ina_forward", "forward", port=3), kind=p4r.Update.MODIFY)
        assert pipeline.fwd.forward == {}
        client.write(_default_of(client, "port_pipeline"), kind=p4r.Update.MODIFY)  # reset
        pipeline.process(7, malformed)
        assert pipeline.counters["malformed"] == [2, 0, 1, 0]
    finally:
        client.close()


@settings(max_examples=60, deadline=None)
@given(pipe=st.integers(0, 255), port=st.integers(1, 509))
def test_any_default_pipe_is_applied_or_refused_as_an_entry_would_be(pipe, port):
    """ "Default Entry": "Apart from the above restrictions, the default entry is treated like a
    regular entry": a default `set_pipeline(pipe)` is refused exactly when an entry with that
    pipe is (INVALID_ARGUMENT past MAX_PIPES) and, when taken, puts every port without an entry
    in that pipe (the pipe a malformed frame is counted in)."""

    def taken(entity: p4r.Entity) -> bool:
        entities = Entities(Schema(load_p4info()), Pipeline())
        try:
            entities.write(
                p4r.Update(
                    type=p4r.Update.MODIFY
                    if entity.table_entry.is_default_action
                    else p4r.Update.INSERT,
                    entity=entity,
                )
            )
        except P4Error as exc:
            assert exc.code == grpc.StatusCode.INVALID_ARGUMENT
            return False
        return True

    client = Client.__new__(Client)  # only its by-name entity builders
    client.p4info = load_p4info()
    default = _default_of(client, "port_pipeline", "set_pipeline", pipe=pipe)
    entry = client.table_entry("port_pipeline", {"ingress_port": port}, "set_pipeline", pipe=pipe)
    assert taken(default) == taken(entry) == (pipe < MAX_PIPES)
    if pipe < MAX_PIPES:
        pipeline = Pipeline()
        Entities(Schema(load_p4info()), pipeline).write(
            p4r.Update(type=p4r.Update.MODIFY, entity=default)
        )
        pipeline.process(port, bytes(Ether() / IP() / UDP(dport=INA_UDP_PORT) / (b"\0" * 20)))
        assert pipeline.counters["malformed"] == [int(i == pipe) for i in range(MAX_PIPES)]
