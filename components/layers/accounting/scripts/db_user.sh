#!/bin/sh
# Creates the accounting database and its user (localhost and 127.0.0.1), setting the password.
# $1 database, $2 user; the password arrives on stdin (never in argv or a log).

set -eu
IFS= read -r pw
esc=$(printf '%s' "$pw" | sed "s/'/''/g")
mariadb -u root <<SQL
CREATE DATABASE IF NOT EXISTS \`$1\`;
CREATE USER IF NOT EXISTS '$2'@'localhost' IDENTIFIED BY '$esc';
ALTER USER '$2'@'localhost' IDENTIFIED BY '$esc';
GRANT ALL PRIVILEGES ON \`$1\`.* TO '$2'@'localhost';
CREATE USER IF NOT EXISTS '$2'@'127.0.0.1' IDENTIFIED BY '$esc';
ALTER USER '$2'@'127.0.0.1' IDENTIFIED BY '$esc';
GRANT ALL PRIVILEGES ON \`$1\`.* TO '$2'@'127.0.0.1';
SQL
