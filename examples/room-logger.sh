#!/bin/sh
# Keeps a dated log of a room: the board's [HH:MM:SS] stamps are device uptime, so this
# prefixes each line with the local wall-clock time it arrived.
#
#   examples/room-logger.sh ~/bbs lobby >> lobby.log
set -eu
mnt=${1:?usage: room-logger.sh MOUNTPOINT [ROOM]}
room=${2:-lobby}
# cat, not tail -f: cat writes each line into the pipe as it arrives, while GNU tail holds a
# pipe's output until a second passes with nothing new, and `tail -n +1` reads to an end a room
# never has before following.
cat "$mnt/chat/$room" | while IFS= read -r line; do
  printf '%s %s\n' "$(date '+%Y-%m-%d %H:%M:%S')" "$line"
done
