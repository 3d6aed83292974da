#!/bin/sh
# Posts a text file to a board room as one message (kept until close, then sent whole),
# and prints the id the board gave it.
#
#   examples/post-file.sh ~/bbs lobby notes.txt
set -eu
mnt=${1:?usage: post-file.sh MOUNTPOINT ROOM FILE}
room=${2:?room}
file=${3:?file}
before=$(ls "$mnt/rooms/$room")
cat "$file" > "$mnt/rooms/$room/new"
ls "$mnt/rooms/$room" | grep -vxF "$before" || true
