"""One embedded switch process: the P4Runtime service and the packet loop on one asyncio loop.

Both share the pipeline object without locks: the loop is single-threaded, so a Write and a
packet never interleave, which gives the per-packet atomicity bmv2 gives per action. Frames the
pipeline sends to CPU_PORT become PacketIns; PacketOuts come back through `transmit`.

Frames waiting on several ports are taken one per port in turn, as a switch's input arbiter
(and bmv2's receive loop) does: draining one port's whole queue first let one sender's
fragments run ahead of the other's and collide where a switch aggregates them.

Congestion marks (p4src/README.md, "Congestion mark"): the queue of a port is the kernel's,
the queue disciplines of its interface (under Mininet a shaper and a short FIFO), since the
loop hands every frame to the kernel at once. Its depth is known per frame sent to a port that
has a `mark_threshold` entry, from the socket's unsent bytes (`dataplane.ports.Backlog`), read
only when it may have reached the threshold (`dataplane.ports.EgressDepth`); a port told to
mark from its own queue (`mark_from_queue`) marks from half its qdisc's limit.
"""

from __future__ import annotations

import asyncio
import logging
import select
import signal
import socket
from collections.abc import Callable

import grpc

from dataplane.frame import CPU_PORT
from dataplane.pipeline import FROM_QUEUE, Pipeline
from dataplane.ports import GATHER, egress_depth, open_raw, receive, receive_tagged, send
from dataplane.server import P4RuntimeService, serve

LOG = logging.getLogger(__name__)
# A socket of a port, with the function that reads it (`receive` or `receive_tagged`).
Reader = tuple[int, socket.socket, Callable[[socket.socket], bytes | None]]
# Rounds of the input arbiter before the loop serves P4Runtime again.
ROUNDS_PER_TURN = 256
# Longest wait for gRPC's own shutdown after SIGTERM: grpc.aio's stop can wait on a stream
# whose client died, and a switch that outlives its SIGTERM blocks whoever restarts it.
STOP_SECONDS = 3.0


async def run_switch(
    device_id: int,
    address: str,
    interfaces: dict[int, str],
    credentials: grpc.ServerCredentials | None = None,
) -> None:
    """Serve P4Runtime on `address` (TLS with `credentials`) and switch frames between
    `interfaces` (port -> name)."""
    pipeline = Pipeline()
    sockets = {port: open_raw(name) for port, name in interfaces.items()}
    # each port's tagged frames arrive on a socket of their own (dataplane/ports.py)
    tagged = {port: open_raw(name, tagged=True) for port, name in interfaces.items()}
    depths = {port: egress_depth(sock) for port, sock in sockets.items()}

    def transmit(port: int, frame: bytes) -> None:
        sock = sockets.get(port)
        if sock is not None:
            send(sock, frame)
            depths[port].sent()

    service = P4RuntimeService(device_id, pipeline, transmit)
    server = await serve(address, service, credentials)
    loop = asyncio.get_running_loop()

    def serve_ports(active: list[Reader]) -> None:
        """The `active` ports' input queues served round-robin, one frame per port per round,
        each round over the sockets the epoll set reports ready (asking it costs less than a
        read that finds nothing). This is the per-packet path: names are bound locally and
        nothing is allocated but the frames (see dataplane/README.md, "Throughput")."""
        process, outputs, marks, mark = pipeline.process, sockets.get, pipeline.marks, pipeline.mark
        poll, readers = ready.poll, by_fd.__getitem__
        for _ in range(ROUNDS_PER_TURN):
            for port, sock, read in active:
                frame = read(sock)
                if frame is None:
                    continue
                for out_port, out in process(port, frame):
                    if out_port == CPU_PORT:
                        service.packet_in(port, out)
                    else:
                        out_sock = outputs(out_port)
                        if out_sock is not None:
                            depth = depths[out_port]
                            if marks(out_port):
                                backlog = depth.backlog
                                threshold: int | None = pipeline.fwd.mark_depth[out_port]
                                if threshold == FROM_QUEUE:
                                    threshold = backlog.depth()
                                queued = 0 if threshold is None else depth.at(threshold)
                                out = mark(out_port, out, queued, backlog.depth)
                            send(out_sock, out)
                            depth.sent()
            active = [readers(fd) for fd, _ in poll(0)]
            if not active:
                return

    # The loop watches one epoll set of every port (its own file descriptor is readable while
    # any port is). Woken, it stops watching and serves the ports every GATHER seconds until
    # a turn finds none ready: the frames of that time go in one turn instead of one turn (an
    # epoll wake-up and a read of every port) per frame, which on paced links was most of a
    # switch's CPU (docs/loop-profile.md).
    ready = select.epoll()
    by_fd: dict[int, Reader] = {
        sock.fileno(): (port, sock, receive) for port, sock in sockets.items()
    }
    by_fd |= {sock.fileno(): (port, sock, receive_tagged) for port, sock in tagged.items()}
    for fd in by_fd:
        ready.register(fd, select.EPOLLIN)
    pending: list[asyncio.TimerHandle] = []

    def wake() -> None:
        loop.remove_reader(ready.fileno())
        pending[:] = [loop.call_later(GATHER, turn)]

    def turn() -> None:
        active = [by_fd[fd] for fd, _ in ready.poll(0)]
        if not active:
            loop.add_reader(ready.fileno(), wake)
            return
        pending[:] = [loop.call_later(GATHER, turn)]
        serve_ports(active)

    loop.add_reader(ready.fileno(), wake)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    LOG.info("device %d serving P4Runtime on %s, ports %s", device_id, address, interfaces)
    await stop.wait()
    try:
        await asyncio.wait_for(server.stop(grace=0.5), STOP_SECONDS)
    except TimeoutError:
        LOG.warning(
            "device %d: gRPC did not stop within %g s; leaving anyway", device_id, STOP_SECONDS
        )
    loop.remove_reader(ready.fileno())
    for handle in pending:
        handle.cancel()
    ready.close()
    for sock in [*sockets.values(), *tagged.values()]:
        sock.close()
