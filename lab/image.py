"""The base image: a debootstrapped Debian bookworm, built once and cached.

The image is cached machine-wide as a zstd tarball,
`<cache>/lab/image-<key>.tar.zst`, and extracted once into
`<cache>/lab/base-<key>/`, the read-only lower layer every host's overlay
shares. The key hashes everything that goes into the image (suite, variant,
package list and the customization script), so changing any of them builds a
new image beside the old one.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from .apt_sources import host_mirrors
from .common import LabError, cache_dir, check_tools, flock, log, remove_tree, run, run_with_progress, sha16

SUITE = "bookworm"
VARIANT = "minbase"
INCLUDE = [
    "systemd", "systemd-sysv", "dbus", "libpam-systemd", "openssh-server", "python3",
    "iproute2", "sudo", "procps", "apt", "ca-certificates", "less",
]
ADMIN_UID = 2001  # fleetadmin: passwordless sudo
NOPW_UID = 2002   # fleetnopw: sudo needs a password it does not have

SSHD_CONFIG = """\
# gpu-fleet lab: root by key only, one host key generated per host before boot.
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
HostKey /etc/ssh/ssh_host_ed25519_key
UseDNS no
MaxSessions 64
MaxStartups 64:30:128
"""

# Runs inside the fresh rootfs (chroot, no network) once per image. Its text is the image's key
# (image_key): two unit lines run past 120 columns rather than change every cached image (noqa below).
CUSTOMIZE = f"""\
set -eu
export LC_ALL=C
# apt: the lab repository only (bound read-only at /srv/lab-repo), no recommends
rm -f /etc/apt/sources.list /etc/apt/sources.list.d/*
printf 'deb [trusted=yes] file:/srv/lab-repo ./\\n' > /etc/apt/sources.list.d/lab.list
printf 'APT::Install-Recommends "false";\\nAPT::Install-Suggests "false";\\n' > /etc/apt/apt.conf.d/90lab
mkdir -p /srv/lab-repo
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin
mkdir -p /var/lib/apt/lists/partial
find /var/cache/apt/archives -name '*.deb' -delete
# identity comes per host: machine-id, hostname, host keys
: > /etc/machine-id
rm -f /var/lib/dbus/machine-id
ln -s /etc/machine-id /var/lib/dbus/machine-id
rm -f /etc/ssh/ssh_host_*
echo lab > /etc/hostname
: > /etc/resolv.conf
cat > /etc/ssh/sshd_config.d/gpu-fleet-lab.conf <<'SSHD'
{SSHD_CONFIG}SSHD
# networking by systemd-networkd (a static address per host on host0)
systemctl enable systemd-networkd.service >/dev/null 2>&1
# nothing that wants the network, a console or a timer
systemctl mask apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer \\
  dpkg-db-backup.timer console-getty.service systemd-firstboot.service >/dev/null 2>&1
# The cgroup v1 controllers a v1 Slurm node has. The container sees the unified hierarchy
# only; Slurm 22.05 mounted the v1 controllers itself (CgroupAutomount), 24.11 no longer does.
cat > /etc/systemd/system/gpu-fleet-lab-cgroup-v1.service <<'UNIT'
[Unit]
Description=lab: mount the cgroup v1 controllers Slurm's cgroup/v1 plugin uses
Before=slurmd.service slurmctld.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh -c 'for c in cpuset memory devices freezer cpuacct; do d=/sys/fs/cgroup/$c; mountpoint -q $d || {{ mkdir -p $d && mount -t cgroup -o $c cgroup $d; }}; done'

[Install]
WantedBy=multi-user.target
UNIT
systemctl enable gpu-fleet-lab-cgroup-v1.service >/dev/null 2>&1
# A host booted with the legacy hierarchy (the controller: podman's limits need v1 controllers,
# lab/nspawn.py) gets them read-only from nspawn: make its own subtrees writable, as a host's are.
cat > /etc/systemd/system/gpu-fleet-lab-cgroup-rw.service <<'UNIT'
[Unit]
Description=lab: the v1 controllers of a legacy-booted host writable (podman's cgroupfs manager)
DefaultDependencies=no
Before=sysinit.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh -c '[ "$$(stat -fc %%T /sys/fs/cgroup)" = tmpfs ] || exit 0; for d in /sys/fs/cgroup/*; do [ "$$(stat -fc %%T "$$d")" = cgroupfs ] && mount -o remount,bind,rw "$$d"; done; exit 0'

[Install]
WantedBy=sysinit.target
UNIT
systemctl enable gpu-fleet-lab-cgroup-rw.service >/dev/null 2>&1
# Keep each user's manager (user@<uid>.service) between SSH sessions. On the controller, booted
# with the legacy cgroup hierarchy, systemd in the container gets no notice that a stopped
# user manager's cgroup emptied, so the stop logind asks for 10 s after the last session waits
# out its timeouts (~2 min, "Processes still around after final SIGKILL"), and every login in
# that window waits for the manager to start again: 60 s SSH connects to ctl, the first one
# failing (bench/README.md, fanout.py).
mkdir -p /etc/systemd/logind.conf.d
printf '[Login]\\nUserStopDelaySec=infinity\\n' > /etc/systemd/logind.conf.d/gpu-fleet-lab.conf
# test users for the transport's sudo handling (key login; no usable password)
useradd -m -u {ADMIN_UID} -U -s /bin/bash fleetadmin
useradd -m -u {NOPW_UID} -U -s /bin/bash fleetnopw
usermod -p '*' fleetadmin
usermod -p '*' fleetnopw
echo 'fleetadmin ALL=(ALL:ALL) NOPASSWD: ALL' > /etc/sudoers.d/fleetadmin
echo 'fleetnopw ALL=(ALL:ALL) ALL' > /etc/sudoers.d/fleetnopw
chmod 0440 /etc/sudoers.d/fleetadmin /etc/sudoers.d/fleetnopw
install -d -m 0700 /root/.ssh
install -d -m 0700 -o fleetadmin -g fleetadmin /home/fleetadmin/.ssh
install -d -m 0700 -o fleetnopw -g fleetnopw /home/fleetnopw/.ssh
"""  # noqa: E501

TAR_FLAGS = ["--numeric-owner", "--xattrs", "--xattrs-include=*", "--acls"]


def image_key() -> str:
    return sha16(SUITE, VARIANT, INCLUDE, CUSTOMIZE)


def ensure_base() -> Path:
    """The extracted base rootfs for the current key, building or extracting it if needed."""
    cache = cache_dir()
    key = image_key()
    base = cache / f"base-{key}"
    ok = cache / f"base-{key}.ok"
    tarball = cache / f"image-{key}.tar.zst"
    if ok.exists() and base.is_dir():
        return base
    with flock(cache / ".image.lock", "image"):
        if ok.exists() and base.is_dir():
            return base
        if not tarball.exists():
            build_image(cache, key, tarball, base)
        else:
            extract(tarball, base)
        ok.write_text(f"{key}\n")
    return base


def build_image(cache: Path, key: str, tarball: Path, base: Path) -> None:
    check_tools(["debootstrap", "chroot", "zstd", "tar"])
    mirror = host_mirrors(SUITE).debian
    build = cache / f".build-{key}"
    remove_tree(build)  # a build killed mid-way (debootstrap mounts /proc and /sys)
    remove_tree(base)
    start = time.monotonic()
    log(f"building the lab image {key} (debootstrap {SUITE} {VARIANT} from {mirror}; first time "
        "on this machine, about 2 minutes)")
    run_with_progress(
        ["debootstrap", f"--variant={VARIANT}", f"--include={','.join(INCLUDE)}",
         "--components=main", SUITE, str(build), mirror],
        cache / f"debootstrap-{key}.log", "debootstrap",
    )
    log(f"  debootstrap done in {time.monotonic() - start:.0f} s; customizing")
    for mp in ("proc", "sys", "dev/pts"):
        if os.path.ismount(build / mp):
            run(["umount", "-l", str(build / mp)], check=False)
    run(["chroot", str(build), "/bin/sh", "-c", CUSTOMIZE],
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"})
    t = time.monotonic()
    tmp = tarball.with_name(tarball.name + ".tmp")
    run(["bash", "-o", "pipefail", "-c",
         'tar -C "$1" ' + " ".join(TAR_FLAGS) + ' -cf - . | zstd -q -T0 -6 -f -o "$2"',
         "tar", str(build), str(tmp)])
    os.replace(tmp, tarball)
    os.rename(build, base)
    size = tarball.stat().st_size / 2**20
    log(f"  image cached: {tarball} ({size:.0f} MiB, compressed in {time.monotonic() - t:.0f} s); "
        f"total {time.monotonic() - start:.0f} s")


def extract(tarball: Path, base: Path) -> None:
    start = time.monotonic()
    tmp = base.with_name(f".{base.name}.tmp")
    remove_tree(tmp)
    remove_tree(base)
    tmp.mkdir(mode=0o755)
    log(f"extracting the cached lab image {tarball.name}")
    try:
        run(["bash", "-o", "pipefail", "-c",
             'zstd -q -dc "$1" | tar -C "$2" ' + " ".join(TAR_FLAGS) + " -xpf -",
             "tar", str(tarball), str(tmp)])
    except LabError as e:
        remove_tree(tmp)
        raise LabError(f"the cached image {tarball} does not extract (delete it to rebuild): {e}") from e
    os.rename(tmp, base)
    log(f"  extracted in {time.monotonic() - start:.1f} s")
