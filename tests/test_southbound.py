"""P4Runtime driver against a real embedded target process: write, read back, counters."""

from __future__ import annotations

import asyncio
import signal

import pytest
from conftest import EXAMPLES, ROOT, program_files, start_portless_switch
from finsy import Controller

from controller.compiler.program import compile_plan
from controller.model.network import load_topology
from controller.model.plan import AggregationPoint, Plan, TaskPlan
from controller.solvers import solve
from controller.southbound.p4runtime import (
    InaSwitchDriver,
    SwitchTarget,
    read_counters,
    verify,
)
from dataplane.targets import KINDS


def _fig1_plan() -> Plan:
    leaf = {"W0": "L1", "W1": "L1", "W2": "L2", "W3": "L2", "W4": "L3"}
    paths = {w: [w, leaf[w], "S1", "L0", "PS"] for w in leaf}
    points = [
        AggregationPoint("L1", 0, 2, "S1"),
        AggregationPoint("L2", 0, 2, "S1"),
        AggregationPoint("S1", 0, 3, "L0"),
    ]
    return Plan(
        "hand", "heuristic", 1.0, None, 0.0, 0, [TaskPlan("job0", "t0", "PS", 1.0, paths, points)]
    )


def test_program_is_written_and_read_back_identically(embedded_switch):
    network = load_topology(EXAMPLES / "aro-fig1.yaml")
    programs, _ = compile_plan(network, _fig1_plan())
    driver = InaSwitchDriver(SwitchTarget("S1", embedded_switch), programs["S1"])

    async def scenario():
        async with Controller([driver.switch]):
            await asyncio.wait_for(driver.ready.wait(), 30)
            return await read_counters(driver.switch)

    counters = asyncio.run(scenario())
    assert driver.problems == []
    assert len(driver.pushes) == 1
    assert set(counters) >= {"aggregations_completed", "collisions", "malformed"}
    assert all(v == 0 for values in counters.values() for v in values)


def test_a_plan_change_cut_off_by_a_closing_channel_is_finished_when_the_switch_is_back(
    embedded_switch_process,
):
    """A re-plan writes to a switch that hangs (stopped) and whose channel then closes: grpc.aio
    cancels the write under the driver. `move_to` must return (the re-plan and the daemon go
    on; before, the CancelledError ended the daemon's link watcher without a word), and the
    switch, once back, gets the new plan."""
    address, proc = embedded_switch_process
    network = load_topology(EXAMPLES / "aro-fig1.yaml")
    old, _ = compile_plan(network, _fig1_plan())
    new, _ = compile_plan(network, _fig1_plan(), version=2)
    driver = InaSwitchDriver(SwitchTarget("S1", address), old["S1"])

    async def scenario() -> list[str]:
        async with Controller([driver.switch]) as controller:
            await asyncio.wait_for(driver.ready.wait(), 30)
            proc.send_signal(signal.SIGSTOP)
            moving = asyncio.create_task(driver.move_to(new["S1"]))
            await asyncio.sleep(0.3)  # its insert now waits for the stopped switch
            await controller.remove(driver.switch).wait()  # closes the channel
            await asyncio.wait_for(moving, 10)
            proc.send_signal(signal.SIGCONT)
            controller.add(driver.switch)
            async with asyncio.timeout(30):
                while len(driver.pushes) < 2:
                    await asyncio.sleep(0.1)
            return await verify(driver.switch, new["S1"])

    assert asyncio.run(scenario()) == []
    assert driver.problems == []


def test_a_reinstall_that_times_out_on_a_busy_switch_is_tried_again(embedded_switch_process):
    """A reinstall whose reads time out (the switch stopped, its channel still up) leaves the
    switch unprogrammed with the reason; once the switch answers again the driver reinstalls
    on its own: nothing else would, since the channel never dropped."""
    address, proc = embedded_switch_process
    network = load_topology(EXAMPLES / "aro-fig1.yaml")
    programs, _ = compile_plan(network, _fig1_plan())
    driver = InaSwitchDriver(SwitchTarget("S1", address), programs["S1"])

    async def scenario() -> list[str]:
        async with Controller([driver.switch]):
            await asyncio.wait_for(driver.ready.wait(), 30)
            proc.send_signal(signal.SIGSTOP)
            await asyncio.wait_for(driver.reinstall(), 30)  # finsy's reads time out in 10 s
            assert not driver.installed and driver.problems, driver.problems
            assert driver.switch.is_up  # no reconnect will reconcile it
            proc.send_signal(signal.SIGCONT)
            async with asyncio.timeout(30):
                while len(driver.pushes) < 2:
                    await asyncio.sleep(0.1)
            assert driver.installed and driver.problems == []
            return await verify(driver.switch, driver.program)

    assert asyncio.run(scenario()) == []


@pytest.mark.parametrize("kind", KINDS)
def test_every_switch_of_a_leaf_spine_plan_reads_back_as_written(kind):
    """The 4-leaf/4-spine plan on each of its switches: written, read back and found equal
    (`verify`), its multicast groups included. A name group has several replicas through one
    port, told apart by their instance, and bmv2 reads a group's replicas back in an order
    of its own."""
    network = load_topology(ROOT / "topologies" / "reliability" / "leaf-spine-4x4-16w.yaml")
    programs, _ = compile_plan(network, solve(network, "aro"))
    assert any(
        len({port for port, _ in g.replicas}) < len(g.replicas)
        for program in programs.values()
        for g in program.multicast_groups
    )
    files = program_files(kind)
    for name, program in programs.items():
        process, address = start_portless_switch(kind)
        try:
            driver = InaSwitchDriver(SwitchTarget(name, address), program, **files)

            async def scenario(driver=driver) -> list[str]:
                async with Controller([driver.switch]):
                    await asyncio.wait_for(driver.ready.wait(), 60)
                    return await verify(driver.switch, driver.program)

            assert asyncio.run(scenario()) == [], name
            assert driver.problems == [], name
        finally:
            process.terminate()
            process.wait(timeout=10)
