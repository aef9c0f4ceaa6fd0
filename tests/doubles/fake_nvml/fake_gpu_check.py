"""TEST DOUBLE on the lab's nodes: plays a GPU deep check's command where no GPU exists.

The acceptance layer runs the stack's deep checks (`acceptance.deep_checks`) inside its jobs;
on a real fleet they are `dcgmi diag -r 1` and NCCL's `all_reduce_perf`. The lab has neither,
so its stack names this script instead, installed beside the fake NVML
(/usr/local/lib/gpu-fleet-fake-nvml/fake_gpu_check.py). It reads the node's fake NVML
configuration (/etc/fake-nvml.json) and nothing else:

  diag             one line per GPU; exit 1 when a GPU has `"diag_fail": "<why>"`, else 0
  all_reduce_perf  nccl-tests' summary line `# Avg bus bandwidth    : <GB/s>`, from the
                   config's `nccl_busbw_gbps` (default 23.4); exit 0
"""

from __future__ import annotations

import json
import sys

CONFIG = "/etc/fake-nvml.json"


def main(argv: list[str]) -> int:
    cfg = json.load(open(CONFIG))
    devices = cfg.get("devices", [])
    if argv[:1] == ["diag"]:
        failed = 0
        for i, d in enumerate(devices):
            why = d.get("diag_fail")
            failed += bool(why)
            print(f"GPU {i} {d.get('uuid')}: {'Fail: ' + why if why else 'Pass'}")
        print(f"fake diag: {len(devices) - failed} of {len(devices)} GPUs pass")
        return 1 if failed or not devices else 0
    if argv[:1] == ["all_reduce_perf"]:
        print(f"# nccl-tests stand-in: {len(devices)} GPUs")
        print(f"# Avg bus bandwidth    : {float(cfg.get('nccl_busbw_gbps', 23.4)):.2f}")
        return 0
    print(f"usage: {sys.argv[0]} diag|all_reduce_perf", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
