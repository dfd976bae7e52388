"""deploy/devstack/devstack.py loaded as a module, for the tests that start a broker of their own in
a security mode (its start_kafka / stop_kafka API)."""

import importlib.util
import sys
from types import ModuleType

from tests.integration.claimer.support import REPO

DEVSTACK = REPO / "deploy" / "devstack" / "devstack.py"


def load_devstack() -> ModuleType:
    """The module, loaded once per session under the name ``slotflow_devstack``."""
    loaded = sys.modules.get("slotflow_devstack")
    if loaded is not None:
        return loaded
    spec = importlib.util.spec_from_file_location("slotflow_devstack", DEVSTACK)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {DEVSTACK}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["slotflow_devstack"] = module
    spec.loader.exec_module(module)
    return module
