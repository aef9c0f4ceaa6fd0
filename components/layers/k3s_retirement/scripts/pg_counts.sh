#!/bin/bash
# User tables of one PostgreSQL database and each one's exact row count, as JSON
# {"schema.table": rows}. Read-only. $1 the database.
set -euo pipefail
runuser -u postgres -- psql -X -At -v ON_ERROR_STOP=1 -d "$1" -c "
SELECT coalesce(json_object_agg(t, n ORDER BY t), '{}'::json) FROM (
  SELECT table_schema || '.' || table_name AS t,
         (xpath('/row/c/text()', query_to_xml(format('SELECT count(*) AS c FROM %I.%I',
          table_schema, table_name), false, true, '')))[1]::text::bigint AS n
  FROM information_schema.tables
  WHERE table_type = 'BASE TABLE' AND table_schema NOT IN ('pg_catalog', 'information_schema')) s"
