"""`WorkloadRun`: the pipeline submitted through Slurm, waited for, judged by its own gates, and
its release rolled back by one rename.

A rollout check: it runs on create and when what it runs changes (the runtime, the jobs, the
stack's triggers), never on refresh or on an `up` with nothing changed. The run fails closed
naming the first job that did not complete, its state and its last output lines, and says
that nothing was published (the QA job publishes only when every gate passed). A new release
rolls the previous one back; destroy rolls back the last. A rollback only renames the release to
`<releases>/.rolled-back/<job>` after rollback.sh's checks, and proves the segments and the other
releases unchanged; the media are never deleted.
"""

from __future__ import annotations

import json
import time
from typing import Any, Optional

import pulumi
from pulumi.dynamic import Resource

from ...errors import FleetError
from ...kit import connect, sh
from ..acceptance.criteria import workload_row
from ..acceptance.report import replace_row
from ...providers.base import RolloutCheck
from ...providers.parts import Props, _entry
from ...scripts import script, script_text, sections
from .runtime import ONHOST

_SUBMIT = script(__file__, "submit.sh")
_STATES = script(__file__, "job_states.sh")
_READ = script(__file__, "run_read.sh")
_ROLLBACK = script_text(ONHOST / "rollback.sh")
#: Slurm states a job never leaves
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED",
            "BOOT_FAIL", "DEADLINE"}
POLL_S = 3


def parse_submit(stdout: str) -> dict[str, str]:
    """`p0=<id> render=<id> assemble=<id> qa=<id>` -> {step: id}."""
    ids = dict(p.split("=", 1) for p in stdout.split() if "=" in p)
    if set(ids) != {"p0", "render", "assemble", "qa"} or not all(v.isdigit() for v in ids.values()):
        raise FleetError(f"workload: the submission printed {stdout.strip()!r}, not four job ids")
    return ids


def _when(parts: list[str], i: int) -> Optional[str]:
    """A job's start or end as Slurm prints it (2026-12-06T07:30:01), None where it has none."""
    v = parts[i].strip() if len(parts) > i else ""
    return v if v[:1].isdigit() else None


def parse_states(stdout: str) -> dict[str, dict[str, Any]]:
    """job_states.sh's lines -> {id: {state, exit_code, reason, start, end}} (sacct's `CANCELLED by 0` -> CANCELLED)."""
    out = {}
    for line in stdout.splitlines():
        parts = line.split("|")
        if len(parts) >= 4 and parts[0].strip().isdigit():
            out[parts[0].strip()] = {"state": parts[1].split()[0] if parts[1].split() else "UNKNOWN",
                                     "exit_code": parts[2].strip(), "reason": parts[3].strip(),
                                     "start": _when(parts, 4), "end": _when(parts, 5)}
    return out


def first_failure(ids: dict[str, str], states: dict[str, dict[str, Any]]) -> Optional[str]:
    """The first step, in pipeline order, that ended otherwise than COMPLETED 0:0."""
    for step, j in ids.items():
        s = states.get(j, {})
        if s.get("state") in TERMINAL and (s["state"], s.get("exit_code")) != ("COMPLETED", "0:0"):
            return step
    return None


def parse_read(stdout: str) -> dict[str, Any]:
    """run_read.sh's sections -> {published, film_sha256, release_sha256, verification, joins, outputs}."""
    sec = sections(stdout)

    def as_json(name: str) -> Any:
        try:
            return json.loads(sec.get(name, "").strip() or "null")
        except ValueError:
            return None
    done = as_json("final.done") or {}
    return {"published": sec.get("published", "").strip() == "yes", "film_sha256": done.get("film_sha256"),
            "release_sha256": sec.get("release.sha256", "").strip().splitlines(),
            "verification": as_json("verification"), "joins": sec.get("joins", "").strip() or None,
            "outputs": {k[4:]: v.strip().splitlines() for k, v in sec.items() if k.startswith("out ")}}


def gate_summary(verification: Optional[dict]) -> dict[str, Any]:
    """Each gate's verdict and figure (the stack output), and the problems of those that failed."""
    if not verification:
        return {}
    return {g["name"]: {"passed": g["passed"], "figure": g["figure"],
                        **({"problems": g["problems"][:5]} if g.get("problems") else {})}
            for g in verification.get("gates", [])}


class WorkloadRunProvider(RolloutCheck):
    rerun_on = ("triggers", "runtime_sha256", "jobs_sha256")

    def key(self, props: Props) -> str:
        return "workload"

    def run(self, props: Props) -> dict[str, Any]:
        ctl, st = connect(props["conn"]), connect(props["storage_conn"])
        sub = ctl.run(sh(_SUBMIT, props["user"], props["jobs_dir"]), mutating=True, check=False, timeout=120)
        if sub.rc != 0:
            raise FleetError(f"workload: sbatch refused the pipeline as {props['user']} (exit {sub.rc}): "
                             f"{(sub.stderr or sub.stdout).strip()[-800:]}")
        ids = parse_submit(sub.stdout)
        states = self._wait(ctl, props, ids)
        got = parse_read(st.run(sh(_READ, props["server_releases"], props["server_runs"], ids["p0"], ids["render"],
                                   *ids.values()), mutating=False, check=False, timeout=120).stdout)
        failed = first_failure(ids, states)
        run_dir = f"{props['runs']}/{ids['p0']}"
        out = {"jobs": {step: {"id": j, **states.get(j, {})} for step, j in ids.items()},
               "run_dir": run_dir, "release": None, "gates": gate_summary(got["verification"]),
               "passed": bool((got["verification"] or {}).get("passed")),
               "contact_sheet": f"{run_dir}/joins.png" if got["joins"] else None, "rolled_back": None}
        if failed is not None or not got["published"]:
            why = self._failure(ids, states, failed, got)
            self._report(props, {**out, "passed": False, "why": why.splitlines()[0]})
            raise FleetError(why)
        out["release"] = {"job": ids["render"], "dir": f"{props['releases']}/{ids['render']}",
                          "film_sha256": got["film_sha256"], "release_sha256": got["release_sha256"]}
        self._report(props, out)
        return out

    @staticmethod
    def _report(props: Props, run: dict[str, Any]) -> None:
        """Row 7 of the acceptance report beside the state (the acceptance wrote the other six)."""
        report = props.get("report") or {}
        if report.get("dir"):
            replace_row(report["dir"], report["stack"], workload_row(run))

    def _wait(self, ctl, props: Props, ids: dict[str, str]) -> dict[str, dict[str, Any]]:
        """Until every job has ended (a cancelled dependency ends the ones after it), or the
        stack's limit: then every job is cancelled and the run fails."""
        deadline = time.monotonic() + int(props["timeout_s"])
        argv = sh(_STATES, "1" if props["accounting"] else "0", *ids.values())
        states: dict[str, dict[str, Any]] = {}
        while True:
            # a job seen ended stays so (slurmctld forgets one MinJobAge after it ended)
            now = parse_states(ctl.run(argv, mutating=False, check=False, timeout=60).stdout)
            states.update({j: s for j, s in now.items() if states.get(j, {}).get("state") not in TERMINAL})
            if all(states.get(j, {}).get("state") in TERMINAL for j in ids.values()):
                return states
            if time.monotonic() > deadline:
                ctl.run(["scancel", *ids.values()], mutating=True, check=False, timeout=60)
                raise FleetError(f"workload: the pipeline ({', '.join(f'{k} {v}' for k, v in ids.items())}) did not "
                                 f"end within workload.timeout_s ({props['timeout_s']} s); its jobs were cancelled and "
                                 "nothing was published")
            time.sleep(POLL_S)

    @staticmethod
    def _failure(ids: dict[str, str], states: dict, failed: Optional[str], got: dict) -> str:
        if failed is None:  # every job completed, yet no release: the QA job's own word is the cause
            failed = "qa"
        j = ids[failed]
        s = states.get(j, {})
        lines = [f"workload: the pipeline stopped at its {failed} job ({j}: {s.get('state')} {s.get('exit_code')}"
                 f"{', ' + s['reason'] if s.get('reason') not in (None, '', 'None') else ''}); nothing was published"]
        bad = {n: g for n, g in gate_summary(got["verification"]).items() if not g["passed"]}
        for name, g in bad.items():
            lines.append(f"  gate {name} failed: {json.dumps(g['figure'], sort_keys=True)}"
                         + "".join(f"\n    - {p}" for p in g.get("problems", [])))
        out = [x for x in got["outputs"].get(j, []) if x.strip()]
        if out:
            lines.append(f"  the last lines of job {j}'s output:")
            lines += [f"    {x}" for x in out[-20:]]
        return "\n".join(lines)

    @_entry
    def update(self, _id: str, olds: Props, news: Props):
        result = RolloutCheck.update.__wrapped__(self, _id, olds, news)
        before, after = olds.get("release"), result.outs.get("release")
        if before and after and before.get("job") != after.get("job"):
            self._roll_back(news, before, watch=[after["dir"]])
        return result

    @_entry
    def delete(self, _id: str, props: Props) -> None:
        if props.get("release"):
            self._roll_back(props, props["release"], watch=[])

    def _roll_back(self, props: Props, release: dict, watch: list[str]) -> None:
        """rollback.sh on the storage host: the release renamed after its checks; the run's
        segments and `watch` (other releases) proven unchanged."""
        job = release["job"]
        ctl, st = connect(props["conn"]), connect(props["storage_conn"])
        recorded = ((props.get("jobs") or {}).get("render") or {})
        state, code = recorded.get("state", ""), recorded.get("exit_code", "")
        if props["accounting"]:  # what accounting recorded, when the cluster has it
            now = parse_states(ctl.run(sh(_STATES, "1", job), mutating=False, check=False, timeout=60).stdout)
            state, code = now.get(job, {}).get("state", state), now.get(job, {}).get("exit_code", code)
        server = {props["releases"]: props["server_releases"], props["runs"]: props["server_runs"]}

        def on_server(path: str) -> str:
            for client, srv in server.items():
                if path.startswith(client + "/"):
                    return srv + path[len(client):]
            return path
        run_dir = on_server(props.get("run_dir") or "")
        watched = [p for p in [f"{run_dir}/media", *map(on_server, watch)] if p and p != "/media"]
        res = st.run(sh(_ROLLBACK, props["server_releases"], job, state, code, *watched), mutating=True,
                     check=False, timeout=600)
        if res.rc != 0:
            raise FleetError(f"workload: the rollback of release {job} was refused: "
                             f"{(res.stderr or res.stdout).strip()[-800:]}")


class WorkloadRun(Resource):
    jobs: pulumi.Output[dict]
    release: pulumi.Output[dict]
    gates: pulumi.Output[dict]
    passed: pulumi.Output[bool]
    contact_sheet: pulumi.Output[Optional[str]]
    run_dir: pulumi.Output[str]

    def __init__(self, name: str, *, conn: dict, storage_conn: dict, user: str, jobs_dir: str, accounting: bool,
                 timeout_s: int, runs: str, releases: str, server_runs: str, server_releases: str,
                 runtime_sha256: pulumi.Input[str], jobs_sha256: str, triggers: dict,
                 report: Optional[dict] = None, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__(WorkloadRunProvider(), name,
                         {"conn": conn, "storage_conn": storage_conn, "user": user, "jobs_dir": jobs_dir,
                          "accounting": accounting, "timeout_s": timeout_s, "runs": runs, "releases": releases,
                          "server_runs": server_runs, "server_releases": server_releases,
                          "runtime_sha256": runtime_sha256, "jobs_sha256": jobs_sha256, "triggers": triggers,
                          "report": report,
                          "jobs": None, "release": None, "gates": None, "passed": None, "contact_sheet": None,
                          "run_dir": None, "rolled_back": None},
                         opts)
