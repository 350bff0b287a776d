"""INA topologies and P4 switches for `mn --custom` (Mininet's command line), as in P4 tutorials.

    sudo mn --custom mininet/ina.py --topo ina,topologies/examples/aro-fig1.yaml --switch bmv2
    # in another shell, the command mn prints, e.g.:
    ina controller topologies/examples/aro-fig1.yaml --switches out/mininet/switches.json \\
        --p4blob p4src/build/ina.json --p4info p4src/build/ina.p4info.txtpb

`--topo ina,FILE[,scale=MBPS_PER_GBPS]` builds any topology YAML (hosts h1.., switches s1.. in
file order, TCLinks shaped to the model's capacities, the model's port numbers);
`--switch embedded|bmv2` picks the switch process: the embedded software target or bmv2
`simple_switch_grpc` (which needs p4c-bm2-ss to compile p4src/ina.p4). Switch i serves
P4Runtime on 127.0.0.1:50050+i; the switches are listed in out/mininet/switches.json (relative
to where mn runs), the `--switches` file of `ina controller`. Switch logs: /tmp/ina-mn/.

The classes live in controller/emulation/mininet_nodes.py, the same ones `ina mininet` uses. This folder
has no __init__.py on purpose: it is not a package and cannot shadow Debian's `mininet`
package (a regular package always wins over a namespace portion); mn loads this file by path.
mn runs Debian's python3, so the project's virtual environment (.venv in the repository, or
$VIRTUAL_ENV) is added to the path for the controller's dependencies.
"""

import inspect
import os
import site
import sys
from pathlib import Path

# mn exec()s this file without __file__; the code object still knows where it came from.
ROOT = Path(inspect.currentframe().f_code.co_filename).resolve().parents[1]
_before = [p for p in sys.path if p != str(ROOT)]
for venv in (ROOT / ".venv", os.environ.get("VIRTUAL_ENV")):
    if venv:
        for packages in Path(venv).glob(f"lib/python{sys.version_info[0]}.{sys.version_info[1]}"
                                        "/site-packages"):
            site.addsitedir(str(packages))
# The repository, then the venv, then Debian's dist-packages: Debian's older python3-protobuf
# (and the like) must not shadow the versions the project was installed with.
sys.path[:] = [str(ROOT), *(p for p in sys.path if p not in _before and p != str(ROOT)), *_before]

from mininet.node import findController as _find_openflow_controller

from controller.emulation.mininet_nodes import (
    GRPC_BASE_PORT,
    SWITCH_CLASSES,
    InaTopo,
)
from dataplane.p4build import BUILD_DIR

SWITCHES_FILE = Path("out/mininet/switches.json")


def ina_topo(topology: str, scale: float = 2.0) -> InaTopo:
    print(f"*** INA topology {topology}; P4Runtime switches will be listed in {SWITCHES_FILE}: "
          f"program them with `ina controller {topology} --switches {SWITCHES_FILE}` "
          f"(with --switch bmv2 add --p4blob {BUILD_DIR / 'ina.json'} "
          f"--p4info {BUILD_DIR / 'ina.p4info.txtpb'})", flush=True)
    return InaTopo(topology, scale_mbps=scale, grpc_base=GRPC_BASE_PORT, log_dir="/tmp/ina-mn",
                   switches_file=SWITCHES_FILE)


def _no_controller(name: str, **params) -> None:
    """No OpenFlow controller: Mininet.addController skips a constructor that returns None."""
    return


def findController(*args, **kwargs):  # mn calls this name; a custom file's names replace mn's
    """mn refuses to start a non-OVS switch without an OpenFlow controller installed; P4
    switches are programmed over P4Runtime by `ina controller`, so none is needed."""
    return _find_openflow_controller(*args, **kwargs) or _no_controller


topos = {"ina": ina_topo}
switches = dict(SWITCH_CLASSES)
