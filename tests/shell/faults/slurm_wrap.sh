#!/bin/bash
# The fault suite's SLURM "login" prefix: eps runs `slurm_wrap.sh 'sbatch --parsable'`.
# Runs the real command (stdin passed on), logs it to $EPS_FAULT_DIR/calls.log, and
# when a one-shot rule file $EPS_FAULT_DIR/rules/NNN-<command> exists, takes it and
# SIGKILLs its parent (the eps process) "before" (the command never runs) or "after" it.
set -u
cmd=$*  # like ssh: the words joined with spaces, run by the shell
dir=${EPS_FAULT_DIR:?}
name=${cmd%% *}
if [[ $name == rsync || $cmd == *"rsync --server"* ]]; then  # rsync's protocol (a pull, or an upload after its mkdir): stream it
  echo "rsync" >>"$dir/calls.log"
  exec bash -c "$cmd"
fi
eps_pid=$PPID
input=""
if [[ $name == sbatch ]]; then input=$(cat); fi
rule=""
for f in "$dir"/rules/*-"$name"; do
  [[ -e $f ]] || continue
  if mv "$f" "$f.taken" 2>/dev/null; then rule=$(<"$f.taken"); break; fi
done
if [[ $rule == before ]]; then
  echo "KILL before $name" >>"$dir/calls.log"
  kill -KILL "$eps_pid"
  exit 137
fi
out=$(mktemp)
if [[ $name == sbatch ]]; then
  bash -c "$cmd" <<<"$input" >"$out"
  rc=$?
  qos=$(grep -o -- '--qos=[^ ]*' <<<"$input" | head -1)
  echo "sbatch ${qos#--qos=} $(tail -n 1 "$out")" >>"$dir/calls.log"
else
  bash -c "$cmd" >"$out"  # stdin passed on (a staged file arrives on it)
  rc=$?
  echo "$cmd" >>"$dir/calls.log"
fi
if [[ $rule == after ]]; then
  echo "KILL after $name" >>"$dir/calls.log"
  kill -KILL "$eps_pid"
fi
cat "$out"
rm -f "$out"
exit $rc
