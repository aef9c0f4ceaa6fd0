"""Provider failures as one readable block, not a traceback of the SDK's internals.

The engine serves every dynamic resource from one process, `python -m pulumi.dynamic`, whose
gRPC handlers report any exception with `traceback.format_exc()`: a user saw twelve lines of
SDK frames before the one useful line. A `FleetError` already says what a person needs
(resource, host, command, exit code, output), so in that process it is reported alone; any
other exception keeps its traceback (a bug of ours), and `GPU_FLEET_TRACEBACK=1` keeps them
for every error.
"""

from __future__ import annotations

import os
import sys
import traceback
from types import ModuleType
from typing import Optional

from ..errors import FleetError

PROVIDER_MAIN = "pulumi.dynamic.__main__"


class _Traceback:
    """`traceback` as the provider process's handlers see it: FleetError without frames."""

    def __getattr__(self, name: str):
        return getattr(traceback, name)

    @staticmethod
    def format_exc(*args, **kwargs) -> str:
        err = sys.exc_info()[1]
        if isinstance(err, FleetError):
            return str(err)
        return traceback.format_exc(*args, **kwargs)


def install(main: Optional[ModuleType] = None) -> bool:
    """In the dynamic provider process (its `__main__` is the SDK's), report FleetErrors alone.
    Returns whether it did; a no-op anywhere else or with GPU_FLEET_TRACEBACK=1."""
    main = main if main is not None else sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if main is None or spec is None or spec.name != PROVIDER_MAIN or os.environ.get("GPU_FLEET_TRACEBACK") == "1":
        return False
    if not isinstance(getattr(main, "traceback", None), _Traceback):
        main.traceback = _Traceback()  # type: ignore[attr-defined]  # the SDK's __main__ gets one more name
    return True
