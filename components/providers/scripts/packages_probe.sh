#!/bin/sh
# Reads the host's installed packages and holds (dpkg-query: a held package's status starts
# with "h", the selection `apt-mark hold` sets), and whether dpkg's journal holds an
# interrupted operation (/var/lib/dpkg/updates not empty), and the head of
# /usr/sbin/policy-rc.d (one packages_no_start.sh left when its host lost power). No
# arguments. One dpkg-query and no `apt-mark showhold`, which loads apt's whole cache to read
# the same selections (issue 16). Calls fact_dpkg_status (components/facts/scripts/dpkg.sh,
# sent ahead of this script).

echo "== installed"
fact_dpkg_status

echo "== dpkg-updates"
find /var/lib/dpkg/updates -mindepth 1 -maxdepth 1 2>/dev/null | head -n 1
echo "== policy-rc.d"
head -n 2 /usr/sbin/policy-rc.d 2>/dev/null || :  # none: nothing to say
