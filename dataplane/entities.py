"""P4Runtime entities of the embedded target: validation, storage for Read, and the pipeline.

Each accepted update is stored in canonical form (so Read returns exactly what was written,
"Read-Write Symmetry") and translated into the `Forwarding` dictionaries the pipeline uses.
Errors are `P4Error`s carrying the canonical gRPC code the spec (v1.4) asks for, section by
section: "Write RPC" (update types), "TableEntry" (`is_const`), "Constant Tables",
"Bytestrings" (OUT_OF_RANGE), "CounterEntry" (index), "Wildcard Reads", "Default Entry".

Every table has a default entry, read and modified with `is_default_action` set; it starts as
the P4Info's `initial_default_action`. Its action takes effect where the program runs a
table's action on a miss (`port_pipeline`, `ina_aggregate`); the other tables act only on a hit
(`.apply().hit` in p4src/ina.p4), so their default entries are stored and read back only.
"""

from __future__ import annotations

from collections.abc import Iterator

from finsy.proto import p4i, p4r
from grpc import StatusCode

from dataplane.frame import MAX_PIPES, PORTS, SLOTS_PER_PIPE
from dataplane.pipeline import COUNTERS, FROM_QUEUE, Aggregate, Pipeline
from dataplane.schema import COUNTER_PREFIX, Schema

Key = tuple[tuple[int, bytes, int], ...]
Params = dict[str, int]  # action parameters by name
INSERT, MODIFY, DELETE = p4r.Update.INSERT, p4r.Update.MODIFY, p4r.Update.DELETE


class P4Error(Exception):
    """A rejected update or read, with its canonical code."""

    def __init__(self, code: StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def canonical(value: bytes, bitwidth: int, what: str) -> bytes:
    """P4Runtime canonical bytestring: no leading zero bytes, at least one byte, fits width.

    "Bytestrings": an empty string or a value wider than the field is rejected with
    OUT_OF_RANGE; leading zero bytes are accepted and dropped.
    """
    if not value:
        raise P4Error(StatusCode.OUT_OF_RANGE, f"{what}: empty bytestring")
    number = int.from_bytes(value, "big")
    if number >> bitwidth:
        raise P4Error(StatusCode.OUT_OF_RANGE, f"{what}: value does not fit {bitwidth} bits")
    return number.to_bytes(max(1, (number.bit_length() + 7) // 8), "big")


class Entities:
    """Table entries, multicast groups, clone sessions and counters of one pipeline config."""

    def __init__(self, schema: Schema, pipeline: Pipeline) -> None:
        self.schema = schema
        self.pipeline = pipeline
        self.tables: dict[int, dict[Key, p4r.TableEntry]] = {t: {} for t in schema.tables}
        self.groups: dict[int, p4r.MulticastGroupEntry] = {}
        self.sessions: dict[int, p4r.CloneSessionEntry] = {}
        self._translate = {
            schema.table_named(f"InaIngress.{name}").id: fn
            for name, fn in (
                ("port_pipeline", self._port_pipeline),
                ("job_slots", self._job_slots),
                ("ina_aggregate", self._aggregate),
                ("ina_forward", self._forward),
                ("result_multicast", self._result),
                ("ipv4_lpm", self._lpm),
                ("host_port", self._host_port),
                ("host_job", self._host_job),
            )
        }
        self._translate[schema.table_named("InaEgress.mark_threshold").id] = self._mark_threshold
        self._translate[schema.table_named("InaEgress.named_host").id] = self._named_host
        self._counters = {
            c.id: c.name.removeprefix(COUNTER_PREFIX)
            for c in schema.counters.values()
            if c.name.removeprefix(COUNTER_PREFIX) in COUNTERS
        }
        # "Constant Tables": a P4Info may declare any table `is_const_table`.
        self._const_tables = {t.preamble.id for t in schema.p4info.tables if t.is_const_table}
        self._const_defaults = {
            t.preamble.id for t in schema.p4info.tables if t.const_default_action_id
        }
        self._default_effect = {
            schema.table_named("InaIngress.port_pipeline").id: self._default_pipe,
            schema.table_named("InaIngress.ina_aggregate").id: self._default_aggregate,
        }
        self._initial_defaults = {
            t.preamble.id: self._initial_default(t) for t in schema.p4info.tables
        }
        self.defaults: dict[int, p4r.TableEntry] = {}
        for table_id, entry in self._initial_defaults.items():
            self._set_default(table_id, entry)

    # *** Write

    def write(self, update: p4r.Update) -> None:
        if update.type not in (INSERT, MODIFY, DELETE):
            raise P4Error(
                StatusCode.INVALID_ARGUMENT,
                f"Update.type {update.type} is not INSERT, MODIFY or DELETE",
            )
        kind = update.entity.WhichOneof("entity")
        if kind is None:
            raise P4Error(StatusCode.INVALID_ARGUMENT, "the update's entity is not set")
        if kind == "table_entry":
            self._write_table(update.type, update.entity.table_entry)
        elif kind == "packet_replication_engine_entry":
            pre = update.entity.packet_replication_engine_entry
            if pre.WhichOneof("type") == "multicast_group_entry":
                self._write_group(update.type, pre.multicast_group_entry)
            elif pre.WhichOneof("type") == "clone_session_entry":
                self._write_session(update.type, pre.clone_session_entry)
            else:
                raise P4Error(StatusCode.INVALID_ARGUMENT, "empty PacketReplicationEngineEntry")
        elif kind == "counter_entry":
            self._write_counter(update.type, update.entity.counter_entry)
        else:
            raise P4Error(StatusCode.UNIMPLEMENTED, f"writing {kind} is not supported")

    def _write_table(self, kind: int, entry: p4r.TableEntry) -> None:
        table = self.schema.tables.get(entry.table_id)
        if table is None:  # "Write RPC": a malformed entity is INVALID_ARGUMENT
            raise P4Error(StatusCode.INVALID_ARGUMENT, f"unknown table id {entry.table_id}")
        if entry.is_const:
            raise P4Error(
                StatusCode.INVALID_ARGUMENT, f"{table.name}: is_const must be false in a write"
            )
        if entry.is_default_action:  # allowed on a constant table too ("Constant Tables")
            self._write_default(kind, table.id, entry)
            return
        if table.id in self._const_tables:
            raise P4Error(StatusCode.PERMISSION_DENIED, f"{table.name} is a constant table")
        if entry.priority:
            raise P4Error(
                StatusCode.INVALID_ARGUMENT,
                f"{table.name} has no ternary/range field: priority must be 0",
            )
        key = self._key(table.id, entry)
        rows = self.tables[table.id]
        if kind == DELETE:
            if key not in rows:
                raise P4Error(StatusCode.NOT_FOUND, f"{table.name}: no such entry")
            del rows[key]
            self._translate[table.id](key, None)
            return
        if kind == INSERT and key in rows:
            raise P4Error(StatusCode.ALREADY_EXISTS, f"{table.name}: entry already exists")
        if kind == MODIFY and key not in rows:
            raise P4Error(StatusCode.NOT_FOUND, f"{table.name}: no such entry")
        if kind == INSERT and len(rows) >= table.size:
            raise P4Error(StatusCode.RESOURCE_EXHAUSTED, f"{table.name} is full ({table.size})")
        stored = p4r.TableEntry(table_id=table.id)
        for field_id, value, prefix in key:
            match = stored.match.add(field_id=field_id)
            if table.fields[field_id].match_type == "LPM":
                match.lpm.value, match.lpm.prefix_len = value, prefix
            else:
                match.exact.value = value
        action_id, params = self._action(table.id, entry)
        stored.action.action.action_id = action_id
        for param_id, value in sorted(params.items()):
            stored.action.action.params.add(param_id=param_id, value=value)
        stored.metadata = entry.metadata
        action = self.schema.actions[action_id]
        named = {action.params[i][0]: _int(v) for i, v in params.items()}
        self._translate[table.id](key, None if action.name == "NoAction" else named)
        rows[key] = stored

    # *** Default entries ("Default Entry")

    def _write_default(self, kind: int, table_id: int, entry: p4r.TableEntry) -> None:
        """MODIFY sets the default action (an unset action resets it to the initial one);
        INSERT and DELETE are INVALID_ARGUMENT, a constant default PERMISSION_DENIED."""
        name = self.schema.tables[table_id].name
        if kind != MODIFY:
            raise P4Error(
                StatusCode.INVALID_ARGUMENT,
                f"{name}: the default entry is always "
                "set: it can only be modified, not inserted or deleted",
            )
        _check_default_key(name, entry)
        if table_id in self._const_defaults:
            raise P4Error(StatusCode.PERMISSION_DENIED, f"{name}: the default action is const")
        if not entry.HasField("action"):
            self._set_default(table_id, self._initial_defaults[table_id])
            return
        stored = p4r.TableEntry(table_id=table_id, is_default_action=True, metadata=entry.metadata)
        action_id, params = self._action(table_id, entry)
        stored.action.action.action_id = action_id
        for param_id, value in sorted(params.items()):
            stored.action.action.params.add(param_id=param_id, value=value)
        self._set_default(table_id, stored)

    def _set_default(self, table_id: int, stored: p4r.TableEntry) -> None:
        """Store a validated default entry, first giving its action to the pipeline."""
        effect = self._default_effect.get(table_id)
        if effect is not None:
            action = self.schema.actions.get(stored.action.action.action_id)
            effect(
                None
                if action is None or action.name == "NoAction"
                else {
                    action.params[p.param_id][0]: _int(p.value) for p in stored.action.action.params
                }
            )
        self.defaults[table_id] = stored

    def _initial_default(self, table: p4i.Table) -> p4r.TableEntry:
        """The P4Info's `initial_default_action` as a default entry ("if no explicit default
        action is set, the identifier of this field will default to the id of the `NoAction`
        action")."""
        call = table.initial_default_action
        no_action = next(
            (
                a.id
                for a in self.schema.actions.values()
                if a.name == "NoAction" and a.id in self.schema.tables[table.preamble.id].action_ids
            ),
            0,
        )
        action_id = call.action_id or table.const_default_action_id or no_action
        entry = p4r.TableEntry(table_id=table.preamble.id, is_default_action=True)
        if action_id:
            entry.action.action.action_id = action_id
            for argument in call.arguments:
                entry.action.action.params.add(param_id=argument.param_id, value=argument.value)
            # the same checks as a client's action: arguments canonical, all present
            action_id, params = self._action(table.preamble.id, entry)
            entry.action.action.ClearField("params")
            for param_id, value in sorted(params.items()):
                entry.action.action.params.add(param_id=param_id, value=value)
        return entry

    def _default_pipe(self, action: Params | None) -> None:
        self.pipeline.fwd.default_pipe = 0 if action is None else _pipe(action)

    def _default_aggregate(self, action: Params | None) -> None:
        self.pipeline.fwd.default_aggregate = None if action is None else _aggregation(action)

    def _key(self, table_id: int, entry: p4r.TableEntry) -> Key:
        table = self.schema.tables[table_id]
        seen: dict[int, tuple[int, bytes, int]] = {}
        for match in entry.match:
            spec = table.fields.get(match.field_id)
            if spec is None or match.field_id in seen:
                raise P4Error(
                    StatusCode.INVALID_ARGUMENT,
                    f"{table.name}: bad or repeated match field id {match.field_id}",
                )
            what = f"{table.name}.{spec.name}"
            if spec.match_type == "EXACT" and match.WhichOneof("field_match_type") == "exact":
                seen[spec.id] = (spec.id, canonical(match.exact.value, spec.bitwidth, what), 0)
            elif spec.match_type == "LPM" and match.WhichOneof("field_match_type") == "lpm":
                prefix = match.lpm.prefix_len
                value = canonical(match.lpm.value, spec.bitwidth, what)
                number = int.from_bytes(value, "big")
                if not 0 < prefix <= spec.bitwidth:
                    raise P4Error(
                        StatusCode.INVALID_ARGUMENT,
                        f"{what}: bad prefix_len {prefix} (omit the field for a /0 match)",
                    )
                if number & ((1 << (spec.bitwidth - prefix)) - 1):
                    raise P4Error(StatusCode.INVALID_ARGUMENT, f"{what}: bits set past prefix")
                seen[spec.id] = (spec.id, value, prefix)
            else:
                raise P4Error(
                    StatusCode.INVALID_ARGUMENT,
                    f"{what}: expected a {spec.match_type.lower()} match",
                )
        for spec in table.fields.values():
            if spec.match_type == "EXACT" and spec.id not in seen:
                raise P4Error(
                    StatusCode.INVALID_ARGUMENT, f"{table.name}: exact field {spec.name} missing"
                )
        return tuple(seen[i] for i in sorted(seen))

    def _action(self, table_id: int, entry: p4r.TableEntry) -> tuple[int, dict[int, bytes]]:
        table = self.schema.tables[table_id]
        if entry.action.WhichOneof("type") != "action":
            raise P4Error(StatusCode.INVALID_ARGUMENT, f"{table.name}: a direct action is needed")
        action = self.schema.actions.get(entry.action.action.action_id)
        if action is None or action.id not in table.action_ids:
            raise P4Error(
                StatusCode.INVALID_ARGUMENT,
                f"{table.name}: action id {entry.action.action.action_id} not allowed",
            )
        # "Action": an action used against its P4Info scope is PERMISSION_DENIED.
        if action.id in (table.table_only if entry.is_default_action else table.default_only):
            raise P4Error(
                StatusCode.PERMISSION_DENIED,
                f"{table.name}: {action.name} is "
                f"{'table' if entry.is_default_action else 'default'}-only here",
            )
        params: dict[int, bytes] = {}
        for param in entry.action.action.params:
            spec = action.params.get(param.param_id)
            if spec is None or param.param_id in params:
                raise P4Error(
                    StatusCode.INVALID_ARGUMENT,
                    f"{action.name}: bad or repeated param id {param.param_id}",
                )
            params[param.param_id] = canonical(param.value, spec[1], f"{action.name}.{spec[0]}")
        if set(params) != set(action.params):
            raise P4Error(StatusCode.INVALID_ARGUMENT, f"{action.name}: params missing")
        return action.id, params

    def _write_group(self, kind: int, group: p4r.MulticastGroupEntry) -> None:
        self._write_pre(kind, group.multicast_group_id, group, self.groups, "multicast group")
        self.pipeline.fwd.mcast.pop(group.multicast_group_id, None)
        if kind != DELETE:
            self.pipeline.fwd.mcast[group.multicast_group_id] = [
                (r.egress_port, r.instance) for r in group.replicas
            ]

    def _write_session(self, kind: int, session: p4r.CloneSessionEntry) -> None:
        self._write_pre(kind, session.session_id, session, self.sessions, "clone session")
        self.pipeline.fwd.clone.pop(session.session_id, None)
        if kind != DELETE:
            self.pipeline.fwd.clone[session.session_id] = [r.egress_port for r in session.replicas]

    @staticmethod
    def _write_pre(
        kind: int,
        ident: int,
        entry: p4r.MulticastGroupEntry | p4r.CloneSessionEntry,
        store: dict,
        what: str,
    ) -> None:
        if ident == 0:
            raise P4Error(StatusCode.INVALID_ARGUMENT, f"{what} id must be > 0")
        replicas = [(r.egress_port, r.instance) for r in entry.replicas]
        if len(set(replicas)) != len(replicas):
            raise P4Error(StatusCode.INVALID_ARGUMENT, f"{what} {ident}: repeated replica")
        if any(not 0 < port < PORTS for port, _ in replicas):
            raise P4Error(StatusCode.INVALID_ARGUMENT, f"{what} {ident}: port out of range")
        if kind == INSERT and ident in store:
            raise P4Error(StatusCode.ALREADY_EXISTS, f"{what} {ident} already exists")
        if kind != INSERT and ident not in store:
            raise P4Error(StatusCode.NOT_FOUND, f"{what} {ident} does not exist")
        if kind == DELETE:
            del store[ident]
        else:
            store[ident] = type(entry)()
            store[ident].CopyFrom(entry)

    def _write_counter(self, kind: int, entry: p4r.CounterEntry) -> None:
        name = self._counter_name(entry.counter_id)
        if kind != MODIFY:
            raise P4Error(StatusCode.INVALID_ARGUMENT, "counters can only be modified")
        cells = self.pipeline.counters[name]
        indices = [entry.index.index] if entry.HasField("index") else range(len(cells))
        for index in indices:
            _check_index(name, index, len(cells))
        if entry.HasField("data"):  # unset data: the value is not modified
            for index in indices:
                cells[index] = entry.data.packet_count

    # *** Translation into the pipeline's dictionaries; `action` None means the entry is gone.

    def _counter_name(self, counter_id: int) -> str:
        """The pipeline's name of a counter; an id not in the P4Info is a malformed entity."""
        name = self._counters.get(counter_id)
        if name is None:
            if counter_id in self.schema.counters:
                raise P4Error(
                    StatusCode.UNIMPLEMENTED,
                    f"counter {counter_id} "
                    f"({self.schema.counters[counter_id].name}) is not implemented",
                )
            raise P4Error(StatusCode.INVALID_ARGUMENT, f"unknown counter id {counter_id}")
        return name

    def _port_pipeline(self, key: Key, action: Params | None) -> None:
        port = _int(key[0][1])
        if action is None:
            self.pipeline.fwd.port_pipe.pop(port, None)
        else:
            self.pipeline.fwd.port_pipe[port] = _pipe(action)

    def _host_port(self, key: Key, action: Params | None) -> None:
        port = _int(key[0][1])
        if action is None:
            self.pipeline.fwd.host_ports.discard(port)
        else:
            self.pipeline.fwd.host_ports.add(port)

    def _host_job(self, key: Key, action: Params | None) -> None:
        bound = (_int(key[0][1]), _int(key[1][1]))
        if action is None:
            self.pipeline.fwd.host_jobs.discard(bound)
        else:
            self.pipeline.fwd.host_jobs.add(bound)

    def _mark_threshold(self, key: Key, action: Params | None) -> None:
        port = _int(key[0][1])
        if action is None:
            self.pipeline.fwd.mark_depth.pop(port, None)
        else:
            # mark_above(depth), or mark_from_queue(): half of the port's own queue
            self.pipeline.fwd.mark_depth[port] = action.get("depth", FROM_QUEUE)

    def _named_host(self, key: Key, action: Params | None) -> None:
        match = (_int(key[0][1]), _int(key[1][1]))
        if action is None:
            self.pipeline.fwd.named_host.pop(match, None)
        else:
            self.pipeline.fwd.named_host[match] = action["addr"]

    def _job_slots(self, key: Key, action: Params | None) -> None:
        job, generation = _int(key[0][1]), _int(key[1][1])
        if action is None:
            self.pipeline.fwd.job_slots.pop((job, generation), None)
            return
        base, count = action["base"], action["count"]
        if count < 1 or base + count > SLOTS_PER_PIPE:
            raise P4Error(
                StatusCode.INVALID_ARGUMENT,
                f"job {job}: slots [{base}, {base + count}) not within 1..{SLOTS_PER_PIPE}",
            )
        self.pipeline.fwd.job_slots[(job, generation)] = (base, count)

    def _aggregate(self, key: Key, action: Params | None) -> None:
        match = tuple(_int(v) for _, v, _ in key)
        if action is None:
            self.pipeline.fwd.aggregate.pop(match, None)  # type: ignore[arg-type]
        else:
            self.pipeline.fwd.aggregate[match] = _aggregation(action)  # type: ignore[index]

    def _forward(self, key: Key, action: Params | None) -> None:
        match = tuple(_int(v) for _, v, _ in key)
        if action is None:
            self.pipeline.fwd.forward.pop(match, None)  # type: ignore[arg-type]
        else:
            self.pipeline.fwd.forward[match] = action["port"]  # type: ignore[index]

    def _result(self, key: Key, action: Params | None) -> None:
        match = tuple(_int(v) for _, v, _ in key)
        if action is None:
            self.pipeline.fwd.result_group.pop(match, None)  # type: ignore[arg-type]
        else:
            self.pipeline.fwd.result_group[match] = action["group"]  # type: ignore[index]

    def _lpm(self, key: Key, action: Params | None) -> None:
        prefix = (key[0][2], _int(key[0][1])) if key else (0, 0)
        if action is None:
            self.pipeline.fwd.lpm.pop(prefix, None)
        else:
            self.pipeline.fwd.lpm[prefix] = action["port"]
        self.pipeline.lpm_changed()

    # *** Read

    def read(self, entity: p4r.Entity) -> Iterator[p4r.Entity]:
        kind = entity.WhichOneof("entity")
        if kind is None:
            raise P4Error(StatusCode.INVALID_ARGUMENT, "the entity to read is not set")
        if kind == "table_entry":
            yield from self._read_tables(entity.table_entry)
        elif kind == "counter_entry":
            yield from self._read_counters(entity.counter_entry)
        elif kind == "packet_replication_engine_entry":
            pre = entity.packet_replication_engine_entry
            if pre.WhichOneof("type") == "multicast_group_entry":
                wanted = pre.multicast_group_entry.multicast_group_id
                for ident, group in sorted(self.groups.items()):
                    if wanted in (0, ident):
                        out = p4r.Entity()
                        out.packet_replication_engine_entry.multicast_group_entry.CopyFrom(group)
                        yield out
            elif pre.WhichOneof("type") == "clone_session_entry":
                wanted = pre.clone_session_entry.session_id
                for ident, session in sorted(self.sessions.items()):
                    if wanted in (0, ident):
                        out = p4r.Entity()
                        out.packet_replication_engine_entry.clone_session_entry.CopyFrom(session)
                        yield out
        else:
            raise P4Error(StatusCode.UNIMPLEMENTED, f"reading {kind} is not supported")

    def _read_tables(self, request: p4r.TableEntry) -> Iterator[p4r.Entity]:
        if request.table_id and request.table_id not in self.tables:
            raise P4Error(StatusCode.INVALID_ARGUMENT, f"unknown table id {request.table_id}")
        if not request.table_id and (
            request.match
            or request.HasField("action")
            or request.priority
            or request.controller_metadata
            or request.metadata
            or request.is_default_action
        ):
            raise P4Error(
                StatusCode.INVALID_ARGUMENT,
                "a read of all tables (table_id 0) takes no other filter",
            )
        if request.is_default_action:  # "Wildcard Reads": only the default entry
            _check_default_key(self.schema.tables[request.table_id].name, request)
            out = p4r.Entity()
            out.table_entry.CopyFrom(self.defaults[request.table_id])
            yield out
            return
        ids = [request.table_id] if request.table_id else sorted(self.tables)
        key = self._key(request.table_id, request) if request.match else None
        for table_id in ids:
            for row_key, entry in self.tables[table_id].items():
                if key is None or key == row_key:
                    out = p4r.Entity()
                    out.table_entry.CopyFrom(entry)
                    yield out

    def _read_counters(self, request: p4r.CounterEntry) -> Iterator[p4r.Entity]:
        if request.counter_id:
            self._counter_name(request.counter_id)
        ids = [request.counter_id] if request.counter_id else sorted(self._counters)
        for counter_id in ids:
            cells = self.pipeline.counters[self._counters[counter_id]]
            indices = [request.index.index] if request.HasField("index") else range(len(cells))
            for index in indices:
                _check_index(self._counters[counter_id], index, len(cells))
                out = p4r.Entity()
                out.counter_entry.counter_id = counter_id
                out.counter_entry.index.index = index
                out.counter_entry.data.packet_count = cells[index]
                yield out


def _check_default_key(table: str, entry: p4r.TableEntry) -> None:
    """ "Default Entry": "the repeated `match` field must be empty and the `priority` field must
    be set to zero, otherwise the P4Runtime server must return an `INVALID_ARGUMENT`"."""
    if entry.match or entry.priority:
        raise P4Error(
            StatusCode.INVALID_ARGUMENT,
            f"{table}: the default entry has no match key and priority 0",
        )


def _pipe(action: Params) -> int:
    pipe = action["pipe"]
    if pipe >= MAX_PIPES:
        raise P4Error(StatusCode.INVALID_ARGUMENT, f"pipe {pipe} >= MAX_PIPES {MAX_PIPES}")
    return pipe


def _aggregation(action: Params) -> Aggregate:
    tag, member, full = action["tag"], action["member"], action["full"]
    if tag == 0 or member.bit_count() != 1 or not member & full:
        raise P4Error(
            StatusCode.INVALID_ARGUMENT, "aggregate: tag must be non-zero, member one bit of full"
        )
    return Aggregate(
        tag, member, full, action["out_flow"], action["next_node"], action["name_group"]
    )


def _check_index(counter: str, index: int, size: int) -> None:
    """ "CounterEntry": a negative index is INVALID_ARGUMENT, one past the array OUT_OF_RANGE."""
    if index < 0:
        raise P4Error(StatusCode.INVALID_ARGUMENT, f"{counter}: negative index {index}")
    if index >= size:
        raise P4Error(StatusCode.OUT_OF_RANGE, f"{counter}: index {index} >= size {size}")


def _int(value: bytes) -> int:
    return int.from_bytes(value, "big")
