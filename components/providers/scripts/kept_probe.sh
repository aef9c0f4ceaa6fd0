#!/bin/sh
# A create's probe with, after it, what the primitive kept on the host before its first change.
# $1: the kept record's path; the rest: the probe's own argv. Prints the probe's output, a
# newline, the frame line `== gf-kept ==` and the record (nothing when there is none); exits
# with the probe's own status.
f=$1
shift
"$@"
rc=$?
printf '\n== gf-kept ==\n'
cat -- "$f" 2>/dev/null
exit "$rc"
