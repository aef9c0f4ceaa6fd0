"""lab.apt_sources: the machine's Debian mirror read from its own apt sources, both formats."""

from __future__ import annotations

import pytest

from lab.apt_sources import Entry, Mirrors, mirror_for, mirrors, parse_deb822, parse_one_line, read_entries
from lab.common import LabError

ONE_LINE = """\
# the site's mirror
deb http://mirror.example/debian/ bookworm main contrib
deb-src http://mirror.example/debian bookworm main
  deb [arch=amd64 signed-by=/usr/share/keyrings/x.gpg] https://mirror.example/debian-security bookworm-security main
#deb http://old.example/debian bookworm main
deb http://third.example/apt cloud-sdk-bookworm main   # trailing comment
"""

DEB822 = """\
Types: deb deb-src
# a comment inside the stanza
URIs: https://mirror.example/debian/
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: https://mirror.example/debian-security
Suites: bookworm-security
Components: main

Types: deb
URIs: http://off.example/debian
Suites: bookworm
Enabled: no

types: deb
uris:
 http://folded.example/debian
suites: trixie
"""


def test_one_line_entries():
    assert parse_one_line(ONE_LINE) == [
        Entry(("deb",), ("http://mirror.example/debian/",), ("bookworm",)),
        Entry(("deb-src",), ("http://mirror.example/debian",), ("bookworm",)),
        Entry(("deb",), ("https://mirror.example/debian-security",), ("bookworm-security",)),
        Entry(("deb",), ("http://third.example/apt",), ("cloud-sdk-bookworm",)),
    ]


def test_deb822_stanzas():
    assert parse_deb822(DEB822) == [
        Entry(("deb", "deb-src"), ("https://mirror.example/debian/",), ("bookworm", "bookworm-updates")),
        Entry(("deb",), ("https://mirror.example/debian-security",), ("bookworm-security",)),
        Entry(("deb",), ("http://off.example/debian",), ("bookworm",), enabled=False),
        Entry(("deb",), ("http://folded.example/debian",), ("trixie",)),  # lower case, continued field
    ]


@pytest.mark.parametrize("parse,text", [(parse_one_line, ONE_LINE), (parse_deb822, DEB822)])
def test_the_suites_mirror_and_its_security_mirror(parse, text):
    scheme = "http" if parse is parse_one_line else "https"
    assert mirrors(parse(text), "bookworm", "x") == Mirrors(f"{scheme}://mirror.example/debian",
                                                             "https://mirror.example/debian-security")


def test_only_an_enabled_deb_entry_over_http_serving_the_suite_counts():
    entries = [Entry(("deb-src",), ("http://src.example/debian",), ("bookworm",)),
               Entry(("deb",), ("http://off.example/debian",), ("bookworm",), enabled=False),
               Entry(("deb",), ("cdrom:[Debian]/",), ("bookworm",)),
               Entry(("deb",), ("http://third.example/apt",), ("cloud-sdk-bookworm",)),
               Entry(("deb",), ("file:/srv/repo", "http://two.example/debian"), ("bookworm",))]
    assert mirror_for(entries, "bookworm") == "http://two.example/debian"
    assert mirror_for(entries[:-1], "bookworm") is None
    assert mirrors(entries[-1:], "bookworm", "x").security is None


def test_a_machine_without_debian_sources_is_told_so_and_what_to_do():
    ubuntu = parse_one_line("deb http://ubuntu.example/ubuntu jammy main\n")
    with pytest.raises(LabError) as e:
        mirrors(ubuntu, "bookworm", "/etc/apt/sources.list")
    msg = str(e.value)
    assert msg.startswith("this machine's apt sources (/etc/apt/sources.list) name no Debian bookworm mirror")
    assert "add your mirror's `deb <uri> bookworm main` line" in msg


def test_files_are_read_in_apts_order_each_in_its_format(tmp_path):
    d = tmp_path / "sources.list.d"
    d.mkdir()
    (d / "b.sources").write_text("Types: deb\nURIs: http://b.example/debian\nSuites: bookworm\n")
    (d / "a.list").write_text("deb http://a.example/debian bookworm main\n")
    (d / "c.list.disabled").write_text("deb http://c.example/debian bookworm main\n")
    entries = read_entries(str(tmp_path / "missing.list"), str(d))
    assert [e.uris for e in entries] == [("http://a.example/debian",), ("http://b.example/debian",)]
