"""Code that runs on the hosts, never in the program: `healthcheck.py` is shipped by SHA-256 (a
`Payload`) to every Slurm node as /opt/gpu-fleet/bin/gpu-fleet-healthcheck and run there by
slurmd (HealthCheckProgram); `reboot.sh` is Slurm's RebootProgram.

Python 3 and its standard library only, plus the pynvml the GPU runtime layer ships; nothing
from `components`, `lab` or `policies` (tests/unit/test_imports.py checks it).
"""
