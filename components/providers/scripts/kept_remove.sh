#!/bin/sh
# Forget a kept record, last in a delete: the file, then its kind's folder and the kept folder
# while they are empty (a rollback leaves no trace of them). $1: the record's path.
rm -f -- "$1"
kind=$(dirname -- "$1")
rmdir -- "$kind" 2>/dev/null && rmdir -- "$(dirname -- "$kind")" 2>/dev/null
exit 0
