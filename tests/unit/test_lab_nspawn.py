"""lab/nspawn.distinct_hierarchies: which cgroup mounts a host's boot joins."""

from __future__ import annotations

from pathlib import Path

from lab.nspawn import distinct_hierarchies, hierarchies

PROC_CGROUPS = """#subsys_name\thierarchy\tnum_cgroups\tenabled
cpuset\t3\t13\t1
cpu\t1\t10\t1
cpuacct\t2\t13\t1
memory\t4\t765\t1
pids\t8\t10\t1
"""

MOUNTS = """tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0
cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0
cgroup /sys/fs/cgroup/cpuacct cgroup rw,relatime,cpuacct 0 0
cgroup /sys/fs/cgroup/cpuset cgroup rw,relatime,cpuset 0 0
cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0
cgroup /sys/fs/cgroup/pids cgroup rw,relatime,pids 0 0
cgroup /sys/fs/cgroup/systemd cgroup rw,relatime,name=systemd 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0
proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0
"""

PERSISTENT = [Path(p) for p in ("/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpuacct", "/sys/fs/cgroup/cpuset",
                                "/sys/fs/cgroup/memory", "/sys/fs/cgroup/pids", "/sys/fs/cgroup/systemd",
                                "/sys/fs/cgroup/unified")]


def test_every_hierarchy_once_in_mount_order():
    assert distinct_hierarchies(MOUNTS, PROC_CGROUPS) == PERSISTENT


def test_a_booting_hosts_passing_mounts_are_not_hierarchies_of_their_own():
    # systemd-nspawn's own short-lived cgroup2 mount (a host booting with the unified
    # hierarchy), and a second mount of a v1 hierarchy
    passing = ("cgroup2 /tmp/unifiedUCvyf2 cgroup2 rw,relatime 0 0\n"
               "cgroup /tmp/x cgroup rw,nosuid,relatime,memory 0 0\n")
    assert distinct_hierarchies(MOUNTS + passing, PROC_CGROUPS) == PERSISTENT


def test_a_hierarchy_with_two_controllers_is_one():
    mounts = "cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,nosuid,cpu,cpuacct 0 0\n" \
             "cgroup /sys/fs/cgroup/cpu cgroup rw,nosuid,cpuacct,cpu 0 0\n"
    assert distinct_hierarchies(mounts, PROC_CGROUPS) == [Path("/sys/fs/cgroup/cpu,cpuacct")]


def test_this_machines_hierarchies_are_distinct_mounts():
    got = hierarchies()
    assert len(got) == len(set(got))
    assert all(p.is_dir() for p in got)
