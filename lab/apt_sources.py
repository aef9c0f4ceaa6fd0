"""The Debian mirror this machine's own apt sources name: the lab's only package host.

The lab's image (debootstrap) and the 24.11 Slurm build download from the mirror the
machine already uses, so a site behind a proxy or with its own mirror needs no setting and
no package host is named in the code. Both formats are read: one-line entries
(`/etc/apt/sources.list`, `sources.list.d/*.list`) and deb822 stanzas (`*.sources`).
The parsers are pure; `host_mirrors` reads the files.
"""

from __future__ import annotations

import glob
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

from .common import LabError

SOURCES_LIST = "/etc/apt/sources.list"
SOURCES_DIR = "/etc/apt/sources.list.d"
SCHEMES = ("http://", "https://")


@dataclass(frozen=True)
class Entry:
    """One apt source: a URI serving `suites` (a deb822 stanza may list several)."""

    types: tuple[str, ...]
    uris: tuple[str, ...]
    suites: tuple[str, ...]
    enabled: bool = True


@dataclass(frozen=True)
class Mirrors:
    """The machine's Debian archive, and its security archive when it has one."""

    debian: str
    security: Optional[str]


_ONE_LINE = re.compile(r"^\s*(deb|deb-src)\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)")


def parse_one_line(text: str) -> list[Entry]:
    """Entries of a `sources.list` file: `deb [options] uri suite component...` (comments skipped)."""
    out = []
    for line in text.splitlines():
        m = _ONE_LINE.match(line.split("#", 1)[0])
        if m:
            out.append(Entry((m.group(1),), (m.group(2),), (m.group(3),)))
    return out


def parse_deb822(text: str) -> list[Entry]:
    """Entries of a `.sources` file: stanzas split by blank lines; `#` lines are comments and
    a field continues on lines that start with white space."""
    out = []
    for stanza in re.split(r"\n[ \t]*\n", text):
        fields: dict[str, str] = {}
        last = None
        for line in stanza.splitlines():
            if line.lstrip().startswith("#") or not line.strip():
                continue
            if line[0] in " \t" and last:
                fields[last] += " " + line.strip()
                continue
            key, sep, value = line.partition(":")
            if sep:
                last = key.strip().lower()
                fields[last] = value.strip()
        if "uris" in fields:
            out.append(Entry(tuple(fields.get("types", "").split()), tuple(fields["uris"].split()),
                             tuple(fields.get("suites", "").split()),
                             fields.get("enabled", "yes").strip().lower() != "no"))
    return out


def mirror_for(entries: Iterable[Entry], suite: str) -> Optional[str]:
    """The first http(s) URI of an enabled `deb` entry serving `suite`, without a trailing '/'."""
    for e in entries:
        if e.enabled and "deb" in e.types and suite in e.suites:
            for uri in e.uris:
                if uri.startswith(SCHEMES):
                    return uri.rstrip("/")
    return None


def mirrors(entries: list[Entry], suite: str, where: str) -> Mirrors:
    """The Debian mirror serving `suite`, and the one serving `<suite>-security` (or None);
    refuses, saying what to do, when no entry serves `suite`."""
    debian = mirror_for(entries, suite)
    if debian is None:
        raise LabError(
            f"this machine's apt sources ({where}) name no Debian {suite} mirror (an enabled `deb` entry "
            f"for suite {suite} over http or https). The lab downloads its packages only from the Debian "
            f"mirror this machine already uses: run it on Debian {suite}, or add your mirror's "
            f"`deb <uri> {suite} main` line (or a deb822 stanza) to its apt sources.")
    return Mirrors(debian, mirror_for(entries, f"{suite}-security"))


def read_entries(sources_list: str = SOURCES_LIST, sources_dir: str = SOURCES_DIR) -> list[Entry]:
    """Every entry of the machine's apt sources, in apt's order (unreadable files skipped)."""
    files = [sources_list, *sorted(glob.glob(f"{sources_dir}/*.list") + glob.glob(f"{sources_dir}/*.sources"))]
    entries: list[Entry] = []
    for path in files:
        try:
            text = Path(path).read_text()
        except (OSError, UnicodeDecodeError):
            continue
        entries += parse_deb822(text) if path.endswith(".sources") else parse_one_line(text)
    return entries


def host_mirrors(suite: str) -> Mirrors:
    """This machine's Debian mirrors for `suite` (see `mirrors`)."""
    return mirrors(read_entries(), suite, f"{SOURCES_LIST}, {SOURCES_DIR}/*.list and *.sources")
