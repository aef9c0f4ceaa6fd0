#!/bin/sh
# ZFS facts as shell functions, sent ahead of a probe's own script (facts.shell("zfs"));
# components/facts/zfs.py parses what they print. No positional arguments.

# fact_zpool_health POOL: "<pool>\t<health>", or zpool's error (the parser skips it).
fact_zpool_health() {
  zpool list -H -o name,health "$1" 2>&1
}

# fact_zfs_get PROPS DATASET...: "<name>\t<property>\t<value>\t<source>" lines, raw values (-p);
# errors dropped (a dataset missing is one the parser does not find).
fact_zfs_get() {
  zfs get -H -p -o name,property,value,source "$@" 2>/dev/null
}
