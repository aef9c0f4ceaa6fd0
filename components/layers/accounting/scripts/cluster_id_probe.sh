#!/bin/sh
# Reads the controller's clustername file (and its SHA-256) and the DBD's ClusterID for the cluster.
# $1 state file, $2 database, $3 cluster (both names are validated identifiers).

f="$1"
echo "== file"
if [ -f "$f" ]; then cat -- "$f"; echo; echo "== sha"; sha256sum -- "$f" | cut -d' ' -f1; fi
echo "== dbd"
# Slurm before 23.02 keeps no ClusterID: its cluster_table has no id column.
cols=$(mariadb -N -B -e "SELECT column_name FROM information_schema.columns WHERE table_schema='$2'
    AND table_name='cluster_table' AND column_name='id'" 2>&1) || { echo "$cols" | tail -n1; exit 0; }
if [ "$cols" = id ]; then
  mariadb -N -B -e "SELECT id FROM \`$2\`.cluster_table WHERE name='$3' AND deleted=0" 2>&1
else
  echo "no-cluster-ids"
fi
