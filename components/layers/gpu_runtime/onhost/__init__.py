"""Code that runs on the hosts, never in the program: `probe.py` is sent to every node as the
program text of `python3 -` (probe_source.py) and prints the node's GPU facts as one JSON line.

Python 3 and its standard library only, plus the pynvml the layer ships to the node; nothing
from `components`, `lab` or `policies` (tests/unit/test_imports.py checks it). Its SHA-256 is
recorded per node: an edit here re-probes every node on the next `up`.
"""
