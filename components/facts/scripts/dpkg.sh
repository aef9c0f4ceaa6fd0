#!/bin/sh
# Package facts as shell functions, sent ahead of a probe's own script (facts.shell("dpkg"));
# components/facts/dpkg.py parses what they print. No positional arguments.

# fact_dpkg_status: "<package> <version> <status abbreviation>", one line a package dpkg knows.
fact_dpkg_status() {
  dpkg-query -W -f='${Package} ${Version} ${db:Status-Abbrev}\n' 2>/dev/null
}
