#!/usr/bin/env bash
# A dedicated OpenSSH server for eps's transport tests (ssh + rsync), on loopback only.
#
#   bash tests/shell/ssh/sshd.sh start    # install if missing, configure, start, wait until it answers
#   bash tests/shell/ssh/sshd.sh stop     # stop the sshd this script started
#   bash tests/shell/ssh/sshd.sh status   # exit 0 when it is alive and answering
#
# Run as root.  Idempotent and fast when already running (a config change is
# applied with SIGHUP).  It is NOT the system sshd: its own config, host keys,
# pid file and log live under $EPS_SSHD_STATE (default /var/lib/eps-test-sshd),
# and it listens only on
#   127.0.0.1:2222   the "login node" / any ssh target of the tests
#   127.0.0.5:22     a fake GCP VM or RunPod pod: a fake provider reports natIP
#                    127.0.0.5 and eps connects on the standard port 22
# Key authentication only (root allowed with a key); the authorized keys are the
# file $EPS_SSHD_STATE/authorized_keys, which the tests append their public keys to.
set -euo pipefail

STATE=${EPS_SSHD_STATE:-/var/lib/eps-test-sshd}
LISTEN=(127.0.0.1:2222 127.0.0.5:22)
PACKAGES=(openssh-server openssh-client rsync rclone)
CONFIG=$STATE/sshd_config
PIDFILE=$STATE/sshd.pid
LOG=$STATE/sshd.log
KEYS=$STATE/authorized_keys
READY_TIMEOUT=${EPS_SSHD_READY_TIMEOUT:-20}

say() { printf 'sshd.sh: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

need_root() { [[ $(id -u) -eq 0 ]] || die "must run as root"; }

alive() {
  local pid
  [[ -s $PIDFILE ]] || return 1
  pid=$(<"$PIDFILE")
  [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null
}

answers() { # answers HOST PORT: something speaking SSH is listening there
  local banner
  banner=$(timeout 2 bash -c "exec 3<>/dev/tcp/$1/$2 && head -c 4 <&3" 2>/dev/null) || return 1
  [[ $banner == SSH- ]]
}

all_answer() {
  local addr
  for addr in "${LISTEN[@]}"; do answers "${addr%:*}" "${addr##*:}" || return 1; done
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
  apt-get update -qq >"$STATE/apt.log" 2>&1 || die "apt-get update failed (see $STATE/apt.log)"
  # policy-rc.d: the package must not start the system sshd on 0.0.0.0:22
  local policy=/usr/sbin/policy-rc.d created=0
  if [[ ! -e $policy ]]; then printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod 755 "$policy"; created=1; fi
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >>"$STATE/apt.log" 2>&1 \
    || { ((created)) && rm -f "$policy"; die "apt-get install failed (see $STATE/apt.log)"; }
  ((created)) && rm -f "$policy"
  return 0
}

write_config() { # prints "changed" when the config file changed
  local tmp addr
  tmp=$(mktemp)
  {
    echo "# Written by eps tests/shell/ssh/sshd.sh: the transport tests' own sshd."
    for addr in "${LISTEN[@]}"; do echo "ListenAddress $addr"; done
    cat <<EOF
HostKey $STATE/ssh_host_ed25519_key
PidFile $PIDFILE
AuthorizedKeysFile $KEYS
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
UsePAM no
StrictModes yes
AllowAgentForwarding no
AllowTcpForwarding no
X11Forwarding no
# only SHLVL, and only where a key line sets it (environment="SHLVL=1": a pod-like login,
# see ssh_support.authorize); no other variable a key line names reaches a session
PermitUserEnvironment SHLVL
PrintMotd no
UseDNS no
MaxStartups 64:30:256
MaxSessions 64
LogLevel VERBOSE
Subsystem sftp internal-sftp
# A login shell here may run `pyenv init` (this machine's ~/.bashrc), whose rehash waits up
# to 60 s on a lock that a killed rehash left behind; the tests kill jobs on purpose.
SetEnv PYENV_REHASH_TIMEOUT=1
EOF
  } >"$tmp"
  if [[ -f $CONFIG ]] && cmp -s "$tmp" "$CONFIG"; then
    rm -f "$tmp"
    return 0
  fi
  mv "$tmp" "$CONFIG"
  chmod 600 "$CONFIG"
  echo changed
}

prepare() {
  install -d -m 0755 -o root -g root "$STATE"
  install -d -m 0755 /run/sshd # privilege separation directory
  [[ -s $STATE/ssh_host_ed25519_key ]] || ssh-keygen -q -t ed25519 -N '' -C eps-test-sshd -f "$STATE/ssh_host_ed25519_key"
  [[ -e $KEYS ]] || install -m 0644 -o root -g root /dev/null "$KEYS"
  touch "$LOG"
}

do_start() {
  need_root
  install -d -m 0755 "$STATE"
  install_packages
  prepare
  local changed
  changed=$(write_config)
  /usr/sbin/sshd -t -f "$CONFIG" 2>"$STATE/config-test.log" || die "sshd rejects $CONFIG: $(tail -1 "$STATE/config-test.log")"
  if alive; then
    [[ -n $changed ]] && kill -HUP "$(<"$PIDFILE")"
  else
    /usr/sbin/sshd -f "$CONFIG" -E "$LOG" || die "sshd did not start (see $LOG)"
  fi
  local deadline=$((SECONDS + READY_TIMEOUT))
  until alive && all_answer; do
    ((SECONDS < deadline)) || die "sshd not answering on ${LISTEN[*]} after ${READY_TIMEOUT}s (see $LOG)"
    sleep 0.1
  done
  say "ready: ${LISTEN[*]}, keys in $KEYS"
}

do_stop() {
  need_root
  alive || { say "not running"; return 0; }
  local pid i
  pid=$(<"$PIDFILE")
  kill "$pid" 2>/dev/null || true
  for i in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null
  rm -f "$PIDFILE"
  say "stopped"
}

do_status() {
  if alive && all_answer; then echo "up   sshd pid $(<"$PIDFILE") on ${LISTEN[*]}"; return 0; fi
  echo "down sshd ($PIDFILE)"
  return 1
}

case ${1:-start} in
  start) do_start ;;
  stop) do_stop ;;
  status) do_status ;;
  *) die "usage: $0 start|stop|status" ;;
esac
