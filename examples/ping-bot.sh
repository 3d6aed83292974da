#!/bin/sh
# A chat bot in five lines of shell: answers "!ping" in a room with "pong".
#
#   examples/ping-bot.sh ~/bbs lobby
#
# tail -n 0 -f starts at the end (no replies to old pings); every line is one post.
set -eu
mnt=${1:?usage: ping-bot.sh MOUNTPOINT [ROOM]}
room=${2:-lobby}
tail -n 0 -f "$mnt/chat/$room" | while IFS= read -r line; do
  case "$line" in
    *": !ping"*) echo "pong (${line%%]*}])" > "$mnt/chat/$room" ;;
  esac
done
