"""ZfsDatasets and the storage checks, planned and judged from probe text (pure)."""

from __future__ import annotations

import pytest

from components.layers.storage.checks import judge_client
from components.layers.storage.datasets import ZfsDatasetsProvider, marker_text
from components.providers.parts import PlanRefused

PROPS = {
    "conn": {"name": "storage", "address": "10.213.57.10"}, "pool": "ai", "data_dirs": ["jobs", "inputs"],
    "datasets": [
        {"duty": "models", "name": "ai/models", "mountpoint": "/srv/ai/models",
         "properties": {"mountpoint": "/srv/ai/models", "canmount": "on", "sharenfs": "off", "readonly": "on"}},
        {"duty": "data", "name": "ai/data", "mountpoint": "/srv/ai/data",
         "properties": {"mountpoint": "/srv/ai/data", "canmount": "on", "sharenfs": "off", "readonly": "off"}},
    ],
}
GUIDS = {"ai/models": "111", "ai/data": "222"}
P = ZfsDatasetsProvider()


def zfs_line(ds, prop, value, source="local"):
    return f"{ds}\t{prop}\t{value}\t{source}"


def probe(health="ONLINE", exists=("ai/models", "ai/data"), mounted=("ai/models", "ai/data"),
          models_ro=True, markers=True, dirs=("1777", "1777"), status="  pool: ai\n state: ONLINE"):
    out = ["== pool", f"ai\t{health}" if health else "cannot open 'ai': no such pool", "== status", status]
    props = []
    for s in PROPS["datasets"]:
        ds, mp = s["name"], s["mountpoint"]
        out.append(f"== mount {ds}")
        if ds in mounted:
            opts = "ro,relatime" if (s["duty"] == "models" and models_ro) else "rw,relatime"
            out.append(f'TARGET="{mp}" SOURCE="{ds}" FSTYPE="fuse.zfs" OPTIONS="{opts},allow_other"')
        else:
            out.append('TARGET="/" SOURCE="overlay" FSTYPE="overlay" OPTIONS="rw,relatime"')
        out.append(f"== marker {ds}")
        if markers and ds in mounted:
            out.append(marker_text(ds, GUIDS[ds]))
        if ds in exists:
            for k, v in s["properties"].items():
                props.append(zfs_line(ds, k, v))
            props.append(zfs_line(ds, "mounted", "yes" if ds in mounted else "no", "-"))
            props.append(zfs_line(ds, "guid", GUIDS[ds], "-"))
    out += ["== props", *props]
    for d, mode in zip(PROPS["data_dirs"], dirs):
        out += [f"== dir {d}", mode]
    out.append("== end")
    return P.parse(PROPS, "\n".join(out) + "\n")


def test_a_converged_store_plans_nothing_and_reads_back_ok():
    obs = probe()
    assert P.plan(PROPS, obs, {}) == []
    assert P.state(PROPS, obs)["stores_ok"] == {"ai/models": True, "ai/data": True}
    assert P.state(PROPS, obs)["guids"] == GUIDS


def test_missing_datasets_are_created_marked_and_models_made_read_only():
    steps = P.plan(PROPS, probe(exists=(), mounted=(), markers=False, dirs=("", "")), {})
    text = [" ".join(map(str, s.argv)) for s in steps]
    assert text[0] == "zfs create -o mountpoint=/srv/ai/models -o canmount=on -o sharenfs=off ai/models"
    assert "readonly=on" not in text[0]  # set after its marker is written
    assert any("mark ai/models" in s.why for s in steps) and any("read-only" in s.why for s in steps)
    assert text.count("install -d -m 1777 /srv/ai/data/jobs") == 1


@pytest.mark.parametrize("health", ["FAULTED", "UNAVAIL", None])
def test_a_pool_beyond_its_redundancy_or_not_imported_stops_the_rollout(health):
    with pytest.raises(PlanRefused) as e:
        P.plan(PROPS, probe(health=health), {})
    assert "ai" in str(e.value) and "storage" in str(e.value)


def test_an_unmounted_dataset_is_refused_with_what_findmnt_saw():
    with pytest.raises(PlanRefused) as e:
        P.plan(PROPS, probe(mounted=("ai/models",)), {})
    msg = str(e.value)
    assert "dataset ai/data is not mounted (zfs get mounted: no)" in msg
    assert "findmnt -T /srv/ai/data shows / (overlay, overlay)" in msg
    assert "Refusing to export it" in msg


def test_a_writable_mount_of_the_read_only_store_is_drift():
    obs = probe(models_ro=False)
    assert P.state(PROPS, obs)["stores_ok"]["ai/models"] is False
    assert [s.why for s in P.plan(PROPS, obs, {})] == ["make ai/models read-only (the mount is writable)"]


def test_sharenfs_turned_on_by_someone_is_set_back_off():
    obs = probe()
    obs["stores"]["ai/data"]["props"]["sharenfs"] = "on"
    assert [" ".join(s.argv) for s in P.plan(PROPS, obs, {})] == ["zfs set sharenfs=off ai/data"]


def test_delete_never_touches_a_dataset():
    assert P.plan_delete(PROPS, probe()) == []


CLIENT = {"stores": [
    {"duty": "models", "dataset": "ai/models", "client_mount": "/mnt/models", "source": "10.0.0.10:/models"},
    {"duty": "data", "dataset": "ai/data", "client_mount": "/mnt/data", "source": "10.0.0.10:/data"}],
    "fstypes": ["fuse.nfsfuse"]}


def client_out(models_opts="ro", models_write="refused sh: 1: cannot create x: Read-only file system",
               data_write=("written uid=65534", "cleaned"), data_marker=True):
    lines = []
    for s, opts in ((CLIENT["stores"][0], models_opts), (CLIENT["stores"][1], "rw")):
        lines += [f"== mount {s['client_mount']}",
                  f'TARGET="{s["client_mount"]}" SOURCE="{s["source"]}" FSTYPE="fuse.nfsfuse" OPTIONS="{opts},relatime"',
                  f"== marker {s['client_mount']}",
                  marker_text(s["dataset"], GUIDS[s["dataset"]]) if data_marker or s["duty"] == "models" else ""]
    return "\n".join([*lines, "== models-write", models_write, "== data-write", *data_write, "== end"])


def test_a_healthy_client_passes():
    assert judge_client(CLIENT, client_out(), GUIDS) == []


def test_a_client_whose_models_store_takes_writes_fails():
    fails = judge_client(CLIENT, client_out(models_opts="rw", models_write="allowed"), GUIDS)
    assert any("mounted rw" in f and "expected ro" in f for f in fails)
    assert any("write into the models mount was allowed" in f for f in fails)


def test_a_client_seeing_an_empty_directory_fails_on_the_marker():
    fails = judge_client(CLIENT, client_out(data_marker=False), GUIDS)
    assert fails == ["/mnt/data/.gpu-fleet-store reads '', expected 'gpu-fleet store dataset=ai/data "
                     "guid=222': the mount is not ai/data"]


def test_root_not_squashed_on_the_data_store_fails():
    fails = judge_client(CLIENT, client_out(data_write=("written uid=0", "cleaned")), GUIDS)
    assert fails == ["root's write into the data store landed as uid=0, expected uid=65534 (root_squash)"]


SERVER = {"server": "ganesha", "layer": {"enabled": True, "clients": "10.0.0.0/24", "server": "ganesha",
                                         "client": "fuse-libnfs"},
          "stores": [{"duty": "models", "dataset": "ai/models", "mountpoint": "/srv/ai/models", "export_id": 1},
                     {"duty": "data", "dataset": "ai/data", "mountpoint": "/srv/ai/data", "export_id": 2}]}


def server_out(data_mounted=True, data_clients="10.0.0.0/24"):
    data_mount = ('TARGET="/srv/ai/data" SOURCE="ai/data" FSTYPE="fuse.zfs" OPTIONS="rw"' if data_mounted
                  else 'TARGET="/" SOURCE="overlay" FSTYPE="overlay" OPTIONS="rw"')
    return "\n".join([
        "== mount ai/models", 'TARGET="/srv/ai/models" SOURCE="ai/models" FSTYPE="fuse.zfs" OPTIONS="ro"',
        "== ganesha 1", 'method return time=1 sender=:1.7 -> destination=:1.8 serial=4 reply_serial=2 uint16 1 '
        'string "/srv/ai/models" string "/models" string "" array [ struct { string "10.0.0.0/24" int32 0 } ]',
        "== mount ai/data", data_mount,
        "== ganesha 2", 'method return time=1 sender=:1.7 -> destination=:1.8 serial=4 reply_serial=2 uint16 2 '
        f'string "/srv/ai/data" string "/data" string "" array [ struct {{ string "{data_clients}" int32 0 }} ]',
        "== end"])


def test_the_server_view_passes_and_records_what_ganesha_exports():
    from components.layers.storage.checks import judge_server

    facts, fails = judge_server(SERVER, server_out())
    assert fails == []
    assert facts["data"] == {"path": "/srv/ai/data", "pseudo": "/data", "clients": ["10.0.0.0/24"]}


def test_the_server_view_fails_on_an_unmounted_store_and_a_wider_client():
    from components.layers.storage.checks import judge_server

    _, fails = judge_server(SERVER, server_out(data_mounted=False, data_clients="0.0.0.0/0"))
    assert any(f.startswith("/srv/ai/data is not the mountpoint of ai/data: findmnt -T shows /") for f in fails)
    assert any("ganesha exports /srv/ai/data to 0.0.0.0/0, expected 10.0.0.0/24 only" in f for f in fails)
