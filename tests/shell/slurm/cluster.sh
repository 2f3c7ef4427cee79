#!/usr/bin/env bash
# A real single-node SLURM cluster shaped like fellows (SPEC.md, "fellows as the
# cluster really is"): accounting, the QoS ladder, batch partitions `general` and
# `overflow`, the user's default account (no --account needed), memory checked
# against the node, and QoS preemption (high-eur preempts normal-eur and low-eur,
# PreemptMode=REQUEUE with a grace), for the SLURM lane's integration tests and CI.
#
#   bash tests/shell/slurm/cluster.sh start    # install if missing, configure, start, wait until ready
#   bash tests/shell/slurm/cluster.sh stop     # stop every daemon this script started
#   bash tests/shell/slurm/cluster.sh status   # exit 0 when every daemon is alive
#   bash tests/shell/slurm/cluster.sh purge    # stop, then delete the state (next start is from nothing)
#
# Run as root.  Idempotent: `start` on a running cluster only re-checks it (and
# puts the QoS tiers back to the SPEC values if a test left one changed).
# Facts this relies on: ../../../../shared/notes/slurm-test-cluster.md (no
# systemd: every daemon is started by hand and tracked by its pid file).
#
# State lives under $EPS_SLURM_STATE (default /var/lib/eps-test-slurm): the
# MariaDB datadir, slurmctld's state, slurmd's spool, logs, pid files.  The
# SLURM configs are written to /etc/slurm (where every SLURM command looks).
set -euo pipefail

STATE=${EPS_SLURM_STATE:-/var/lib/eps-test-slurm}
CLUSTER=fellows
ACCOUNT=fellows
PARTITION=general
OVERFLOW=overflow
# The SIGTERM grace of a preempted job (fellows: about 3 min; short here, for the tests).
GRACE=${EPS_SLURM_GRACE:-15}
NODE=$(hostname -s)
USER_NAME=${EPS_SLURM_USER:-root}
READY_TIMEOUT=${EPS_SLURM_READY_TIMEOUT:-90}

# The QoS ladder, as SPEC.md ("Facts the tables start from") states it:
# name|priority|MaxWall|MaxTRESPerUser ("" = no cap).  The field order is the
# order `sacctmgr -P -n show qos format=Name,Priority,MaxWall,MaxTRESPU` prints.
# Then Preempt|GraceTime (seconds) ("" = none).
QOS_SPEC=(
  "high-eur|100000|7-00:00:00|gres/gpu=16|low-eur,normal-eur|0"
  "normal-eur|50000|7-00:00:00|gres/gpu=16||$GRACE"
  "low-eur|10000|14-00:00:00|||$GRACE"
  "dev-eur|200000|1-00:00:00|gres/gpu=8||0"
)
QOS_NAMES="dev-eur,high-eur,low-eur,normal-eur"

PACKAGES=(munge mariadb-server slurmdbd slurmctld slurmd slurm-client)
LOG=$STATE/log
PIDS=$STATE/pid
MYSQL_DATA=$STATE/mysql
MYSQL_SOCK=/run/mysqld/mysqld.sock
MYSQL_PID=/run/mysqld/mariadbd.pid

say() { printf 'cluster.sh: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

need_root() { [[ $(id -u) -eq 0 ]] || die "must run as root"; }

alive() { # alive PIDFILE: the pid in it names a live process
  local pid
  [[ -s $1 ]] || return 1
  pid=$(<"$1")
  [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null
}

wait_for() { # wait_for SECONDS DESCRIPTION COMMAND...: poll every 0.1 s
  local limit=$1 what=$2; shift 2
  local deadline=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || die "timed out after ${limit}s waiting for $what (logs: $LOG)"
    sleep 0.1
  done
}

install_packages() {
  local missing=() p
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  ((${#missing[@]} == 0)) && return 0
  command -v apt-get >/dev/null || die "apt-get not found: cannot install ${missing[*]}"
  say "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >"$LOG/apt.log" 2>&1 || die "apt-get update failed (see $LOG/apt.log)"
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >>"$LOG/apt.log" 2>&1 \
    || die "apt-get install failed (see $LOG/apt.log)"
}

write_if_changed() { # write_if_changed PATH < content; returns 0 when it changed
  local tmp
  tmp=$(mktemp)
  cat >"$tmp"
  if [[ -f $1 ]] && cmp -s "$tmp" "$1"; then
    rm -f "$tmp"
    return 1
  fi
  mv "$tmp" "$1"
  chmod 644 "$1"
  return 0
}

CONF_CHANGED=0
write_configs() {
  mkdir -p /etc/slurm /run/slurm/fake-gpu
  local i
  for i in 0 1 2 3 4 5 6 7; do ln -sfn /dev/null "/run/slurm/fake-gpu/gpu$i"; done

  if write_if_changed /etc/slurm/slurm.conf <<EOF
# Written by eps tests/shell/slurm/cluster.sh: a single-node test cluster.
ClusterName=$CLUSTER
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=slurm
AuthType=auth/munge
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/d
SlurmctldPidFile=$PIDS/slurmctld.pid
SlurmdPidFile=$PIDS/slurmd.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
# no cgroups on this machine kind
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
# QoS needs accounting
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStorageEnforce=associations,limits,qos,safe
AccountingStorageTRES=gres/gpu
# priority by QoS
PriorityType=priority/multifactor
PriorityWeightQOS=100000
# fellows: high-eur preempts normal-eur and low-eur; a preempted job gets its QoS's
# GraceTime of SIGTERM, then is requeued (or cancelled when it said --no-requeue)
PreemptType=preempt/qos
PreemptMode=REQUEUE
JobRequeue=1
# pending reasons appear within a second
SchedulerParameters=sched_interval=1,bf_interval=1
ReturnToService=2
MinJobAge=60
# more CPUs than the machine has, so several test jobs run at once
SlurmdParameters=config_overrides
# an H200 node's size (eps asks for 16 CPUs and 128 GB per GPU there); memory is checked, not consumed
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=128 Sockets=1 CoresPerSocket=128 ThreadsPerCore=1 RealMemory=2000000 Gres=gpu:8 State=UNKNOWN
PartitionName=$PARTITION Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
PartitionName=$OVERFLOW Nodes=$NODE MaxTime=INFINITE State=UP
EOF
  then CONF_CHANGED=1; fi

  if write_if_changed /etc/slurm/gres.conf <<EOF
# fake GPUs: SLURM 22.05 accepts symlinks to /dev/null as gres files
NodeName=$NODE Name=gpu File=/run/slurm/fake-gpu/gpu[0-7]
EOF
  then CONF_CHANGED=1; fi

  write_if_changed /etc/slurm/slurmdbd.conf <<EOF || true
# Written by eps tests/shell/slurm/cluster.sh
AuthType=auth/munge
DbdHost=$NODE
DbdAddr=127.0.0.1
SlurmUser=slurm
PidFile=$PIDS/slurmdbd.pid
LogFile=$LOG/slurmdbd.log
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=eps-test
StorageLoc=slurm_acct_db
EOF
  chown slurm:slurm /etc/slurm/slurmdbd.conf
  chmod 600 /etc/slurm/slurmdbd.conf
}

prepare_dirs() {
  mkdir -p "$STATE" "$LOG" "$PIDS" "$STATE/ctld" "$STATE/d"
  chown slurm:slurm "$STATE/ctld" "$STATE/d" "$PIDS" "$LOG"
  chmod 755 "$STATE" "$PIDS" "$LOG"
  touch "$LOG/slurmctld.log" "$LOG/slurmdbd.log" "$LOG/slurmd.log" "$LOG/mariadbd.log"
  chown slurm:slurm "$LOG/slurmctld.log" "$LOG/slurmdbd.log"
  chown mysql:mysql "$LOG/mariadbd.log"
}

start_munge() {
  install -d -o munge -g munge -m 0755 /run/munge
  if [[ ! -s /etc/munge/munge.key ]]; then
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
    chown munge:munge /etc/munge/munge.key
    chmod 400 /etc/munge/munge.key
  fi
  if ! alive /run/munge/munged.pid; then
    runuser -u munge -- /usr/sbin/munged --force
  fi
  wait_for 20 munged sh -c 'munge -n | unmunge'
}

mysql_up() { mariadb-admin --socket="$MYSQL_SOCK" ping >/dev/null 2>&1; }

start_mariadb() {
  install -d -o mysql -g mysql -m 0755 /run/mysqld
  if [[ ! -d $MYSQL_DATA/mysql ]]; then
    mkdir -p "$MYSQL_DATA"
    chown mysql:mysql "$MYSQL_DATA"
    mariadb-install-db --user=mysql --datadir="$MYSQL_DATA" --skip-test-db \
      --auth-root-authentication-method=socket >"$LOG/mariadb-install.log" 2>&1 \
      || die "mariadb-install-db failed (see $LOG/mariadb-install.log)"
  fi
  if ! alive "$MYSQL_PID" || ! mysql_up; then
    setsid -f /usr/sbin/mariadbd --user=mysql --datadir="$MYSQL_DATA" --socket="$MYSQL_SOCK" \
      --pid-file="$MYSQL_PID" --skip-networking --innodb-buffer-pool-size=1024M \
      --log-error="$LOG/mariadbd.log" </dev/null >/dev/null 2>&1
  fi
  wait_for 60 mariadbd mysql_up
  mariadb --socket="$MYSQL_SOCK" <<'EOF'
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'eps-test';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
EOF
}

start_slurmdbd() {
  if ! alive "$PIDS/slurmdbd.pid"; then
    /usr/sbin/slurmdbd
  fi
  wait_for 30 slurmdbd sacctmgr -n -P show cluster
}

ctld_up() { scontrol ping | grep -q 'is UP'; }

start_slurmctld() {
  if alive "$PIDS/slurmctld.pid" && ((CONF_CHANGED)); then
    # a changed PreemptType takes effect only on a restart (scontrol reconfigure logs it, no more)
    scancel --quiet --full --user="$USER_NAME" 2>/dev/null || true
    stop_pidfiles "$PIDS/slurmctld.pid"
  fi
  if ! alive "$PIDS/slurmctld.pid"; then
    /usr/sbin/slurmctld
  fi
  wait_for 30 slurmctld ctld_up
}

node_ok() { # the node is registered and schedulable (not down, drained or unknown)
  local st
  st=$(sinfo -h -n "$NODE" -o '%T')
  [[ -n $st && $st != *down* && $st != *drain* && $st != *unk* && $st != *not_responding* && $st != *\** ]]
}

start_slurmd() {
  if alive "$PIDS/slurmd.pid" && ((CONF_CHANGED)); then
    kill "$(<"$PIDS/slurmd.pid")" 2>/dev/null || true
    wait_for 15 "slurmd to stop" sh -c "! kill -0 $(<"$PIDS/slurmd.pid") 2>/dev/null"
  fi
  if ! alive "$PIDS/slurmd.pid"; then
    /usr/sbin/slurmd
  fi
  local deadline=$((SECONDS + 30))
  until node_ok; do
    if sinfo -h -n "$NODE" -o '%T' | grep -qE 'drain|down'; then
      scontrol update nodename="$NODE" state=resume >/dev/null 2>&1 || true
    fi
    ((SECONDS < deadline)) || die "node $NODE not schedulable: $(sinfo -h -n "$NODE" -o '%T %E') (logs: $LOG)"
    sleep 0.2
  done
}

sacct_i() { sacctmgr -i "$@" >/dev/null; }

setup_accounting() {
  # Read the state once and change only what differs (each sacctmgr call is slow,
  # and adding what exists exits non-zero).
  local clusters qos_now line name prio wall tres cur assoc
  clusters=$(sacctmgr -n -P show cluster format=Cluster)
  grep -qx "$CLUSTER" <<<"$clusters" || sacct_i add cluster "$CLUSTER"
  qos_now=$(sacctmgr -n -P show qos format=Name,Priority,MaxWall,MaxTRESPU,Preempt,GraceTime)
  for line in "${QOS_SPEC[@]}"; do  # every tier first: a Preempt list names the others
    grep -q "^${line%%|*}|" <<<"$qos_now" || sacct_i add qos "${line%%|*}"
  done
  for line in "${QOS_SPEC[@]}"; do
    IFS='|' read -r name prio wall tres preempt grace <<<"$line"
    cur=$(grep "^$name|" <<<"$qos_now" || true)
    # sacctmgr prints GraceTime as HH:MM:SS
    [[ $cur == "$name|$prio|$wall|$tres|$preempt|$(printf '%02d:%02d:%02d' $((grace / 3600)) $((grace / 60 % 60)) $((grace % 60)))" ]] && continue
    # gres/gpu=-1 clears a per-user GPU cap; an empty Preempt= clears the list
    sacct_i modify qos where name="$name" set Priority="$prio" MaxWall="$wall" \
      MaxTRESPerUser="${tres:-gres/gpu=-1}" Preempt="$preempt" GraceTime="$grace"
  done
  sacctmgr -n -P show account format=Account | grep -qx "$ACCOUNT" \
    || sacct_i add account "$ACCOUNT" cluster="$CLUSTER" description=eps-test organization=eps
  assoc=$(sacctmgr -n -P show assoc user="$USER_NAME" format=Account,QOS)
  if ! grep -q "^$ACCOUNT|" <<<"$assoc"; then
    sacct_i add user "$USER_NAME" account="$ACCOUNT" cluster="$CLUSTER"
  fi
  if ! grep -qx "$ACCOUNT|$QOS_NAMES" <<<"$assoc"; then
    sacct_i modify user where name="$USER_NAME" account="$ACCOUNT" set QOS="$QOS_NAMES" DefaultQOS=low-eur
  fi
  # The user holds only the ladder's tiers: drop the association `add cluster`
  # creates in account root (QoS normal).
  if grep -q "^root|" <<<"$assoc" && [[ $ACCOUNT != root ]]; then
    sacct_i modify user where name="$USER_NAME" set DefaultAccount="$ACCOUNT" || true
    sacct_i delete user where name="$USER_NAME" account=root || true
  fi
}

test_only() { sbatch --test-only --qos="$1" -o /dev/null --wrap=true; }

wait_ready() {
  local q deadline=$((SECONDS + READY_TIMEOUT))
  for q in ${QOS_NAMES//,/ }; do
    until test_only "$q" >/dev/null 2>&1; do
      ((SECONDS < deadline)) || die "sbatch --test-only --qos=$q still refused: $(test_only "$q" 2>&1 | tail -1)"
      sleep 0.2
    done
  done
}

stop_pidfiles() { # stop_pidfiles PIDFILE...: SIGTERM them all at once, wait up to 15 s, then SIGKILL
  local f pids=() pid i
  for f in "$@"; do alive "$f" && pids+=("$(<"$f")"); done
  ((${#pids[@]} == 0)) && return 0
  kill "${pids[@]}" 2>/dev/null || true
  for i in $(seq 1 150); do
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && break; done
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  for pid in "${pids[@]}"; do
    if kill -0 "$pid" 2>/dev/null; then say "pid $pid did not stop; killing"; kill -9 "$pid" 2>/dev/null || true; fi
  done
}

do_start() {
  need_root
  mkdir -p "$LOG"
  install_packages
  prepare_dirs
  write_configs
  start_munge
  start_mariadb
  start_slurmdbd
  # the cluster must exist in the database before slurmctld registers with it
  sacctmgr -n -P show cluster format=Cluster | grep -qx "$CLUSTER" || sacct_i add cluster "$CLUSTER"
  start_slurmctld
  start_slurmd
  # gres/gpu exists as a TRES only once slurmctld has registered: QoS caps after
  setup_accounting
  wait_ready
  say "ready: cluster $CLUSTER, node $NODE, QoS $QOS_NAMES granted to $USER_NAME"
}

do_stop() {
  need_root
  if [[ -s $PIDS/slurmctld.pid ]] && alive "$PIDS/slurmctld.pid"; then
    scancel --quiet --full --user="$USER_NAME" 2>/dev/null || true
  fi
  # the SLURM daemons together, then what they depend on
  stop_pidfiles "$PIDS/slurmd.pid" "$PIDS/slurmctld.pid" "$PIDS/slurmdbd.pid"
  stop_pidfiles "$MYSQL_PID" /run/munge/munged.pid
  say "stopped"
}

do_status() {
  local ok=0 f
  for f in "$MYSQL_PID" "$PIDS/slurmdbd.pid" "$PIDS/slurmctld.pid" "$PIDS/slurmd.pid" /run/munge/munged.pid; do
    if alive "$f"; then echo "up   $f"; else echo "down $f"; ok=1; fi
  done
  return $ok
}

case ${1:-start} in
  start) do_start ;;
  stop) do_stop ;;
  status) do_status ;;
  purge) do_stop; rm -rf "$STATE"; say "purged $STATE" ;;
  *) die "usage: $0 start|stop|status|purge" ;;
esac
