"""Which lab runs which test module when `make test` runs two labs (scripts/lab-ns.sh).

The lab tests mostly wait (Slurm's cycles, daemons, SSH), so two labs side by side halve the
suite's wall time on this 2-core machine. Modules are dealt out whole, longest first, each to the
lab with the least time so far, by the wall time a CI rehearsal measured for each (the "wall time
per test module" report). The test_v2411_* modules stay together on the first lab: they share one
stack (`release24`), and the 24.11 source build and the web images' first build fetch from the
package mirrors, which only the first lab's network namespace reaches.
"""

from __future__ import annotations

#: wall seconds per module, from a clean-clone `.ci/run` as `make test` runs it (two labs, the
#: offline suite niced beside them): the mean of rehearsals ci66 and ci67 of 2026-12-08. The release24 stack's set-up
#: (fresh hosts, the 24.11 cluster) counts in the first test_v2411_ module's figure; the `deployed`
#: fleet's (fresh hosts, the lab stack's first `up`, a checkpoint: about 70 s) in none: every lab
#: pays it once, which moves no module, so it is taken out of the figures of each rehearsal's first
#: module to use it on each lab (in both: test_accounting, test_guards).
MODULE_SECONDS = {
    "test_accounting.py": 225, "test_workload.py": 247, "test_tenancy.py": 240,
    "test_interruptions.py": 219, "test_model_snapshot.py": 125, "test_k3s_retirement.py": 169,
    "test_storage.py": 120, "test_slurm_cluster.py": 125, "test_dead_node.py": 88,
    "test_recreated_hosts.py": 58, "test_health.py": 116, "test_gpu_runtime.py": 116,
    "test_guards.py": 65, "test_canary_first.py": 66, "test_gpu_gate.py": 32,
    "test_recorded_state.py": 20, "test_sshd_stopped.py": 54, "test_lab_k3s.py": 44,
    "test_lab_command.py": 99, "test_lab_web_images.py": 34, "test_primitives.py": 32,
    "test_slurm_bad_input.py": 10, "test_lab_storage.py": 12, "test_transport_lab.py": 2,
    "test_v2411_web.py": 168, "test_v2411_tenancy.py": 201, "test_v2411_cluster_id.py": 155,
    "test_v2411_health.py": 112,
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
