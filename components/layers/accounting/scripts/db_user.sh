#!/bin/sh
# Creates the accounting database and its user (localhost and 127.0.0.1), setting the password.
# $1 database, $2 user; the password arrives on stdin (never in argv or a log). It reaches
# MariaDB as a hex literal and leaves it only as its mysql_native_password hash, so no quoting
# of the password is ever made by hand.

set -eu
IFS= read -r pw
hex=$(printf '%s' "$pw" | od -An -v -tx1 | tr -d ' \n')
hash=$(mariadb -u root -N -B <<SQL
SELECT CONCAT('*', UPPER(SHA1(UNHEX(SHA1(X'$hex')))));
SQL
)
case "$hash" in
  \*[0-9A-F]*) [ "${#hash}" -eq 41 ] || { echo "unexpected password hash from MariaDB" >&2; exit 1; } ;;
  *) echo "unexpected password hash from MariaDB" >&2; exit 1 ;;
esac
mariadb -u root <<SQL
CREATE DATABASE IF NOT EXISTS \`$1\`;
CREATE USER IF NOT EXISTS '$2'@'localhost' IDENTIFIED BY PASSWORD '$hash';
ALTER USER '$2'@'localhost' IDENTIFIED BY PASSWORD '$hash';
GRANT ALL PRIVILEGES ON \`$1\`.* TO '$2'@'localhost';
CREATE USER IF NOT EXISTS '$2'@'127.0.0.1' IDENTIFIED BY PASSWORD '$hash';
ALTER USER '$2'@'127.0.0.1' IDENTIFIED BY PASSWORD '$hash';
GRANT ALL PRIVILEGES ON \`$1\`.* TO '$2'@'127.0.0.1';
SQL
