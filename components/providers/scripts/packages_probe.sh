#!/bin/sh
# Reads the host's installed packages (dpkg-query) and apt holds. No arguments.

echo "== installed"
dpkg-query -W -f='${Package} ${Version} ${db:Status-Abbrev}\n' 2>/dev/null
echo "== held"
apt-mark showhold 2>/dev/null
