#!/usr/bin/env bash
# A single-node Slurm cluster on this machine, for trying the suite's cluster paths (and for the
# `pytest -m slurm` tests) without a real cluster.
#
#   scripts/local-slurm.sh start  [STATE_DIR]   install (if missing), configure and start; prints the
#                                               `export SLURM_CONF=...` line clients need
#   scripts/local-slurm.sh status [STATE_DIR]   the daemons' pids and `sinfo`
#   scripts/local-slurm.sh stop   [STATE_DIR]   cancel every job, stop the daemons this script started
#
#   eval "$(scripts/local-slurm.sh start)"      # then sbatch / srun / squeue / submitit work as usual
#
# STATE_DIR defaults to $LOCAL_SLURM_DIR, else /tmp/lit-resformer-slurm. Everything lives in it:
# slurm.conf, the munge key and socket, Slurm's state, spool and logs, and `pids` (the daemons started
# here, which `stop` kills by pid and nothing else). Ports: $LOCAL_SLURM_PORT (slurmctld, default
# 6817) and the next one (slurmd). Needs root (the daemons run as root, munged as the munge user)
# and, if Slurm is not installed yet, apt-get: it installs Debian's `slurm-wlm munge`.
#
# The cluster: one node (this machine, named `hostname -s`, with its CPUs and memory), one default
# partition `local`, no accounting (so `sacct` does not work; submitit warns and carries on), no
# cgroups (proctrack/linuxproc, task/none).
set -euo pipefail

usage() { echo "usage: $0 start|stop|status [STATE_DIR]" >&2; exit 2; }
say() { echo "local-slurm: $*" >&2; }
die() { say "error: $*"; exit 1; }

[[ $# -ge 1 && $# -le 2 ]] || usage
action=$1
state=${2:-${LOCAL_SLURM_DIR:-/tmp/lit-resformer-slurm}}
[[ $state == /* ]] || state=$PWD/$state
conf=$state/slurm.conf
pids=$state/pids
port=${LOCAL_SLURM_PORT:-6817}
export SLURM_CONF=$conf
MARKER=.local-slurm-state  # marks a directory this script may wipe on the next start

alive() { [[ -n ${1:-} ]] && kill -0 "$1" 2>/dev/null; }

record() {  # record NAME PIDFILE: wait until the daemon has written its pid file, then note the pid
    local pid=""
    for _ in $(seq 300); do
        pid=$(cat "$2" 2>/dev/null || true)
        alive "$pid" && { echo "$1 $pid" >>"$pids"; return; }
        sleep 0.1
    done
    die "$1 did not start (no live pid in $2); see the logs in $state"
}

recorded_pid() {  # recorded_pid NAME -> the pid `start` recorded for that daemon, if that daemon still runs
    local pid
    pid=$([[ -f $pids ]] && awk -v name="$1" '$1 == name { print $2 }' "$pids" || true)
    # A pid is only ours while it still names the same program (after a crash the number may be reused).
    [[ -n $pid && $(cat "/proc/$pid/comm" 2>/dev/null) == "$1" ]] && echo "$pid" || true
}

install_slurm() {
    local missing=()
    for tool in slurmctld slurmd sinfo sbatch srun munged mungekey; do
        command -v "$tool" >/dev/null || missing+=("$tool")
    done
    [[ ${#missing[@]} -eq 0 ]] && return
    command -v apt-get >/dev/null || die "Slurm is not installed (${missing[*]} missing) and there is no apt-get to install it"
    say "installing slurm-wlm and munge with apt-get (missing: ${missing[*]})"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq --no-install-recommends slurm-wlm munge >&2
}

start_munged() {
    # A private munged (own key and socket in the state directory): no shared /etc/munge, and any
    # munged already running on the machine is left alone. munged insists that its key and socket
    # directory belong to it, that nobody else may write there and that everyone may reach the socket.
    local dir=$state/munge
    install -d -o munge -g munge -m 755 "$dir"
    mungekey --create --force --bits 8192 --keyfile "$dir/munge.key"  # 8192 bits = 1024 bytes
    chown munge:munge "$dir/munge.key"
    chmod 400 "$dir/munge.key"
    runuser -u munge -- munged --socket "$dir/munge.socket.2" --key-file "$dir/munge.key" \
        --pid-file "$dir/munged.pid" --log-file "$dir/munged.log" --seed-file "$dir/munged.seed"
    record munged "$dir/munged.pid"
}

write_conf() {
    # This machine as slurmd sees it: "NodeName=<host> CPUs=.. Boards=.. ... RealMemory=.."
    local node host
    node=$(slurmd -C | head -n 1)
    host=$(hostname -s)
    [[ $node == "NodeName=$host "* ]] || die "unexpected \`slurmd -C\` output: $node"
    mkdir -p "$state"/{ctld,spool,log,run}
    cat >"$conf" <<EOF
# Written by scripts/local-slurm.sh: a single-node cluster whose whole state is in $state
ClusterName=local
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
AuthType=auth/munge
# cred_expire also delays a requeued job's restart (cred_expire + 1 s; default 120 s).
AuthInfo=socket=$state/munge/munge.socket.2,cred_expire=10
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
# Look for startable jobs every 2 s instead of every 60 s (a requeued job becomes startable by time only).
SchedulerParameters=sched_interval=2
# Requeued and cancelled jobs get SIGTERM, then SIGKILL this many seconds later (default 30).
KillWait=5
StateSaveLocation=$state/ctld
SlurmdSpoolDir=$state/spool
SlurmctldPidFile=$state/run/slurmctld.pid
SlurmdPidFile=$state/run/slurmd.pid
SlurmctldLogFile=$state/log/slurmctld.log
SlurmdLogFile=$state/log/slurmd.log
$node NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=local Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
}

wait_for_idle() {
    local deadline=$((SECONDS + 60)) state_now=""
    while ((SECONDS < deadline)); do
        state_now=$(sinfo -h -N -o %T 2>/dev/null | head -n 1 || true)
        [[ $state_now == idle ]] && return
        sleep 0.5
    done
    say "the node did not become idle within 60 s (sinfo says: '${state_now:-nothing}'); last log lines:"
    tail -n 15 "$state/log/slurmctld.log" "$state/log/slurmd.log" >&2 || true
    return 1
}

start() {
    [[ $(id -u) -eq 0 ]] || die "must run as root (slurmd and slurmctld run as root, munged as munge)"
    for name in munged slurmctld slurmd; do
        alive "$(recorded_pid $name)" && die "already running from $state (stop it first: $0 stop $state)"
    done
    install_slurm
    getent passwd munge >/dev/null || die "no 'munge' user; is the munge package installed completely?"
    if [[ -d $state && -n $(ls -A "$state") && ! -f $state/$MARKER ]]; then
        die "$state is not empty and is not a state directory of this script; choose another one"
    fi
    rm -rf "$state"
    install -d -m 755 "$state"
    touch "$state/$MARKER"
    : >"$pids"
    start_munged
    write_conf
    # Each daemon forks into the background and writes its pid file; `record` notes the pid.
    slurmctld -f "$conf"
    record slurmctld "$state/run/slurmctld.pid"
    slurmd -f "$conf"
    record slurmd "$state/run/slurmd.pid"
    if ! wait_for_idle; then
        stop
        die "Slurm did not start"
    fi
    say "single-node Slurm up: $(sinfo -h -o '%P %D node(s) %C CPUs (A/I/O/T) %m MB' | head -n 1)"
    echo "export SLURM_CONF=$conf" | tee "$state/env"
}

stop_daemons() {  # SIGTERM the recorded daemons together; SIGKILL any still there after 10 s
    local name pid waiting=()
    for name in slurmd slurmctld munged; do
        pid=$(recorded_pid $name)
        alive "$pid" && kill -TERM "$pid" && waiting+=("$name:$pid")
    done
    for _ in $(seq 100); do
        local still=()
        for entry in "${waiting[@]}"; do alive "${entry#*:}" && still+=("$entry"); done
        waiting=("${still[@]}")
        [[ ${#waiting[@]} -eq 0 ]] && return
        sleep 0.1
    done
    for entry in "${waiting[@]}"; do
        say "${entry%%:*} (${entry#*:}) ignored SIGTERM; killing it"
        kill -KILL "${entry#*:}" 2>/dev/null || true
    done
    sleep 0.5
}

stop() {
    [[ -f $pids ]] || { say "nothing recorded in $pids; nothing to stop"; return 0; }
    if alive "$(recorded_pid slurmctld)" && alive "$(recorded_pid slurmd)"; then
        # Jobs run in slurmstepd processes that outlive slurmd: end them through Slurm first.
        local jobs leftover
        jobs=$(squeue -h -o %A 2>/dev/null || true)
        if [[ -n $jobs ]]; then
            say "cancelling jobs: $(echo $jobs)"
            scancel $jobs || true
            for _ in $(seq 120); do
                [[ -z $(squeue -h -o %A 2>/dev/null) && -z $(scontrol listpids 2>/dev/null | tail -n +2) ]] && break
                sleep 0.5
            done
        fi
        # Processes of jobs that did not end (listed by slurmd itself): kill them by pid.
        leftover=$(scontrol listpids 2>/dev/null | awk 'NR > 1 && $1 ~ /^[0-9]+$/ { print $1 }' || true)
        [[ -n $leftover ]] && { say "killing leftover job processes: $(echo $leftover)"; kill -KILL $leftover 2>/dev/null || true; }
    fi
    stop_daemons
    for name in slurmd slurmctld munged; do
        alive "$(recorded_pid $name)" && die "$name ($(recorded_pid $name)) is still running"
    done
    rm -f "$pids"
    say "stopped"
}

status() {
    local running=0
    for name in munged slurmctld slurmd; do
        local pid
        pid=$(recorded_pid $name)
        if alive "$pid"; then echo "$name: running (pid $pid)"; running=$((running + 1))
        else echo "$name: not running"; fi
    done
    ((running == 3)) && sinfo
    ((running == 3))
}

case $action in
    start) start ;;
    stop) stop ;;
    status) status ;;
    *) usage ;;
esac
