"""Which lab runs which test module when `make test` runs two labs (scripts/lab-ns.sh).

The lab tests mostly wait (Slurm's cycles, daemons, SSH), so two labs side by side halve the
suite's wall time on this 2-core machine. Modules are dealt out whole, longest first, each to the
lab with the least time so far, by the wall time a CI rehearsal measured for each (the "wall time
per test module" report). The test_v2411_* modules stay together on the first lab: they share one
stack (`release24`), and the 24.11 source build and the web images' first build fetch from the
package mirrors, which only the first lab's network namespace reaches.
"""

from __future__ import annotations

#: wall seconds per module, from clean-clone `.ci/run`s as `make test` runs them (two labs, the
#: offline suite niced beside them): the mean of two rehearsals of 2026-12-07 (ci58, ci59; the
#: modules a change between them made shorter, ci59's alone). The modules that start from the
#: `deployed` fleet, and test_lab_command, which tests checkpoints: their figures of two labs run
#: side by side without the offline suite, times 1.4 (that suite's share in ci59); test_dead_node
#: and test_recreated_hosts: their ci59 figures less two first `up`s and destroys each. The release24
#: stack's set-up (fresh hosts, the 24.11 cluster) counts in the first test_v2411_ module's figure.
MODULE_SECONDS = {
    "test_accounting.py": 250, "test_workload.py": 260, "test_tenancy.py": 280,
    "test_interruptions.py": 257, "test_model_snapshot.py": 150, "test_k3s_retirement.py": 222,
    "test_storage.py": 170, "test_slurm_cluster.py": 140, "test_dead_node.py": 120,
    "test_recreated_hosts.py": 110, "test_health.py": 150, "test_gpu_runtime.py": 154,
    "test_guards.py": 70, "test_canary_first.py": 98, "test_gpu_gate.py": 35,
    "test_recorded_state.py": 30, "test_sshd_stopped.py": 57, "test_lab_k3s.py": 56,
    "test_lab_command.py": 90, "test_lab_web_images.py": 44, "test_primitives.py": 43,
    "test_slurm_bad_input.py": 14, "test_lab_storage.py": 10, "test_transport_lab.py": 1,
    "test_v2411_web.py": 289, "test_v2411_tenancy.py": 208, "test_v2411_cluster_id.py": 180,
    "test_v2411_health.py": 133,
}
#: a module not measured yet counts as this much
NEW_MODULE_S = 120
#: modules that run on the first lab (this machine's own network namespace), matched by prefix
FIRST_LAB = ("test_v2411_", "test_lab_web_images")


def parse(spec: str) -> tuple[int, int]:
    """`K/N` (GPU_FLEET_LAB_SHARD) as (K, N), 1 <= K <= N."""
    try:
        k, n = (int(x) for x in spec.split("/"))
    except ValueError:
        raise ValueError(f"GPU_FLEET_LAB_SHARD must be K/N, e.g. 1/2 (got {spec!r})") from None
    if not 1 <= k <= n:
        raise ValueError(f"GPU_FLEET_LAB_SHARD {spec!r}: K must be between 1 and N")
    return k, n


def assign(modules: list[str], n: int) -> dict[str, int]:
    """Each module's lab (1..n): the first-lab modules on lab 1 as one block, then the rest
    longest first, each to the lab with the least seconds so far (ties: the lower lab)."""
    load = [0] * (n + 1)
    out: dict[str, int] = {}
    for m in modules:
        if m.startswith(FIRST_LAB):
            out[m] = 1
            load[1] += MODULE_SECONDS.get(m, NEW_MODULE_S)
    rest = sorted((m for m in modules if m not in out), key=lambda m: (-MODULE_SECONDS.get(m, NEW_MODULE_S), m))
    for m in rest:
        lab = min(range(1, n + 1), key=lambda k: (load[k], k))
        out[m] = lab
        load[lab] += MODULE_SECONDS.get(m, NEW_MODULE_S)
    return out
