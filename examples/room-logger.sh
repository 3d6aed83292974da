#!/bin/sh
# Keeps a dated log of a room: the board's [HH:MM:SS] stamps are device uptime, so this
# prefixes each line with the local wall-clock time it arrived.
#
#   examples/room-logger.sh ~/bbs lobby >> lobby.log
set -eu
mnt=${1:?usage: room-logger.sh MOUNTPOINT [ROOM]}
room=${2:-lobby}
tail -n +1 -f "$mnt/chat/$room" | while IFS= read -r line; do
  printf '%s %s\n' "$(date '+%Y-%m-%d %H:%M:%S')" "$line"
done
