"""The shaped links `ina mininet` builds: htb accepts their classes without a warning, which
Mininet would print as an error on every link of every run (root), and a link scale Mininet
cannot shape is refused before anything starts."""

from __future__ import annotations

import io
import logging

from conftest import EXAMPLES, MININET
from mininet.link import TCIntf
from mininet.log import lg
from mininet.net import Mininet
from mininet.topo import Topo

from controller.cli import main
from controller.emulation.mininet_nodes import HTB_QUANTUM, ShapedLink
from controller.emulation.mininet_runner import MAX_SHAPED_MBPS


def test_a_link_scale_mininet_cannot_shape_is_refused_before_anything_starts(capsys):
    assert TCIntf.bwParamMax == MAX_SHAPED_MBPS
    # ARO Fig. 1's links are 1 Gbps: 1001 Mbps per Gbps is just beyond what Mininet shapes
    assert main(["mininet", str(EXAMPLES / "aro-fig1.yaml"), "--scale-mbps", "1001"]) == 2
    said = capsys.readouterr()
    assert "use a link scale of at most 1000" in said.out + said.err


def test_a_fast_shaped_link_gets_its_quantum_and_no_htb_warning():
    topo = Topo()
    topo.addLink(topo.addHost("h1"), topo.addHost("h2"), cls=ShapedLink, bw=1000)
    printed = io.StringIO()
    handler = logging.StreamHandler(printed)
    lg.addHandler(handler)
    net = Mininet(topo=topo, controller=None)
    try:
        shown = net["h1"].cmd("tc -d class show dev h1-eth0")
    finally:
        net.stop()
        lg.removeHandler(handler)
    assert f"quantum {HTB_QUANTUM} " in shown and "rate 1Gbit" in shown, shown
    assert "quantum of class" not in printed.getvalue(), printed.getvalue()


for _mark in MININET:  # root and Mininet for the second test only
    test_a_fast_shaped_link_gets_its_quantum_and_no_htb_warning = _mark(
        test_a_fast_shaped_link_gets_its_quantum_and_no_htb_warning
    )
