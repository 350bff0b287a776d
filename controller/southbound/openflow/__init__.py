"""OpenFlow 1.3 driver for plain (INA-agnostic) switches run as Open vSwitch:

* `rules`: a plan compiled into each plain switch's flow rules and groups (`compile_openflow`);
* `messages`: the OpenFlow messages that install and delete one plan version on a switch;
* `bridges`: Open vSwitch bridges and the controller process programming them
  (`start_ovs_switches`, what the Mininet runner calls);
* `follow`: following the daemon's plan versions, make-before-break;
* `app`: the os-ken app (`PlainSwitchApp`) and `serve`;
* `__main__`: the command line, `python -m controller.southbound.openflow`.

The names other code uses are re-exported here; importing them does not load os-ken.
"""

from controller.southbound.openflow.bridges import OpenFlowError, OvsSwitches, start_ovs_switches
from controller.southbound.openflow.rules import (
    PRIO_FLOW,
    TABLE_INA,
    TABLE_IPV4,
    compile_openflow,
)

__all__ = [
    "PRIO_FLOW",
    "TABLE_INA",
    "TABLE_IPV4",
    "OpenFlowError",
    "OvsSwitches",
    "compile_openflow",
    "start_ovs_switches",
]
