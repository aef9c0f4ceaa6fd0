#!/bin/sh
# One step of a node's acceptance job, run by srun on the node; prints key=value lines.
#   inventory PREFIX COUNT PYNVML_DIR MARKER  the whole allocation: what NVML sees, CUDA_VISIBLE_DEVICES,
#                                            the job's cgroup (cpuset and memory limit) read from the kernel
#   gpu PREFIX COUNT                         a single-GPU step: which of the node's GPU devices it may open
#   oom MIB                                  touches MIB of memory, past its --mem: the kernel must stop it
#   fs JOBROOT RO                            writes a probe under the job root (removed on exit), tries to
#                                            write into the read-only store, then fails on purpose (exit 3)
#   residue JOBROOT                          the failed step's directory must be gone

mode=$1; shift
J=$SLURM_JOB_ID

# the job's own cgroup directory from a controller's path in /proc/self/cgroup
job_dir() { p="$1/"; echo "${p%%/job_"$J"/*}/job_$J"; }

devices() {  # $1 prefix, $2 count: "0:ENXIO,1:EPERM,..." (the device cgroup answers EPERM)
  python3 -c 'import errno, os, sys
out = []
for i in range(int(sys.argv[2])):
    try:
        os.close(os.open(sys.argv[1] + str(i), os.O_RDONLY | os.O_NONBLOCK))
        out.append(f"{i}:open")
    except OSError as e:
        out.append(f"{i}:{errno.errorcode.get(e.errno, e.errno)}")
print("devices=" + ",".join(out))' "$1" "$2"
}

case "$mode" in
inventory)
  echo "node=$(hostname)"
  echo "cvd=${CUDA_VISIBLE_DEVICES-unset}"
  echo "cpus_on_node=$SLURM_CPUS_ON_NODE"
  cs=$(awk -F: '$2 ~ /(^|,)cpuset(,|$)/ {print $3}' /proc/self/cgroup)
  mem=$(awk -F: '$2 ~ /(^|,)memory(,|$)/ {print $3}' /proc/self/cgroup)
  if [ -n "$cs" ] && [ -n "$mem" ]; then  # cgroup v1
    echo "cgroup=$mem"
    echo "cpuset=$(cat "/sys/fs/cgroup/cpuset$(job_dir "$cs")/cpuset.effective_cpus" 2>&1)"
    echo "mem_limit=$(cat "/sys/fs/cgroup/memory$(job_dir "$mem")/memory.limit_in_bytes" 2>&1)"
  else
    v2=$(sed -n 's/^0:://p' /proc/self/cgroup)
    echo "cgroup=$v2"
    echo "cpuset=$(cat "/sys/fs/cgroup$(job_dir "$v2")/cpuset.cpus.effective" 2>&1)"
    echo "mem_limit=$(cat "/sys/fs/cgroup$(job_dir "$v2")/memory.max" 2>&1)"
  fi
  if [ -n "$3" ]; then
    PYTHONPATH=$3 python3 -c 'import pynvml as n
def s(v):
    return v.decode() if isinstance(v, bytes) else v
n.nvmlInit()
for i in range(n.nvmlDeviceGetCount()):
    h = n.nvmlDeviceGetHandleByIndex(i)
    print(f"nvml={i} {s(n.nvmlDeviceGetUUID(h))} {s(n.nvmlDeviceGetName(h))}")
print("nvml_done=1")' 2>&1 | sed '/^nvml/!s/^/nvml_error=/'
  fi
  if [ -n "$4" ]; then if [ -r "$4" ]; then echo "marker=ok"; else echo "marker=unreadable"; fi; fi
  devices "$1" "$2" ;;
gpu)
  # hold the GPU until every single-GPU step of the node holds one (or 60 s): each of the
  # node's GPUs must then be in exactly one step
  # (by the clock, not by polls: each poll forks find and wc on top of its 0.1 s sleep)
  b=/tmp/gpu-fleet-barrier-$J; mkdir -p "$b" && touch "$b/$SLURM_STEP_ID"
  end=$(( $(date +%s) + 60 ))
  while [ "$(find "$b" -type f | wc -l)" -lt "$2" ] && [ "$(date +%s)" -lt "$end" ]; do sleep 0.1; done
  echo "step=$SLURM_STEP_ID cvd=${CUDA_VISIBLE_DEVICES-unset} held=$(find "$b" -type f | wc -l) $(devices "$1" "$2")" ;;
oom)
  echo "step=$SLURM_STEP_ID"
  python3 -c 'import sys; x = bytearray(int(sys.argv[1]) << 20); print("survived", len(x))' "$1" ;;
fs)
  d="$1/gpu-fleet-acceptance-$J"
  trap 'rm -rf "$d"' EXIT
  if mkdir -p "$d" && echo verified > "$d/probe" && [ "$(cat "$d/probe")" = verified ]; then echo "jobroot=ok"
  else echo "jobroot=failed"; fi
  if [ -n "$2" ]; then
    python3 -c 'import errno, os, sys
p = os.path.join(sys.argv[1], ".gpu-fleet-acceptance-" + sys.argv[2])
try:
    with open(p, "w") as f:
        f.write("probe")
    os.unlink(p)
    print("rowrite=written")
except OSError as e:
    print("rowrite=" + errno.errorcode.get(e.errno, str(e.errno)))' "$2" "$J"
  fi
  exit 3 ;;
residue)
  rm -rf "/tmp/gpu-fleet-barrier-$J"
  if [ -e "$1/gpu-fleet-acceptance-$J" ]; then echo "residue=left"; else echo "residue=none"; fi ;;
*)
  echo "unknown step $mode" >&2; exit 2 ;;
esac
