"""The os-ken app that programs the plain switches (Open vSwitch) over OpenFlow 1.3.

The controller is an os-ken app. Ryu 4.34 does not run on Python 3.11: it does not build with
current setuptools and, built by hand, fails at import (`cannot import name 'ALREADY_HANDLED'
from 'eventlet.wsgi'`), while older eventlet releases break on 3.11 in other ways. os-ken,
OpenStack's maintained fork, keeps Ryu's app model and runs on native threads; it ships no
`osken-manager` CLI, so `serve` starts the app through `cfg.CONF` and `AppManager` itself, and
`python -m controller.southbound.openflow` is its command line.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

from os_ken import cfg
from os_ken.base.app_manager import AppManager, OSKenApp
from os_ken.controller import controller as _registers_ofp_options  # noqa: F401
from os_ken.controller import ofp_event
from os_ken.controller.handler import (
    CONFIG_DISPATCHER,
    DEAD_DISPATCHER,
    MAIN_DISPATCHER,
    set_ev_cls,
)
from os_ken.lib import hub
from os_ken.ofproto import ofproto_v1_3

from controller.southbound.openflow.follow import DaemonFollower, Follow
from controller.southbound.openflow.messages import send_barrier, send_tables, wipe
from controller.southbound.openflow.rules import SwitchTables, by_dpid

log = logging.getLogger(__name__)


class PlainSwitchApp(DaemonFollower, OSKenApp):
    """Keeps every plain switch holding the plan versions in use: the newest, and the older
    ones until they have drained. A switch that connects is wiped and gets all of them, so a
    reconnect after a switch or controller restart gets exactly the plans again; with
    `ina_follow`, versions the daemon announces are added beside the old ones (make) and the
    old ones deleted after the drain time (break)."""

    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]  # noqa: RUF012 (os-ken reads this attribute)

    def __init__(
        self,
        *args,
        ina_tables: dict[str, SwitchTables],
        ina_state: Path | None,
        ina_version: int = 1,
        ina_follow: Follow | None = None,
        **kwargs,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.names = {t.datapath_id: t.switch for t in ina_tables.values()}
        self.versions = {ina_version: by_dpid(ina_tables)}  # version → datapath id → tables
        self.confirmed = self.published = ina_version
        self.retire_at: dict[int, float] = {}  # version → time.monotonic() of its deletion
        self.state = ina_state
        self.follow = ina_follow
        self.pushes: dict[str, list[float]] = {s: [] for s in ina_tables}
        self.datapaths: dict[int, Any] = {}  # connected switches (os-ken's), by datapath id
        self.pending: dict[tuple[int, int], tuple[str, float]] = {}  # (dpid, barrier xid)
        self.acks: dict[tuple[int, int], threading.Event] = {}
        # Sends to a switch happen in os-ken's event thread (connects) and in the follower
        # thread (new versions, retirements); one lock keeps each batch whole and ordered.
        self.lock = threading.RLock()
        self.state_lock = threading.Lock()

    def start(self):
        super().start()
        if self.follow is not None:
            self.threads.append(hub.spawn(self._follow_daemon))

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def switch_connected(self, ev) -> None:
        dp = ev.msg.datapath
        started = time.monotonic()
        with self.lock:
            wipe(dp)
            if dp.id not in self.names:
                log.warning("datapath %016x is no plain switch of the topology: left empty", dp.id)
                return
            for version, tables in sorted(self.versions.items()):  # the newest wins shared rules
                send_tables(dp, tables[dp.id], version)
            self.datapaths[dp.id] = dp
            self.pending[(dp.id, send_barrier(dp))] = (self.names[dp.id], started)

    @set_ev_cls(ofp_event.EventOFPStateChange, DEAD_DISPATCHER)
    def switch_gone(self, ev) -> None:
        with self.lock:
            dp = ev.datapath
            if dp.id in self.datapaths and self.datapaths[dp.id] is dp:
                del self.datapaths[dp.id]

    @set_ev_cls(ofp_event.EventOFPBarrierReply, MAIN_DISPATCHER)
    def installed(self, ev) -> None:
        key = (ev.msg.datapath.id, ev.msg.xid)
        if (ack := self.acks.pop(key, None)) is not None:
            ack.set()
            return
        done = self.pending.pop(key, None)
        if done is None:
            return
        switch, started = done
        self.pushes[switch].append(round(time.monotonic() - started, 4))
        log.info("%s: plan version(s) %s installed", switch, sorted(self.versions))
        self._write_state()

    @set_ev_cls(ofp_event.EventOFPErrorMsg, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def error(self, ev) -> None:
        log.error(
            "datapath %016x refused a message: type %d code %d",
            ev.msg.datapath.id,
            ev.msg.type,
            ev.msg.code,
        )

    def _write_state(self) -> None:
        if self.state is None:
            return
        with self.lock:
            versions = sorted(self.versions)
        with self.state_lock:
            write_state(self.state, self.pushes, self.confirmed, versions)


def serve(
    tables: dict[str, SwitchTables],
    listen: str,
    state: Path | None = None,
    *,
    version: int = 1,
    follow: Follow | None = None,
) -> None:
    """Run `PlainSwitchApp` with `tables` as plan `version` until the process is stopped;
    blocks.

    `AppManager.run_apps` cannot hand the app its rules, so this does the same steps with
    extra keyword arguments, which os-ken's own apps ignore."""
    host, port = listen.rsplit(":", 1)
    cfg.CONF(args=["--ofp-listen-host", host, "--ofp-tcp-listen-port", port], project="os_ken")
    manager = AppManager.get_instance()
    manager.load_apps([PlainSwitchApp.__module__])  # os-ken loads the app its module defines
    services = manager.instantiate_apps(
        **manager.create_contexts(),
        ina_tables=tables,
        ina_state=state,
        ina_version=version,
        ina_follow=follow,
    )
    try:
        hub.joinall(services)
    finally:
        manager.close()


def write_state(
    path: Path, pushes: dict[str, list[float]], version: int = 1, versions: list[int] | None = None
) -> None:
    """Atomically publish, per switch, how long each (re)install took, the newest plan version
    every connected switch confirmed (`version`, what the daemon waits for) and the versions
    the switches hold (readers poll the file)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(
        json.dumps(
            {
                "version": version,
                "versions": versions or [version],
                "switches": {s: {"pushes_seconds": p} for s, p in pushes.items()},
            }
        )
    )
    os.replace(tmp, path)
