#!/usr/bin/env bash
# The Slurm recipe of docs/guide-pipelines.md on a real one-node Slurm cluster. Starts munged, slurmctld
# and slurmd on this machine (own key, sockets, ports and state in the test's temporary directory),
# submits tests/slurm/array.sbatch as a 4-task array (--shard auto) and tests/slurm/merge.sbatch as
# a job that depends on it (afterok), then checks the merged artifact against an unsharded build.
# Without root or without the Debian packages slurm-wlm and munge it prints why and exits 77.
export PATH=$PATH:/usr/sbin:/sbin
. "$(dirname "$0")/lib.sh"
SOURCE=${KVTOOL_SOURCE:-$(dirname "$0")/../..}
SCRIPTS=$SOURCE/tests/slurm

# docs/guide-pipelines.md shows exactly the scripts this test submits: their command lines,
# verbatim (checked even where Slurm cannot run).
GUIDE=$SOURCE/docs/guide-pipelines.md
guide_shows() {
  local f line
  for f in array merge; do
    grep -qF "tests/slurm/$f.sbatch" "$GUIDE" || fail "$GUIDE does not name tests/slurm/$f.sbatch"
    while IFS= read -r line; do
      grep -qxF -- "$line" "$GUIDE" || fail "$GUIDE does not show $f.sbatch's line: $line"
    done < <(grep -v '^#' "$SCRIPTS/$f.sbatch")
  done
  grep -qF -- "--dependency=afterok:" "$GUIDE" || fail "$GUIDE has no afterok merge"
  [ "$FAILS" = 0 ] || finish
}
guide_shows

[ "$(id -u)" = 0 ] || skip "needs root (SlurmUser=root; the jobs run as root)"
for c in munged slurmctld slurmd sbatch squeue scontrol scancel; do
  command -v "$c" >/dev/null || skip "$c not found (Debian packages: slurm-wlm munge)"
done
# Seconds to wait for the whole array and the merge; each job takes well under a second.
DEADLINE=${KVTOOL_SLURM_TIMEOUT:-120}
DAEMONS=()
export SLURM_CONF=$WORK/etc/slurm.conf PATH=$BIN:$PATH

# alive PID: the process runs (a daemon that exited stays a zombie until we wait for it).
alive() {
  local st
  st=$(ps -o stat= -p "$1" 2>/dev/null)
  [ -n "$st" ] && [ "${st#Z}" = "$st" ]
}

# stop_all: cancels our jobs (their slurmstepd would outlive slurmd) and stops the daemons this test
# started, by PID: TERM, then KILL after 10 s.
stop_all() {
  local i p q
  if [ ${#DAEMONS[@]} != 0 ] && timeout 10 scancel --full --quiet --user=root 2>/dev/null; then
    for i in $(seq 50); do
      q=$(timeout 5 squeue -h -o %i 2>/dev/null) || break
      [ -z "$q" ] && break
      sleep 0.2
    done
  fi
  for p in "${DAEMONS[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${DAEMONS[@]}"; do
    for i in $(seq 100); do
      alive "$p" || break
      sleep 0.1
    done
    alive "$p" && kill -KILL "$p" 2>/dev/null
    wait "$p" 2>/dev/null
  done
  DAEMONS=()
}
cleanup() {
  stop_all
  cd / && rm -rf "$WORK"
}
trap cleanup EXIT

# show_logs: the daemons' logs, when a check failed (CI has nothing else to go by).
show_logs() {
  local f
  for f in "$WORK"/log/* "$WORK"/slurm-*.out; do
    [ -e "$f" ] && { echo "--- $f"; tail -n 20 "$f"; } >&2
  done
}

free_port() {
  /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# write_config: munge key and a minimal slurm.conf for one node with this machine's real CPUs and
# memory (slurmd -C), no cgroups (proctrack/linuxproc, task/none) and no accounting database.
write_config() {
  mkdir -p munge etc state spool log
  dd if=/dev/urandom of=munge/munge.key bs=1024 count=1 status=none && chmod 0400 munge/munge.key
  local node hw
  node=$(hostname -s)
  hw=$(slurmd -C | head -n 1 | tr ' ' '\n' | grep -E '^(CPUs|Boards|SocketsPerBoard|CoresPerSocket|ThreadsPerCore|RealMemory)=' | tr '\n' ' ')
  [ -n "$hw" ] || { fail "slurmd -C printed no hardware"; return 1; }
  : >etc/plugstack.conf
  cat >etc/slurm.conf <<EOF
ClusterName=kvtooltest
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$WORK/munge/munge.socket
StateSaveLocation=$WORK/state
SlurmdSpoolDir=$WORK/spool
SlurmctldPidFile=$WORK/slurmctld.pid
SlurmdPidFile=$WORK/slurmd.pid
SlurmctldLogFile=$WORK/log/slurmctld.log
SlurmdLogFile=$WORK/log/slurmd.log
PlugStackConfig=$WORK/etc/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
DependencyParameters=kill_invalid_depend
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
NodeName=$node NodeAddr=127.0.0.1 $hw State=UNKNOWN
PartitionName=test Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
}

# start_daemons: munged, slurmctld and slurmd in the foreground (so $! is the daemon; their output
# goes to log/), then waits up to 30 s for the node to be idle.
start_daemons() {
  munged -F --force --key-file="$WORK/munge/munge.key" --socket="$WORK/munge/munge.socket" \
    --pid-file="$WORK/munge/munged.pid" --log-file="$WORK/log/munged.log" \
    --seed-file="$WORK/munge/munged.seed" >log/munged.out 2>&1 &
  DAEMONS+=($!)
  local i
  for i in $(seq 50); do
    [ -S munge/munge.socket ] && break
    sleep 0.1
  done
  slurmctld -D -i -f "$SLURM_CONF" >log/slurmctld.out 2>&1 &
  DAEMONS+=($!)
  slurmd -D -N "$(hostname -s)" -f "$SLURM_CONF" >log/slurmd.out 2>&1 &
  DAEMONS+=($!)
  for i in $(seq 150); do
    scontrol -o show node 2>/dev/null | grep -q 'State=IDLE ' && return 0
    sleep 0.2
  done
  fail "the node did not come up within 30 s"
  return 1
}

"$KVTOOL" synth --layers 2 --kv-heads 2 --q-heads 4 --head-dim 16 --tokens 256 --seed 3 -o doc.h5 >/dev/null
kvtool-pq build doc.h5 -o unsharded.kvi --quiet || fail "unsharded build"
if ! write_config || ! start_daemons; then
  show_logs
  finish
fi

# nothing_left: no process with our directory in its command line or as working directory.
nothing_left() {
  local left d
  cd /
  left=$(pgrep -f -- "$WORK")
  for d in /proc/[0-9]*; do
    case "$(readlink "$d/cwd" 2>/dev/null)" in "$WORK" | "$WORK"/*) left="$left ${d#/proc/}" ;; esac
  done
  [ -z "${left// /}" ] || fail "processes left running: $left"
}

# The documented recipe: the array, then the merge once every task succeeded.
start=$(date +%s)
array=$(sbatch --parsable --array=0-3 --cpus-per-task=1 --export=ALL,DUMP="$WORK/doc.h5" "$SCRIPTS/array.sbatch") ||
  fail "sbatch of the array"
merge=$(sbatch --parsable --dependency=afterok:"$array" --export=ALL,DUMP="$WORK/doc.h5" "$SCRIPTS/merge.sbatch") ||
  fail "sbatch of the merge"
while [ -n "$(squeue -h -o %i)" ] && [ $(($(date +%s) - start)) -lt "$DEADLINE" ]; do sleep 0.5; done
if [ -n "$(squeue -h -o %i)" ]; then
  fail "jobs still queued or running after $DEADLINE s: $(squeue -h -o '%i %T %r' | tr '\n' ';')"
  show_logs
  stop_all
  nothing_left
  finish
fi
echo "array $array and merge $merge finished in $(($(date +%s) - start)) s"

# Every array task and the merge completed (exit 0); one output file per task.
states=$(scontrol -o show job "$array" | grep -o 'JobState=[A-Z_]*' | sort | uniq -c | tr -s ' ')
[ "$states" = " 4 JobState=COMPLETED" ] || fail "array tasks: $states"
scontrol -o show job "$merge" | grep -q 'JobState=COMPLETED ' || fail "merge job: $(scontrol -o show job "$merge" | grep -o 'JobState=[^ ]* Reason=[^ ]*')"
for i in 0 1 2 3; do [ -e "slurm-${array}_$i.out" ] || fail "no output of array task $i"; done

# The merged artifact equals the unsharded build byte for byte, and verifies against its dump.
cmp doc.pq.kvi unsharded.kvi || fail "merged artifact differs from the unsharded build"
expect_exit 0 "$KVTOOL" verify doc.pq.kvi --source doc.h5
[ "$FAILS" = 0 ] || show_logs
stop_all
nothing_left
finish
