#!/bin/sh
# A chat bot in five lines of shell: answers "!ping" in a room with "pong".
#
#   examples/ping-bot.sh ~/bbs lobby
#
# tail -n 0 -f starts at the end (no replies to old pings); every line is one post. The mount
# holds tail's look at the room until it grows, so the short -s (tail's sleep after it writes
# into the pipe) costs nothing while the room is quiet and keeps the answer quick.
set -eu
mnt=${1:?usage: ping-bot.sh MOUNTPOINT [ROOM]}
room=${2:-lobby}
tail -n 0 -f -s 0.1 "$mnt/chat/$room" | while IFS= read -r line; do
  case "$line" in
    *": !ping"*) echo "pong (${line%%]*}])" > "$mnt/chat/$room" ;;
  esac
done
