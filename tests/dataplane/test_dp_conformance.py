"""P4Runtime v1.4 conformance of the embedded target, one rule of the spec per test.

Each test names the spec section it checks and quotes the rule; the target is a real `ina
switch` process (no interfaces: P4Runtime only, no root) driven over gRPC by a client with
gRPC's default settings.
"""

from __future__ import annotations

import grpc
import pytest
from finsy.proto import p4i, p4r, rpc_status

from dataplane.frame import MAX_PIPES
from dataplane.p4rt_client import Client, WriteFailed
from dataplane.schema import load_p4info

DEVICE_ID = 1


@pytest.fixture
def primary(embedded_switch) -> Client:
    client = Client(embedded_switch, DEVICE_ID, 10, load_p4info())
    client.set_pipeline()
    yield client
    client.close()


def _slots(client: Client, job: int, *, base: int = 0, count: int = 8) -> p4r.Entity:
    return client.table_entry("job_slots", {"job": job, "generation": 0}, "set_job_slots",
                              base=base, count=count)


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
    """"Write RPC": an update "can be one of the following types: INSERT, MODIFY, DELETE";
    UNSPECIFIED (0) is none of them, so it is malformed: INVALID_ARGUMENT, nothing applied."""
    codes = _write(primary, (p4r.Update.UNSPECIFIED, _slots(primary, 1)),
                   (p4r.Update.INSERT, _slots(primary, 2)))
    assert codes == [grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.OK]
    assert primary.read(_all_of(primary, "job_slots")) == [_slots(primary, 2)]


def test_is_const_in_a_written_entry_is_rejected(primary):
    """"TableEntry": "The `const` field must be `false` in any `INSERT`, `MODIFY`, or `DELETE`
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
    """"Constant Tables": "If the P4Runtime client attempts to perform any other kind of write
    update on a constant table the server must return a `PERMISSION_DENIED` error." """
    p4info = load_p4info()
    next(t for t in p4info.tables if t.preamble.name == "InaIngress.ipv4_lpm").is_const_table = True
    client = Client(embedded_switch, DEVICE_ID, 10, p4info)
    try:
        client.set_pipeline()
        route = client.table_entry("ipv4_lpm", {"dst_addr": (0x0A000000, 8)}, "forward", port=2)
        assert _write(client, (p4r.Update.INSERT, route), (p4r.Update.INSERT, _slots(client, 1))) \
            == [grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.OK]
        assert client.read(_all_of(client, "ipv4_lpm")) == []
    finally:
        client.close()


@pytest.mark.parametrize("kind", ["unknown enum value", "other_match_type", "UNSPECIFIED"])
def test_a_p4info_with_an_unknown_match_type_is_refused(primary, kind):
    """"SetForwardingPipelineConfig RPC", VERIFY_AND_COMMIT: "Returns an `INVALID_ARGUMENT` error
    if the forwarding config is not provided or if the provided config cannot be realized."
    The pipeline in place stays."""
    primary.write(_slots(primary, 1))
    p4info = load_p4info()
    field = next(t for t in p4info.tables
                 if t.preamble.name == "InaIngress.ipv4_lpm").match_fields[0]
    if kind == "unknown enum value":
        field.match_type = 99  # proto3 keeps unknown enum values
    elif kind == "other_match_type":
        field.other_match_type = "custom"
    else:
        field.match_type = p4i.MatchField.UNSPECIFIED
    request = p4r.SetForwardingPipelineConfigRequest(
        device_id=DEVICE_ID, action=p4r.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT)
    request.election_id.low = primary.election_id
    request.config.p4info.CopyFrom(p4info)
    with pytest.raises(grpc.RpcError) as failure:
        primary.stub.SetForwardingPipelineConfig(request, timeout=10)
    assert failure.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "dst_addr" in failure.value.details()
    assert primary.read(_all_of(primary, "job_slots")) == [_slots(primary, 1)]


def test_a_read_of_all_tables_takes_no_other_filter(primary):
    """"Wildcard Reads" (TableEntry): "`table_id`: If default (0), entries from all tables ...
    will be selected and no other filter can be used." A match with table_id 0 is an invalid
    request: INVALID_ARGUMENT, not an internal failure (UNKNOWN)."""
    primary.write(_slots(primary, 1))
    query = _slots(primary, 1)
    query.table_entry.table_id = 0
    query.table_entry.ClearField("action")
    with pytest.raises(grpc.RpcError) as failure:
        primary.read(query)
    assert failure.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert primary.read(p4r.Entity(table_entry=p4r.TableEntry())) == [_slots(primary, 1)]


@pytest.mark.parametrize(("where", "value"), [
    ("match", b""), ("match", b"\x01\x00\x00"),  # job is bit<16>
    ("param", b""), ("param", b"\x01\x00\x00\x00\x00"),  # base is bit<32>
])
def test_out_of_range_bytestrings_are_out_of_range(primary, where, value):
    """"Bytestrings": "If the string's byte length is zero, the server always rejects the string.
    When the server rejects a binary string due to any of the previous criteria [a value that
    does not fit the bitwidth], it returns an `OUT_OF_RANGE` error." """
    entry = _slots(primary, 1)
    target = (entry.table_entry.match[0].exact if where == "match"
              else entry.table_entry.action.action.params[0])
    target.value = value
    assert _write(primary, (p4r.Update.INSERT, entry)) == [grpc.StatusCode.OUT_OF_RANGE]


def test_leading_zero_bytes_are_accepted_and_read_back_canonical(primary):
    """"Bytestrings": "a P4Runtime server must accept a wide assortment of possible binary string
    encodings for the same integer value"; "Read-Write Symmetry": reads use the shortest."""
    entry = _slots(primary, 0x63)
    entry.table_entry.match[0].exact.value = b"\x00\x63"
    assert _write(primary, (p4r.Update.INSERT, entry)) == []
    assert primary.read(_all_of(primary, "job_slots")) == [_slots(primary, 0x63)]


def _counter(client: Client, index: int | None, packets: int | None = None) -> p4r.Entity:
    spec = next(c for c in client.p4info.counters
                if c.preamble.name == "InaIngress.collisions")
    entity = p4r.Entity()
    entity.counter_entry.counter_id = spec.preamble.id
    if index is not None:
        entity.counter_entry.index.index = index
    if packets is not None:
        entity.counter_entry.data.packet_count = packets
    return entity


def test_counter_indices_follow_the_spec(primary):
    """"CounterEntry": "The server must return `INVALID_ARGUMENT` for a negative index value and
    `OUT_OF_RANGE` if the index value exceeds the size of the counter array"; "the counter value
    is not modified if this Protobuf field [data] is not set"."""
    modify = p4r.Update.MODIFY
    assert _write(primary, (modify, _counter(primary, -1, 5)), (modify, _counter(primary, 1, 7)),
                  (modify, _counter(primary, MAX_PIPES, 5))) == [
        grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.OK, grpc.StatusCode.OUT_OF_RANGE]
    assert primary.counter("collisions") == [0, 7, 0, 0]
    assert _write(primary, (modify, _counter(primary, 1))) == []  # no data: unchanged
    assert primary.counter("collisions") == [0, 7, 0, 0]
    for index, code in ((-1, grpc.StatusCode.INVALID_ARGUMENT),
                        (MAX_PIPES, grpc.StatusCode.OUT_OF_RANGE)):
        with pytest.raises(grpc.RpcError) as failure:
            primary.read(_counter(primary, index))
        assert failure.value.code() == code


def test_there_is_no_primary_after_the_primary_leaves_until_an_id_as_high_arrives(
        embedded_switch, primary):
    """"Client Arbitration and Controller Replication": when a primary channel gets broken, "the
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
    """"Error Reporting": "The number of `p4.Error` messages packed into
    `google.rpc.Status.details` field should therefore always match the number of updates in
    the `WriteRequest`, and the order of `p4.Error` messages must be in the same order as the
    corresponding updates." The client here has gRPC's default 8 KiB metadata limit."""
    primary.write(*(_slots(primary, job) for job in range(0, 300, 3)))  # every third exists
    batch = [_slots(primary, job, count=8 if job % 2 else 99999) for job in range(300)]
    # Independent expectation: existing keys collide first; new ones fail on the bad count.
    expected = [grpc.StatusCode.ALREADY_EXISTS if job % 3 == 0
                else grpc.StatusCode.OK if job % 2 else grpc.StatusCode.INVALID_ARGUMENT
                for job in range(300)]
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
