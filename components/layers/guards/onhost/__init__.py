"""Code that runs on the hosts, never in the program: `guard.py` is shipped by SHA-256 (a
`Payload`) to every GPU node as /opt/gpu-fleet/bin/gpu-fleet-guard and run there by systemd.

Python 3 and its standard library only, plus the pynvml the GPU runtime layer ships; nothing
from `components`, `lab` or `policies` (tests/unit/test_imports.py checks it). The bytes are
the guard's identity in a stack: an edit here restarts every node's guard.
"""
