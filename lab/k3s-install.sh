#!/bin/bash
# Runs on a lab node as root (lab/k3s.py, `python -m lab k3s install`): puts K3s there as the
# K3s installer would leave it. stdin: a tar of the files to place (paths relative to /: the
# unit, its env file, /etc/rancher/k3s, the server's tls/ and token, /usr/local/bin/k3s ...).
# Arguments: <server|agent> <parts key>.
set -euo pipefail
role="$1" key="$2"
PARTS="/srv/lab-k3s/$key"
DATA=/var/lib/rancher/k3s
LABSTATE=/var/lib/gpu-fleet-lab   # what the install made outside K3s's paths, for `remove`
case "$role" in server) unit=k3s ;; agent) unit=k3s-agent ;; *) echo "role: server|agent" >&2; exit 2 ;; esac
say() { printf '%s: %s\n' "$(hostname)" "$*"; }

[ -f "$PARTS/.ok" ] || { echo "$(hostname): $PARTS/.ok missing: the node was booted without the lab's K3s parts bound (run \`python -m lab up\`; \`make setup\` builds them)" >&2; exit 3; }
mkdir -p "$LABSTATE" /etc/rancher/k3s "$DATA/data/$key/bin"
tar -x -p -C / --no-same-owner

# The binaries: K3s unpacks its own into data/<hash>/bin; here they are the cached parts.
for b in kine kube-apiserver kubectl; do ln -sfn "$PARTS/$b" "$DATA/data/$key/bin/$b"; done
ln -sfn "$key" "$DATA/data/current"
ln -sfn "$DATA/data/current/bin/kubectl" /usr/local/bin/kubectl

# The node's fake GPUs (the Slurm layer makes the same ones); remembered when made here.
for i in 0 1 2 3 4 5 6 7; do
  d="/dev/fakegpu$i"
  if [ ! -c "$d" ]; then mknod -m 0666 "$d" c 195 "$i"; echo "$d" >> "$LABSTATE/k3s-made-devices"; fi
done

# hostPath data of the workloads (the pods' volumes: real files on the node)
mkdir -p /srv/k3s-data/gpu-metrics
for i in 1 2 3; do printf 'gpu-metrics sample %s from %s\n' "$i" "$(hostname)" > "/srv/k3s-data/gpu-metrics/sample-$i.prom"; done
if [ "$role" = server ]; then
  mkdir -p /srv/k3s-data/inference-api/models /srv/k3s-data/model-sync
  for i in 1 2 3 4; do head -c $((4096 * i)) /dev/zero | tr '\0' "$i" > "/srv/k3s-data/inference-api/models/shard-$i.bin"; done
  printf 'model: llama-lab\nrevision: 3f2a9c1\n' > /srv/k3s-data/inference-api/models/manifest.yaml
  printf 'last-sync: 2026-01-01T00:00:00Z\n' > /srv/k3s-data/model-sync/state
fi

# started first: kube-apiserver boots while the workload database installs
systemctl daemon-reload
systemctl enable "$unit.service" >/dev/null 2>&1
systemctl restart "$unit.service"

if [ "$role" = server ]; then
  # The workload database: Debian's PostgreSQL 15 and sqlite3 (for online backups of state.db).
  if [ "$(dpkg-query -W -f='${Status}' postgresql-15 2>/dev/null)" != 'install ok installed' ] \
     || ! command -v sqlite3 >/dev/null; then
    dpkg-query -W -f='${Package}\n' | sort > "$LABSTATE/.pkgs-before"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends postgresql sqlite3 >/dev/null
    dpkg-query -W -f='${Package}\n' | sort | comm -13 "$LABSTATE/.pkgs-before" - >> "$LABSTATE/k3s-added-packages"
    rm -f "$LABSTATE/.pkgs-before"
  fi
  if ! grep -q '^15 *main ' <<<"$(pg_lsclusters -h)"; then pg_createcluster 15 main >/dev/null; fi
  systemctl daemon-reload   # the PartOf=k3s.service drop-in now has its unit
  systemctl start postgresql@15-main.service
  # appdb: 58 user tables with deterministic rows (1 .. 200 rows each)
  runuser -u postgres -- psql -q -X -v ON_ERROR_STOP=1 -d postgres >/dev/null <<'SQL'
SELECT 'CREATE DATABASE appdb' WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = 'appdb')\gexec
\c appdb
DO $$
DECLARE
  names text[] := ARRAY['tenants','users','projects','datasets','models','model_versions','jobs',
    'job_steps','runs','metrics','artifacts','checkpoints','queues','quotas','reservations','nodes',
    'gpus','gpu_events','alerts','audit_log','api_keys','sessions','billing','invoices','prices',
    'regions','racks','switches','links','volumes','snapshots','buckets','objects','images',
    'image_tags','deployments','endpoints','routes','certificates','secrets_index','configs',
    'features','experiments','trials','sweeps','notebooks','pipelines','pipeline_runs','schedules',
    'webhooks','notifications','comments','labels','teams','memberships','roles','permissions',
    'schema_info'];
  i int;
BEGIN
  FOR i IN 1 .. array_length(names, 1) LOOP
    EXECUTE format('CREATE TABLE IF NOT EXISTS %I (id integer PRIMARY KEY, name text NOT NULL, '
                   'amount numeric(12,2) NOT NULL, created date NOT NULL)', names[i]);
    EXECUTE format('INSERT INTO %I SELECT g, %L || g, (g * %s %% 1000) / 10.0, date ''2024-01-01'' + g '
                   'FROM generate_series(1, %s) g ON CONFLICT (id) DO NOTHING',
                   names[i], names[i] || '-', i, (i * 37) % 200 + 1);
  END LOOP;
END
$$;
SQL
fi
say "$unit.service $(systemctl is-active "$unit.service")"
