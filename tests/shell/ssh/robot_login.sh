#!/usr/bin/env bash
# A robot login for the tests: the forced command of a key in the test sshd's authorized_keys
#
#   restrict,command="bash tests/shell/ssh/robot_login.sh LOG" ssh-ed25519 AAAA...
#
# as a DRAC automation key is (sbatch, scancel, squeue, scp, rsync; nothing else).  Every
# command the client asked for ($SSH_ORIGINAL_COMMAND) is appended to LOG, one line each
# (a newline in it is written as \n); one whose first word is not allowed, or that holds
# `;`, `|`, `&`, a backtick, `$(` or a newline, is refused (exit 1, one line on stderr);
# an allowed one runs through `bash -c`, stdin passed on (sbatch reads its script there).
set -u
log=${1:?usage: robot_login.sh LOG}
cmd=${SSH_ORIGINAL_COMMAND-}
printf '%s\n' "${cmd//$'\n'/\\n}" >>"$log"
first=${cmd%%[[:space:]]*}
refuse() { printf 'robot login: refused: %s\n' "$1" >&2; exit 1; }
case $cmd in
  *';'* | *'|'* | *'&'* | *'`'* | *'$('* | *$'\n'*) refuse "a shell metacharacter in: ${first:-the command}" ;;
esac
case $first in
  sbatch | scancel | squeue | scp | rsync) exec bash -c "$cmd" ;;
esac
refuse "${first:-an empty command} is not allowed"
