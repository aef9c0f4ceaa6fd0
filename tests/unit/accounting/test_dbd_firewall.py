"""slurmdbd's firewall: allowed sources, the ruleset and unit (golden), the two-sided verdict."""

from __future__ import annotations

import ipaddress

import pytest

from components.layers.accounting import firewall as fw
from components.config.load import parse_fleet_config
from components.errors import ConfigError
from tests.conftest import fleet14, stack_config
from tests.unit.slurm.test_slurm_render import check_golden


def full_cfg(**accounting):
    raw = fleet14()
    raw["gpu-fleet:accounting"] = {"enabled": True, **accounting}
    return parse_fleet_config(raw, "full")


def test_golden_ruleset_and_unit():
    cfg = full_cfg(dbd_clients=["198.51.100.0/28", "2001:db8::/64"])
    check_golden("full.slurmdbd-firewall.nft", fw.render_ruleset(fw.allowed_sources(cfg.accounting, cfg.hosts, cfg.nodes)))
    check_golden("slurmdbd-firewall.service", fw.render_unit())


def test_sources_are_the_nodes_the_controller_and_the_extra_networks():
    cfg = full_cfg(dbd_clients=["198.51.100.0/28"])
    nodes = {n.address for n in cfg.nodes}
    got = fw.allowed_sources(cfg.accounting, cfg.hosts, cfg.nodes)
    nets = [ipaddress.ip_network(s) for s in got]
    for addr in nodes | {cfg.hosts.controller.address, "198.51.100.7"}:
        assert any(ipaddress.ip_address(addr) in n for n in nets), (addr, got)
    # nothing else from the documentation range the stack uses
    assert not any(ipaddress.ip_address("192.0.2.200") in n for n in nets), got
    assert got == sorted(set(got), key=got.index)  # collapsed, no duplicates


def test_ruleset_resets_every_other_source_and_keeps_loopback():
    text = fw.render_ruleset(["10.0.0.5/32", "fd00::/8"])
    lines = [line.strip() for line in text.splitlines()]
    assert lines.index('iif "lo" accept') < lines.index("tcp dport 6819 reject with tcp reset")
    assert "tcp dport 6819 ip saddr { 10.0.0.5/32 } accept" in lines
    assert "tcp dport 6819 ip6 saddr { fd00::/8 } accept" in lines
    # replaced in one transaction: declared, deleted, defined
    assert lines[lines.index(f"table inet {fw.TABLE}") + 1] == f"delete table inet {fw.TABLE}"


def test_storage_host_outside_the_compute_network_is_an_outsider():
    raw = stack_config("canary")
    raw["gpu-fleet:hosts"] = {"storage": {"name": "nas", "address": "192.0.2.9"},
                              "controller": {"name": "ctl", "address": "192.0.2.10"}}
    raw["gpu-fleet:accounting"] = {"enabled": True}
    cfg = parse_fleet_config(raw, "canary")
    assert [h.name for h in fw.outsiders(cfg.accounting, cfg.hosts, cfg.nodes)] == ["nas"]
    raw["gpu-fleet:accounting"] = {"enabled": True, "dbd_clients": ["192.0.2.0/24"]}
    assert fw.outsiders(*_fw_slice(parse_fleet_config(raw, "canary"))) == []


def test_a_dns_named_node_needs_the_compute_network():
    raw = stack_config("canary")
    raw["gpu-fleet:nodes"][0]["address"] = "gpu01.example.org"
    raw["gpu-fleet:accounting"] = {"enabled": True}
    with pytest.raises(ConfigError) as e:
        parse_fleet_config(raw, "canary")
    assert "gpu-fleet:nodes[0] (gpu01).address" in str(e.value) and "accounting.dbd_clients" in str(e.value)
    raw["gpu-fleet:accounting"] = {"enabled": True, "dbd_clients": ["192.0.2.0/24"]}
    parse_fleet_config(raw, "canary")
    raw["gpu-fleet:accounting"] = {"enabled": False}
    parse_fleet_config(raw, "canary")  # no slurmdbd, no firewall to admit it


def test_a_network_with_host_bits_is_refused_by_field():
    raw = stack_config("canary")
    raw["gpu-fleet:accounting"] = {"enabled": True, "dbd_clients": ["192.0.2.5/24"]}
    with pytest.raises(ConfigError) as e:
        parse_fleet_config(raw, "canary")
    assert "gpu-fleet:accounting.dbd_clients[0]" in str(e.value)


def test_reachability_verdict_both_sides():
    ok = fw.judge_reachability("10.0.0.11", 6819, {"node1": (True, "")}, {"storage": (False, "refused")})
    assert ok == []
    fails = fw.judge_reachability("10.0.0.11", 6819, {"node1": (False, "Connection refused")},
                                  {"storage": (True, "")})
    assert fails == ["node1 cannot reach slurmdbd at 10.0.0.11:6819 (Connection refused)",
                     "storage reaches slurmdbd at 10.0.0.11:6819 although it is outside the allowed "
                     "sources: the firewall does not hold"]


def _fw_slice(cfg):
    return cfg.accounting, cfg.hosts, cfg.nodes
