#!/bin/sh
# Runs the package command in its arguments ("$@", e.g. apt-get install ...) with a
# policy-rc.d that lets the packages' maintainer scripts stop services, and restart or reload
# those already running (an upgrade keeps today's daemons on the new binaries), but start none
# that is not running: the layer's SystemdUnits start them once their key and config are in
# place. Why: a postinst starts its daemon before any config exists; Slurm 24.11's slurmd then
# waits out systemd's 90 s start timeout (measured on the lab: `apt-get install` 93 s a node,
# 2.9 s for the controller's set beside it).
# The policy is removed when the command ends (exit, HUP, INT, TERM); a policy-rc.d that is not
# gpu-fleet's is left as it is, and the command runs under it. Exits with the command's status.
set -u
p=/usr/sbin/policy-rc.d
mark="# gpu-fleet: a package install in progress (packages_no_start.sh); removed when it ends"
if [ -e "$p" ] && ! grep -qxF "$mark" "$p"; then
  exec "$@"
fi
trap 'rm -f "$p" "$p.tmp.$$"' EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM
cat > "$p.tmp.$$" <<POLICY || exit 125
#!/bin/sh
$mark
# \$1: the service (after invoke-rc.d's options), \$2: the action(s)
while [ "\${1#-}" != "\$1" ]; do shift; done
case "\${2:-}" in
  *start*|*reload*) systemctl -q is-active "\${1%.service}" 2>/dev/null && exit 0; exit 101 ;;
esac
exit 0
POLICY
chmod 0755 "$p.tmp.$$" && mv -f "$p.tmp.$$" "$p" || exit 125
rc=0
"$@" || rc=$?
exit "$rc"
