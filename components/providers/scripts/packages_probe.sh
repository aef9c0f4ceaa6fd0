#!/bin/sh
# Reads the host's installed packages (dpkg-query), apt holds, and whether dpkg's journal holds
# an interrupted operation (/var/lib/dpkg/updates not empty). No arguments.

echo "== installed"
dpkg-query -W -f='${Package} ${Version} ${db:Status-Abbrev}\n' 2>/dev/null
echo "== held"
apt-mark showhold 2>/dev/null
echo "== dpkg-updates"
find /var/lib/dpkg/updates -mindepth 1 -maxdepth 1 2>/dev/null | head -n 1
