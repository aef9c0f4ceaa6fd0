"""The dynamic-provider process: the SDK's own `python -m pulumi.dynamic`, with more workers.

The SDK serves every provider call from a pool of 4 threads, so whatever the engine's
`--parallel`, at most 4 resources are read or applied at once: a 12-node refresh runs in
waves of 4, and a host's probes can share one round trip (transport/batch.py) only when they
are in flight together. This runs the same module with WORKERS threads; the engine's
`--parallel` is the bound again, and the transport caps the sessions on one host's
connection below sshd's MaxSessions. scripts/setup.sh's `pulumi-resource-pulumi-python`
shim starts this module in a project that has it. `check()` (also in tests/unit/test_sdk.py)
refuses an SDK whose server is not built the way this module replaces it.
"""

from __future__ import annotations

import importlib.util
import runpy
from concurrent import futures
from pathlib import Path

#: provider calls served at once (the engine sends at most its --parallel, default 8)
WORKERS = 32


class SdkChanged(RuntimeError):
    """pulumi.dynamic's server is not what components/provider_host.py replaces."""


def check() -> str:
    spec = importlib.util.find_spec("pulumi.dynamic.__main__")
    if spec is None or spec.origin is None:
        raise SdkChanged("pulumi.dynamic.__main__ is gone: revisit components/provider_host.py")
    src = Path(spec.origin).read_text()
    if src.count("grpc.server(") != 1 or src.count("futures.ThreadPoolExecutor(max_workers=4)") != 1:
        raise SdkChanged("pulumi.dynamic.__main__ builds its gRPC server differently: "
                         "revisit components/provider_host.py")
    return spec.origin


def main() -> None:
    import grpc

    check()
    real = grpc.server

    def server(thread_pool, *args, **kwargs):
        thread_pool.shutdown(wait=False)  # the SDK's 4-thread pool, never used
        return real(futures.ThreadPoolExecutor(max_workers=WORKERS), *args, **kwargs)

    grpc.server = server
    runpy.run_module("pulumi.dynamic", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
