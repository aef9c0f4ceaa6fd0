"""Code that runs on the lab's hosts, never in the lab command: `k3s_shim.py` is installed on a
K3s node as its containerd-shim-runc-v2 (a TEST DOUBLE), `k3s_status.py` is sent as the program
text of `python3 -` by `python -m lab k3s status` (lab/k3s.py reads both by path).

Python 3 and its standard library only; nothing from `components`, `lab` or `policies`
(tests/unit/test_imports.py checks it).
"""
