#!/bin/sh
# The node check's fake mode (nodecheck.py): runs COMMAND in a private mount namespace
# whose /dev is a copy of this host's plus stand-in NVIDIA device nodes (/dev/nvidia0,
# c 195:0, and /dev/nvidiactl, c 195:255) that no driver backs. The pool started so can
# set its cgroup device rules on them, and a job's open() then says whether the cgroup let
# it through (ENXIO: no driver behind the node) or not (EPERM). Nothing changes outside
# the namespace. Needs root (unshare --mount, mount, mknod).
#
#   standin-dev.sh EMPTY_DIR COMMAND [ARGS...]
#
# EMPTY_DIR holds the host's /dev inside the namespace; outside it stays an empty
# directory (remove it with rmdir, never recursively). The command keeps this process's
# pid (every step execs).
set -eu
dir=$1
shift
exec unshare --mount --propagation private -- sh -c '
  set -eu
  dir=$1
  shift
  mount --rbind /dev "$dir"
  mount -t tmpfs -o mode=0755,nosuid tmpfs /dev
  for e in "$dir"/* "$dir"/.[!.]*; do
    [ -e "$e" ] || [ -L "$e" ] || continue
    n=${e##*/}
    if [ -d "$e" ] && [ ! -L "$e" ]; then
      mkdir "/dev/$n"
      mount --rbind "$e" "/dev/$n"
    else
      cp -a "$e" "/dev/$n"
    fi
  done
  [ -e /dev/nvidia0 ] || mknod -m 0666 /dev/nvidia0 c 195 0
  [ -e /dev/nvidiactl ] || mknod -m 0666 /dev/nvidiactl c 195 255
  exec "$@"
' standin-dev "$dir" "$@"
