"""The Slurm layer's wiring: identities before packages, the upgrade window before anything is published, canary first, partitions opened only by the final acceptance."""

from __future__ import annotations

import pulumi

from .wiring import RAW, build, settled


@pulumi.runtime.test
def test_identities_come_before_packages_on_every_host(graph):
    fleet = build(RAW)

    def check(_):
        for h in ("storage", "gpu01", "gpu02", "gpu03"):
            assert f"{h}-accounts" in graph.deps[f"{h}-slurm-packages"], h
            users = [m["name"] for m in graph.inputs[f"{h}-accounts"]["members"]]
            assert users == ["munge", "slurm", "fleetcanary"], (h, users)
            assert graph.before(f"{h}-slurm-packages", f"{h}-munge-key")

    return settled(fleet).apply(check)

@pulumi.runtime.test
def test_the_upgrade_window_is_checked_before_the_release_is_published_or_any_source_moves(graph):
    fleet = build(RAW)

    def check(_):
        release = next(n for n in graph.deps if n.startswith("slurm-release-"))
        assert "slurm-upgrade-window" in graph.deps[release]
        for h in ("storage", "gpu01", "gpu02", "gpu03"):
            assert graph.before("slurm-upgrade-window", f"{h}-slurm-apt-source"), h
        window = graph.inputs["slurm-upgrade-window"]
        assert [(x["conn"]["name"], x["set"]) for x in window["hosts"]] == [
            ("storage", "controller"), ("gpu01", "node"), ("gpu02", "node"), ("gpu03", "node")]
        assert window["sets"]["node"]["upgrade_from"] == ["slurm-client", "slurmd"]

    return settled(fleet).apply(check)

@pulumi.runtime.test
def test_canary_first_gate_comes_before_every_other_nodes_packages(graph):
    fleet = build(RAW)

    def check(_):
        assert graph.before("gpu01-slurmd", "canary-first")
        assert graph.before("storage-slurmctld", "canary-first")
        for h in ("gpu02", "gpu03"):
            assert "canary-first" in graph.deps[f"{h}-slurm-packages"], h
            # nothing of the release (packages, key, config, daemons) reaches another node first
            for r in ("munge-key", "slurm-config", "munge", "slurmd"):
                assert graph.before("canary-first", f"{h}-{r}"), (h, r)
        assert not graph.before("canary-first", "gpu01-slurm-packages")

    return settled(fleet).apply(check)

@pulumi.runtime.test
def test_only_the_final_acceptance_opens_partitions(graph):
    fleet = build(RAW)

    def check(_):
        jobs = {n: i for n, i in graph.inputs.items() if "partitions" in i and "user" in i}
        assert sorted(jobs) == ["canary-first", "fleet-acceptance"]
        assert jobs["canary-first"]["open_partitions"] is False
        # the final acceptance judges every admitted node and is what sets the partitions UP
        assert sorted(jobs["fleet-acceptance"]["nodes"]) == ["gpu01", "gpu02", "gpu03"]
        for n in ("slurm-reconfigure", "gpu02-slurmd", "gpu03-slurmd", "accounting-check"):
            assert graph.before(n, "fleet-acceptance"), n

    return settled(fleet).apply(check)
