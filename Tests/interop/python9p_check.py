#!/usr/bin/env python3
"""Checks that a 9BBS server (9bbsd) serves an independent 9P2000 client correctly.

The client is python-9p from PyPI (import name ``py9p``; its wire codec is plan9port's
convM2S/convS2M/convM2D). Usage:

    python9p_check.py tcp!127.0.0.1!5640 [--motd TEXT]
    python9p_check.py 127.0.0.1 5640 [--motd TEXT]

Prints one ``ok``/``FAIL`` line per check and exits 1 if any check failed (2 on bad usage).
"""

from __future__ import annotations

import argparse
import socket
import sys
import threading
import traceback

try:
    import py9p
    from py9p import DMDIR, NOFID, NOTAG, OREAD, OWRITE, QTDIR, Client, RemoteError
    from py9p.native import decode_dir
except ImportError as error:  # pragma: no cover - reported as a usage problem
    print(f"FAIL import python-9p (py9p): {error}; run scripts/test to create the venv")
    sys.exit(2)

TIMEOUT = 10.0
UNAME = "pyclient"


def parse_address(args: argparse.Namespace) -> tuple[str, int]:
    if args.port is not None:
        return args.address, int(args.port)
    parts = args.address.split("!")
    if len(parts) == 3 and parts[0] == "tcp":
        return parts[1], int(parts[2])
    raise SystemExit(f"usage: expected tcp!host!port or HOST PORT, got {args.address!r}")


class Checker:
    def __init__(self) -> None:
        self.failures = 0
        self.passed = 0

    def check(self, name: str, condition: bool, detail: str = "") -> bool:
        if condition:
            self.passed += 1
            print(f"ok   {name}" + (f": {detail}" if detail else ""), flush=True)
        else:
            self.failures += 1
            print(f"FAIL {name}" + (f": {detail}" if detail else ""), flush=True)
        return condition

    def run(self, name: str, body) -> object | None:
        """Runs body(); an exception fails the check named `name`."""
        try:
            return body()
        except Exception as error:  # noqa: BLE001 - every failure is reported
            self.failures += 1
            print(f"FAIL {name}: {type(error).__name__}: {error}", flush=True)
            traceback.print_exc(limit=3, file=sys.stdout)
            return None


def split_directory(data: bytes) -> list:
    """Decodes the concatenated stat entries of a directory read."""
    entries = []
    offset = 0
    while offset < len(data):
        if offset + 2 > len(data):
            raise ValueError(f"truncated stat size at byte {offset}")
        size = int.from_bytes(data[offset : offset + 2], "little")
        end = offset + 2 + size
        if end > len(data):
            raise ValueError(f"stat entry at byte {offset} runs past the reply")
        entries.append(decode_dir(data[offset:end]))
        offset = end
    return entries


def read_all(client: Client, fid: int) -> bytes:
    out = b""
    while True:
        chunk = client.read(fid, offset=len(out))
        if not chunk:
            return out
        out += chunk
        if len(out) > 1 << 20:
            raise RuntimeError("file larger than 1 MiB; offsets ignored?")


def list_directory(client: Client, fid: int) -> list:
    entries = []
    offset = 0
    for _ in range(10_000):
        chunk = client.read(fid, count=client.msize - 24, offset=offset)
        if not chunk:
            return entries
        entries.extend(split_directory(chunk))
        offset += len(chunk)
    raise RuntimeError("directory read never ended")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("address", help="tcp!host!port, or a host followed by a port")
    parser.add_argument("port", nargs="?", help="TCP port when the address is a bare host")
    parser.add_argument("--motd", help="expected /etc/motd text (without the newline)")
    args = parser.parse_args()
    host, port = parse_address(args)

    c = Checker()
    print(f"python-9p against tcp!{host}!{port} (py9p from {py9p.__file__})", flush=True)
    try:
        sock = socket.create_connection((host, port), timeout=TIMEOUT)
    except OSError as error:
        print(f"FAIL connect tcp!{host}!{port}: {error}")
        return 1
    sock.settimeout(TIMEOUT)
    client = Client(sock, msize=8192)
    try:
        # version
        rversion = c.run("version", client.negotiate)
        if rversion is None:
            return 1
        c.check(
            "version",
            rversion.version == "9P2000" and 64 <= rversion.msize <= 8192 and rversion.tag == NOTAG,
            f"Rversion msize={rversion.msize} version={rversion.version} tag={rversion.tag:#x}",
        )

        # attach
        root = c.run("attach", lambda: client.attach(fid=0, uname=UNAME, aname="", afid=NOFID))
        if root is None:
            return 1
        c.check("attach", bool(root.type & QTDIR), f"root qid {root}")

        # walk: a file, a miss, a multi-name walk into a new fid
        qids = c.run("walk etc/motd", lambda: client.walk(0, 1, "etc/motd"))
        if qids is not None:
            c.check(
                "walk etc/motd",
                len(qids) == 2 and bool(qids[0].type & QTDIR) and not qids[1].type & QTDIR,
                f"{len(qids)} qids: {qids}",
            )
        # walk(5): a miss on the first name is Rerror; a later miss is a short Rwalk and
        # newfid is not created (so it can be used again).
        try:
            client.walk(0, 9, "no-such-dir")
            c.check("walk: first name missing", False, "Rwalk instead of Rerror")
        except RemoteError as error:
            c.check("walk: first name missing", "not found" in str(error), f"Rerror '{error}'")
        except Exception as error:  # noqa: BLE001
            c.check("walk: first name missing", False, f"{type(error).__name__}: {error}")
        short = c.run("walk: later name missing", lambda: client.walk(0, 9, "etc/no-such-file"))
        if short is not None:
            c.check("walk: later name missing", len(short) == 1, f"{len(short)} qids")
            again = c.run("walk: newfid free after a short walk", lambda: client.walk(0, 9, "etc"))
            if again is not None:
                c.check("walk: newfid free after a short walk", len(again) == 1, f"{again}")
                c.run("clunk 9", lambda: client.clunk(9))

        # read /etc/motd
        def read_motd() -> bytes:
            client.open(1, int(OREAD))
            return read_all(client, 1)

        motd = c.run("read /etc/motd", read_motd)
        if motd is not None:
            text = motd.decode("utf-8", "replace")
            expected = None if args.motd is None else args.motd + "\n"
            c.check(
                "read /etc/motd",
                text.endswith("\n") and len(text) > 1 and (expected is None or text == expected),
                repr(text),
            )
        c.run("clunk motd", lambda: client.clunk(1))

        # a reader parks on /chat/tech before anyone posts; a post from this client wakes it
        def open_room(fid: int, room: str) -> None:
            client.walk(0, fid, f"chat/{room}")
            client.open(fid, int(OREAD))

        c.run("open /chat/tech", lambda: open_room(2, "tech"))
        woken: dict[str, object] = {}

        def parked_read() -> None:
            try:
                woken["data"] = client.read(2, count=1024)
            except Exception as error:  # noqa: BLE001
                woken["error"] = error

        reader = threading.Thread(target=parked_read, daemon=True)
        reader.start()
        # Give the Tread a moment to reach the server; a post that overtakes it is still read.
        reader.join(0.2)
        c.check("read on an empty room waits (parks)", reader.is_alive(), f"returned {woken}")

        # write /chat/post
        def post(payload: bytes) -> int:
            client.walk(0, 3, "chat/post")
            try:
                client.open(3, int(OWRITE))
                return client.write(3, payload)
            finally:
                client.clunk(3)

        payload = b"lobby:hello from python-9p\n"
        count = c.run("write /chat/post", lambda: post(payload))
        if count is not None:
            c.check("write /chat/post", count == len(payload), f"Rwrite count {count}")
        tech = b"tech:wake up, parked reader\n"
        count = c.run("write /chat/post (tech)", lambda: post(tech))
        if count is not None:
            c.check("write /chat/post (tech)", count == len(tech), f"Rwrite count {count}")

        reader.join(TIMEOUT)
        data = woken.get("data")
        c.check(
            "parked read woken by the post",
            not reader.is_alive()
            and isinstance(data, bytes)
            and data.endswith(b"] " + UNAME.encode() + b": wake up, parked reader\n"),
            repr(woken) if reader.is_alive() is False else "still waiting",
        )

        # read a room after a post
        def read_lobby() -> bytes:
            open_room(4, "lobby")
            return client.read(4, count=1024)

        lobby = c.run("read /chat/lobby after the post", read_lobby)
        if lobby is not None:
            c.check(
                "read /chat/lobby after the post",
                lobby.endswith(b"] " + UNAME.encode() + b": hello from python-9p\n"),
                repr(lobby),
            )

        # list /chat
        def list_chat() -> list:
            client.walk(0, 5, "chat")
            client.open(5, int(OREAD))
            return list_directory(client, 5)

        entries = c.run("list /chat", list_chat)
        if entries is not None:
            names = [entry.name for entry in entries]
            by_name = {entry.name: entry for entry in entries}
            c.check(
                "list /chat",
                names[:2] == ["post", "users"] and "lobby" in names and "tech" in names,
                f"{names}",
            )
            if "post" in by_name and "lobby" in by_name:
                c.check(
                    "list /chat modes",
                    by_name["post"].mode & 0o777 == 0o200
                    and by_name["lobby"].mode & 0o777 == 0o444
                    and not by_name["lobby"].mode & int(DMDIR),
                    f"post {by_name['post'].mode:#o}, lobby {by_name['lobby'].mode:#o}",
                )

        # stat, and an error for a write-only file read
        st = c.run("stat /etc/motd", lambda: (client.walk(0, 6, "etc/motd"), client.stat(6))[1])
        if st is not None:
            c.check("stat /etc/motd", st.name == "motd" and st.uid == "zephyr", f"{st}")
        try:
            client.walk(0, 7, "chat/post")
            client.open(7, int(OREAD))
            client.read(7, count=64)
            c.check("reading /chat/post fails", False, "no Rerror")
        except RemoteError as error:
            c.check("reading /chat/post fails", True, f"Rerror '{error}'")

        for fid in (2, 4, 5, 6, 7):
            c.run(f"clunk {fid}", lambda fid=fid: client.clunk(fid))
    finally:
        client.close()

    print(f"summary: {c.passed} checks ok, {c.failures} failed", flush=True)
    return 1 if c.failures else 0


if __name__ == "__main__":
    sys.exit(main())
