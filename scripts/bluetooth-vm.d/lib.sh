# Helpers for bluetooth-vm guest scripts (sourced by guest-main and by every
# scenario). Environment, set by guest-main:
#   BTVM_WORK       shared work dir (read-write, same path as on the host)
#   BTVM_LOGS       $BTVM_WORK/logs: one NAME.log per scenario, bluetoothd.log, btmon.log, …
#   BTVM_MODROOT    the unpacked Debian kernel package (lib/modules/…)
#   BTVM_BUILD_DIR  where mount9bbs and 9bbsd are
#   BTVM_ADDR0/1    addresses of the virtual controllers hci0 and hci1 (LE public)
#   BTVM_SCRATCH    a fresh writable directory for this scenario (tmpfs)
#   BTVM_REASON     file holding the FAIL reason (written by fail)
#   BTVM_NOTE       file holding the detail shown after PASS (written by note)

# Stop the scenario: its FAIL line says REASON.
fail() {
    echo "$*" > "$BTVM_REASON"
    echo "FAIL: $*" >&2
    exit 1
}

# Append a detail to the scenario's PASS line: "PASS NAME (DETAIL; DETAIL)".
note() {
    if [ -s "$BTVM_NOTE" ]; then printf '; %s' "$*" >> "$BTVM_NOTE"; else printf '%s' "$*" > "$BTVM_NOTE"; fi
    echo "note: $*"
}

# The kernel under test is not the host's: point kmod at the unpacked tree.
# One modprobe for all: each start of kmod costs about half a second under TCG.
kmod_load() {
    modprobe -d "$BTVM_MODROOT" -a "$@"
}

# wait_for SECONDS COMMAND...: poll COMMAND every 0.2 s until it succeeds.
wait_for() {
    local deadline=$(( $(date +%s) + $1 )); shift
    until "$@" >/dev/null 2>&1; do
        [ "$(date +%s)" -lt "$deadline" ] || return 1
        sleep 0.2
    done
}

# btmgmt prints nothing when its stdin cannot be polled (/dev/null: epoll
# refuses it, so bt_shell drops all output); give it an empty pipe.
mgmt() { : | timeout 10 btmgmt "$@"; }

# radio_repeats INDEX: hciINDEX's advertisement goes on the air again every half second, as a
# real radio repeats it every advertising interval. btvirt's controllers send an advertising
# report only at the moment the scanner switches scanning on or the advertiser switches
# advertising on (emulator/btdev.c), and the kernel drops a report that comes right behind its
# own Scan Enable's Command Complete, before it counts discovery as started: a scan can then
# hear nothing at all for as long as it runs. This switches hciINDEX's advertising off and on
# again through a raw HCI socket (its data and parameters stay), until radio_quiet.
RADIO_PID=
radio_repeats() {
    local hci=hci$1
    (
        while :; do
            hcitool -i "$hci" cmd 0x08 0x000a 00 > /dev/null 2>&1
            hcitool -i "$hci" cmd 0x08 0x000a 01 > /dev/null 2>&1
            sleep 0.5
        done
    ) &
    RADIO_PID=$!
}
radio_quiet() {
    [ -n "$RADIO_PID" ] || return 0
    kill "$RADIO_PID" 2>/dev/null
    wait "$RADIO_PID" 2>/dev/null
    RADIO_PID=
}

# advertising_restore INDEX: hciINDEX advertises connectable again through the kernel
# (btmgmt's Advertising setting), as guest-main set it up, once no board's advertisement is left
# on it. Stop the board first: when bluetoothd takes 9bbsd's advertisement off (9bbsd exited),
# the kernel (6.1) switches advertising off even with the setting on, so turning the setting on
# before that leaves the controller silent and every later connect fails. The setting is
# switched off and on, so the controller is told again whatever the kernel thought it was.
advertising_restore() {
    local i=$1
    wait_for 10 no_advertisements "$i" || echo "hci$i: advertisements still registered: $(mgmt --index "$i" advinfo | tail -n 1)"
    mgmt --index "$i" advertising off > /dev/null
    mgmt --index "$i" connectable on > /dev/null
    mgmt --index "$i" advertising on > /dev/null
    mgmt --index "$i" info | grep 'current settings' | grep -w connectable | grep -qw advertising
}
no_advertisements() { mgmt --index "$1" advinfo | grep -q 'Instances list with 0 items'; }

# Seconds since the guest kernel started.
uptime_s() { cut -d' ' -f1 /proc/uptime; }

# The last non-empty line of FILE (for FAIL reasons quoting a tool's error).
last_line() { grep -v '^[[:space:]]*$' "$1" 2>/dev/null | tail -n 1; }

# show_log FILE [N]: the last N (20) lines of FILE into the scenario log.
show_log() {
    echo "--- last lines of $1:"
    tail -n "${2:-20}" "$1" 2>/dev/null | sed 's/^/  /'
}

# Every background process a scenario starts with `spawn` is killed when it ends.
BTVM_SPAWNED=()
spawn() {
    "$@" &
    BTVM_SPAWNED+=($!)
}
kill_spawned() {
    local p
    for p in "${BTVM_SPAWNED[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${BTVM_SPAWNED[@]}"; do
        for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$p" 2>/dev/null || break; sleep 0.2; done
        kill -9 "$p" 2>/dev/null
    done
    BTVM_SPAWNED=()
}

# --- a board on hci0 and members' mounts from hci1 (scenarios 31 and later) ---

# now_s: seconds since the epoch with microseconds, without a fork (bash 5).
now_s() { echo "$EPOCHREALTIME"; }
# ms_since T0 [T1]: milliseconds from T0 to T1 (default: now), one decimal.
ms_since() { awk -v a="$1" -v b="${2:-$EPOCHREALTIME}" 'BEGIN {printf "%.1f", (b - a) * 1000}'; }

# board_start LOG [9BBSD OPTION...]: 9bbsd --listen $BOARD_LISTEN (default
# l2cap:0x0080, every adapter) OPTION… in the background (spawned); returns once
# it logs that it listens. Sets BOARD_PID.
board_start() {
    local log=$1; shift
    [ -x "$BTVM_BUILD_DIR/9bbsd" ] || fail "no $BTVM_BUILD_DIR/9bbsd"
    spawn "$BTVM_BUILD_DIR/9bbsd" --listen "${BOARD_LISTEN:-l2cap:0x0080}" "$@" > "$log" 2>&1
    BOARD_PID=${BTVM_SPAWNED[-1]}
    local deadline=$(( $(date +%s) + 30 ))
    until grep -q 'listening on l2cap' "$log" 2>/dev/null; do
        kill -0 "$BOARD_PID" 2>/dev/null || { show_log "$log"; fail "9bbsd exited: $(last_line "$log")"; }
        [ "$(date +%s)" -lt "$deadline" ] || { show_log "$log"; fail "9bbsd not listening after 30 s"; }
        sleep 0.1
    done
}

# is_mounted MNT: MNT is a mount point now.
is_mounted() { awk -v m="$1" '$2 == m {found = 1} END {exit !found}' /proc/mounts; }

# member_mount LOG MNT [MOUNT9BBS OPTION...]: mount9bbs -f OPTION… of the board
# (l2cap:$BTVM_ADDR0:0x0080:public) on MNT from hci1, in the background
# (spawned); returns once MNT is mounted (60 s at most). Sets MOUNT_PID and
# MOUNT_SECS (seconds the mount took). Set XDG_STATE_HOME in the caller's
# environment for a member of its own (outbox, history, known boards).
member_mount() {
    local log=$1 mnt=$2; shift 2
    [ -x "$BTVM_BUILD_DIR/mount9bbs" ] || fail "no $BTVM_BUILD_DIR/mount9bbs"
    [ -c /dev/fuse ] || fail "no /dev/fuse in the guest"
    mkdir -p "$mnt" "${XDG_STATE_HOME:-$HOME/.local/state}"
    local t0=$EPOCHREALTIME
    spawn "$BTVM_BUILD_DIR/mount9bbs" -f "$@" "l2cap:$BTVM_ADDR0:0x0080:public" "$mnt" > "$log" 2>&1
    MOUNT_PID=${BTVM_SPAWNED[-1]}
    local deadline=$(( $(date +%s) + 60 ))
    until is_mounted "$mnt"; do
        kill -0 "$MOUNT_PID" 2>/dev/null || { show_log "$log"; fail "mount9bbs ($mnt) exited: $(last_line "$log")"; }
        [ "$(date +%s)" -lt "$deadline" ] || { show_log "$log"; fail "$mnt not mounted after 60 s"; }
        sleep 0.1
    done
    MOUNT_SECS=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.1f", b - a}')
    echo "mounted $mnt in $MOUNT_SECS s (pid $MOUNT_PID)"
}

# member_unmount MNT: mount9bbs -u, else a lazy umount.
member_unmount() {
    timeout 20 "$BTVM_BUILD_DIR/mount9bbs" -u "$1" || umount -l "$1" 2>/dev/null || true
}

# mount_status MNT: mount9bbs status MNT (10 s at most).
mount_status() { timeout 10 "$BTVM_BUILD_DIR/mount9bbs" status "$1"; }

# messages_out MNT: 9P messages the mount has sent so far, all sessions.
messages_out() {
    mount_status "$1" | awk '$1 == "session" {for (i = 1; i < NF; i++) if ($i == "out") {split($(i + 1), a, "/"); n += a[1]}} END {print n + 0}'
}

# percentile P NUMBER...: the P-th percentile (nearest rank) of the numbers.
percentile() {
    local p=$1; shift
    printf '%s\n' "$@" | sort -n | awk -v p="$p" '{v[NR] = $1} END {r = int((p * NR + 99) / 100); if (r < 1) r = 1; print v[r]}'
}
