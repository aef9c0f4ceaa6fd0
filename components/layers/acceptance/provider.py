"""The fleet acceptance as one resource: a job on every admitted node at once, one job across
them, the verdict per node, the partitions opened or kept closed, the report written.

Fail closed per node: a node whose job fails a check is drained with the reason
(`gpu-fleet acceptance: <check>: <what was seen>`) and left out; the partitions open when at
least `min_nodes` passed, else they are set INACTIVE and the `up` fails naming every node.
Each node is judged again only when its inputs (its hash: the node, its GPUs as the GPU layer
recorded them, what the Slurm layer applied, the checks) changed since it was last judged;
with nothing changed no job runs. A node this layer drained is resumed to be judged again;
a node drained for another reason is not touched (it is never idle, so the run fails on it).
"""

from __future__ import annotations

import datetime
import re
from pathlib import Path
from typing import Any, Optional

from pulumi.dynamic import CreateResult, UpdateResult

from ...errors import FleetError
from ...kit import connect, sh
from ...providers.base import RolloutCheck
from ...providers.parts import Props, _entry, target_of
from ...scripts import script
from ...transport import SshTarget, fan_out
from ..slurm.canary import SACCT_FIELDS, VERDICT, judge_sacct, munge_gate, set_partitions
from ..slurm.render import count_visible_gpus
from .criteria import Layers, criteria
from .node_checks import NodeExpect, check, first_failure, judge_deep, judge_node, parse_blocks, parse_node
from .report import write_report

_FLEET_JOBS = script(__file__, "fleet_jobs.sh")
_NODE_JOB = script(__file__, "node_job.sh")
_STEP = script(__file__, "step.sh")
#: where the jobs run: the nodes under judgement, for the canary user only
RESERVATION = "gpu-fleet-acceptance"
#: what each rank of the all-node job prints
_RANK = 'echo "rank=$SLURM_PROCID host=$(hostname -s) cvd=${CUDA_VISIBLE_DEVICES-unset} job=$SLURM_JOB_ID"'


def deep_checks(props: Props, scope: str) -> list[dict]:
    return [c for c in props.get("deep_checks") or [] if c["scope"] == scope]


def to_test(olds: Props, news: Props) -> list[str]:
    """Nodes whose inputs changed since they were last judged (all of them on create)."""
    before = (olds.get("results") or {})
    return [n for n in news["admitted"] if (before.get(n) or {}).get("hash") != news["nodes"][n]["hash"]]


def judge_fleet_job(stdout: str, rc: int, nodes: list[str], gpus: int) -> list[dict]:
    """The all-node job: every rank ran, one per node, each seeing the node's GPUs."""
    ranks = [dict(p.split("=", 1) for p in line.split() if "=" in p)
             for line in stdout.splitlines() if line.startswith("rank=")]
    hosts = sorted(r.get("host", "") for r in ranks)
    short = [f"{r.get('host')}: {r.get('cvd')}" for r in ranks if _visible(r.get("cvd", "unset")) != gpus]
    return [check("all_nodes_at_once", rc == 0 and hosts == sorted(nodes),
                  f"exit {rc}; {len(ranks)} ranks on {', '.join(hosts) or 'no node'}"),
            check("gpus_per_rank", bool(ranks) and not short,
                  f"each rank sees {gpus} GPUs" if ranks and not short else f"short: {short or 'no rank ran'}")]


def _visible(cvd: str) -> int:
    """GPUs a rank sees; none when Slurm set no CUDA_VISIBLE_DEVICES (a node without GPUs)."""
    return 0 if cvd in ("unset", "") else count_visible_gpus(cvd)


def judge_tres(alloc_tres: str, gpu_type: str, total: int) -> dict:
    """Accounting counts the GPUs both generic and typed (the seed's criterion 4)."""
    return check("accounted_tres", not judge_sacct(alloc_tres, gpu_type, total),
                 f"AllocTRES {alloc_tres or '(no record)'}; expected gres/gpu={total}, gres/gpu:{gpu_type}={total}")


class FleetAcceptanceProvider(RolloutCheck):
    """Judges the nodes whose inputs changed; opens the partitions or keeps them closed."""

    rerun_on = ("nodes", "admitted", "min_nodes", "partitions", "partition", "user", "refused")

    def key(self, props: Props) -> str:
        return "fleet-acceptance"

    @_entry
    def create(self, props: Props) -> CreateResult:
        return CreateResult(id_=f"{target_of(props).name}:{self.key(props)}", outs={**props, **self.judge(props, {})})

    @_entry
    def update(self, _id: str, olds: Props, news: Props) -> UpdateResult:
        if not self.rerun(olds, news):  # only the way to reach the controller changed: record it
            return UpdateResult(outs={**olds, "conn": news["conn"]})
        return UpdateResult(outs={**news, **self.judge(news, olds)})

    @_entry
    def delete(self, _id: str, props: Props) -> None:
        """Withdraws the verdict (the partitions stay as they are): without the acceptance, no
        restart of slurmctld may reopen them (restart.py)."""
        connect(props["conn"]).run(["rm", "-f", "--", VERDICT], mutating=True)

    def judge(self, props: Props, olds: Props) -> dict[str, Any]:
        """Jobs on the nodes whose inputs changed since `olds`; the verdict on all of them."""
        before = olds.get("results") or {}
        conn = connect(props["conn"])
        nodes = {n: props["nodes"][n] for n in props["admitted"]}  # stack order (a map's keys have none)
        todo = to_test(olds, props)
        results = {n: r for n, r in before.items() if n in nodes and n not in todo}
        fleet_job = olds.get("fleet_job") if not todo else None
        if todo:
            munge_gate(conn, [SshTarget.from_dict(props["node_conns"][n]) for n in todo], props["partitions"])
            # the nodes under judgement take no one else's job, also once a node this layer drained
            # before is resumed to be judged again; OVERLAP: a node may stand in a reservation the
            # stack lends (the health layer's spares) and is judged all the same
            conn.run(["scontrol", "delete", f"ReservationName={RESERVATION}"], mutating=True, check=False)
            conn.run(["scontrol", "create", f"ReservationName={RESERVATION}", f"Users={props['user']}",
                      f"Nodes={','.join(todo)}", "StartTime=now", "Duration=UNLIMITED", "Flags=IGNORE_JOBS,OVERLAP"],
                     mutating=True)
            try:
                results.update(self._node_jobs(conn, props, todo))
                failed = {n: results[n]["reason"] for n in todo if not results[n]["passed"]}
                for n, why in failed.items():
                    conn.run(["scontrol", "update", f"NodeName={n}", "State=DRAIN", f"Reason={why}"], mutating=True)
                judged = [n for n in todo if results[n]["passed"]]
                fleet_job = self._fleet_job(conn, props, judged) if judged else None
            finally:
                conn.run(["scontrol", "delete", f"ReservationName={RESERVATION}"], mutating=True, check=False)
        results = {n: results[n] for n in nodes if n in results}
        passed = [n for n in nodes if results.get(n, {}).get("passed")]
        need = props.get("min_nodes") or len(nodes)
        fleet_ok = fleet_job is None or fleet_job["passed"]
        opened = bool(passed) and len(passed) >= need and fleet_ok
        state = "UP" if opened else "INACTIVE"
        set_partitions(conn, props["partitions"], state)
        layers = Layers(refused=props.get("refused") or {}, storage=bool(props.get("readonly_probe")),
                        accounting=bool(props.get("accounting")), web=props.get("web"), k3s=bool(props.get("k3s")),
                        workload=bool(props.get("workload")))
        report = {"stack": props["stack"], "generated": datetime.datetime.now(datetime.timezone.utc)
                  .strftime("%Y-%m-%dT%H:%M:%SZ"), "slurm": props.get("slurm", ""),
                  "partitions": {"names": list(props["partitions"]), "state": state}, "min_nodes": need,
                  "nodes": {n: {k: results[n][k] for k in ("passed", "jobs", "reason", "checks")}
                            for n in nodes if n in results},
                  "fleet_job": fleet_job, "criteria": criteria(results, fleet_job, layers)}
        if props.get("report_dir"):
            write_report(report, Path(props["report_dir"]), props["stack"])
        if not opened:
            lines = [f"{n}: {r['reason'] or 'passed'}" for n, r in results.items() if not r["passed"]]
            if fleet_job is not None and not fleet_job["passed"]:
                lines.append("the all-node job: "
                             + "; ".join(c["seen"] for c in fleet_job["checks"] if not c["passed"]))
            raise FleetError(
                f"fleet acceptance: {len(passed)} of {len(nodes)} nodes passed, {need} needed; partitions "
                f"{', '.join(props['partitions'])} set INACTIVE:\n  - " + "\n  - ".join(lines))
        return {"results": results, "fleet_job": fleet_job, "accepted": passed,
                "failed": {n: r["reason"] for n, r in results.items() if not r["passed"]},
                "criteria": report["criteria"]}

    def _node_jobs(self, conn, props: Props, todo: list[str]) -> dict[str, dict]:
        deep = deep_checks(props, "node")
        # the jobs' limit: the checks' own, then every deep check's in turn
        timeout = int(props["timeout_s"]) + sum(int(c["timeout_s"]) for c in deep)
        specs = [f"{n}:{props['nodes'][n]['gpus']}:{props['nodes'][n]['gpu_type']}" for n in todo]
        res = conn.run(sh(_FLEET_JOBS, str(timeout), props["user"], props["partition"],
                          f"--mem={props['job_mem_mib']} --reservation={RESERVATION}",
                          _NODE_JOB, _STEP, props["device_prefix"], props.get("pynvml_dir") or "",
                          props["job_root"], props.get("readonly_probe") or "", props.get("marker") or "",
                          "\n".join(f"{c['name']}\t{c['timeout_s']}\t{c['command']}" for c in deep), *specs),
                       mutating=True, check=False, timeout=2 * timeout + 60)
        blocks, gres, not_ready = parse_blocks(res.stdout)
        if not_ready is not None:
            set_partitions(conn, props["partitions"], "INACTIVE")
            raise FleetError(f"Slurm nodes are not all idle after {timeout} s; partitions "
                             f"{', '.join(props['partitions'])} set INACTIVE:\n  " + not_ready.replace("\n", "\n  "))
        outputs = self._fetch_outputs(props, blocks)
        seen = {n: parse_node([*blocks.get(n, []), *outputs.get(n, [])]) for n in todo}
        states = self._oom_states(conn, seen) if props.get("accounting") else {}
        out = {}
        for n in todo:
            spec = props["nodes"][n]
            e = NodeExpect(name=n, gpus=int(spec["gpus"]), gpu_type=spec["gpu_type"], model=spec["model"],
                           uuids=tuple(spec.get("uuids") or ()), cpus=int(spec["cpus"]),
                           mem_mib=int(props["job_mem_mib"]), nvml=bool(props.get("pynvml_dir")),
                           marker=bool(props.get("marker")), readonly=bool(props.get("readonly_probe")),
                           deep=tuple(deep))
            s = seen[n]
            checks = judge_node(s, e, gres.get(n, ""), states.get(f"{s.get('job')}.{s['oom'].get('step')}", "")
                                if props.get("accounting") else None)
            reason = first_failure(checks)
            out[n] = {"passed": not reason, "jobs": [s["job"]] if s.get("job") else [], "reason": reason or None,
                      "checks": checks, "hash": spec["hash"],
                      **({"output": s["output"][-40:]} if reason else {})}
        return out

    def _fetch_outputs(self, props: Props, blocks: dict[str, list[str]]) -> dict[str, list[str]]:
        """Each node's job output from the node's /tmp (sbatch wrote it there), removed once read."""
        ids = {n: line.partition("=")[2] for n, lines in blocks.items() for line in lines
               if line.startswith("submitted=")}

        def read(c) -> list[str]:
            try:
                out = c.run(["sh", "-c", 'f=/tmp/gpu-fleet-acceptance-$1.out; cat "$f"; rm -f "$f"', "sh",
                             ids[c.t.name]], mutating=True, check=False)
            except FleetError as e:  # the node is judged on what is known: its job's output is missing
                return [f"fetch_error={e}"]
            return out.stdout.splitlines()

        return fan_out([SshTarget.from_dict(props["node_conns"][n]) for n in ids], read)

    def _oom_states(self, conn, seen: dict[str, dict]) -> dict[str, str]:
        """The over-memory steps' State as accounting recorded it (records land a few seconds late)."""
        ids = [f"{s['job']}.{s['oom']['step']}" for s in seen.values() if s.get("job") and s["oom"].get("step")]
        if not ids:
            return {}
        out = conn.run(sh(SACCT_FIELDS, "State", *ids), mutating=False, check=False, timeout=90).stdout
        return {f[0]: f[1] for f in (line.split("|") for line in out.splitlines()) if len(f) >= 2}

    def _fleet_job(self, conn, props: Props, passed: list[str]) -> dict[str, Any]:
        """One job on every node judged here that passed, all-or-nothing, every GPU (of the most
        common GPU kind's nodes, as one job asks the same of every node)."""
        nodes = props["nodes"]
        kinds = {(nodes[n]["gpus"], nodes[n]["gpu_type"]) for n in passed}
        count, gpu_type = max(kinds)
        group = [n for n in passed if (nodes[n]["gpus"], nodes[n]["gpu_type"]) == (count, gpu_type)]
        timeout = int(props["timeout_s"])
        gres = [f"--gres=gpu:{gpu_type}:{count}"] if count else []

        def srun(name: str, limit_s: int, *argv: str):
            """One job across the group as the canary user, under a timeout."""
            return conn.run(["sh", "-c", 'cd /tmp && "$@"', "sh", "timeout", str(limit_s), "runuser", "-u",
                             props["user"], "--", "srun", f"--partition={props['partition']}",
                             f"--reservation={RESERVATION}", f"-N{len(group)}", f"--nodelist={','.join(group)}",
                             "--ntasks-per-node=1", "--exclusive", *gres, f"--mem={props['job_mem_mib']}",
                             f"--time={(limit_s + 59) // 60}", f"--job-name={name}", *argv],
                            mutating=True, check=False, timeout=limit_s + 60)

        res = srun("gpu-fleet-acceptance-fleet", timeout, "sh", "-c", _RANK)
        job_id = next(iter(re.findall(r"job=(\d+)", res.stdout)), "")
        checks = judge_fleet_job(res.stdout, res.rc, group, count)
        for c in deep_checks(props, "fleet"):
            out = srun("gpu-fleet-acceptance-deep", int(c["timeout_s"]), "sh", "-c", c["command"])
            checks.append(judge_deep(c, str(out.rc), (out.stdout + out.stderr).splitlines()))
        alloc = ""
        if props.get("accounting") and job_id:
            alloc = conn.run(sh(SACCT_FIELDS, "AllocTRES", job_id), mutating=False, check=False,
                             timeout=90).stdout.strip().partition("|")[2]
            checks.append(judge_tres(alloc, gpu_type, count * len(group)))
        return {"job_id": job_id, "nodes": group, "gpus": count * len(group), "alloc_tres": alloc,
                "passed": all(c["passed"] for c in checks), "checks": checks,
                **({} if res.rc == 0 else {"output": (res.stdout + res.stderr).strip().splitlines()[-20:]})}


def node_hash_input(node: dict, uuids: Optional[list], applied: dict, checks: dict) -> str:
    """What a node's verdict depends on, as one string to hash."""
    return repr((sorted(node.items()), uuids or [], sorted(applied.items()), sorted(checks.items())))
