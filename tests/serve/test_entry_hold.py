"""The server holds an entry as a reader does while it sends one of its files: `gc` skips the
entry until the last byte is out, then the hold is gone; a client that stops reading is cut off after
the stall deadline, which ends the hold."""

from __future__ import annotations

import os
import socket
import time

import httpx
import pytest

from layerfuse.cache import usage
from layerfuse.cache.gc import collect

BIG = 256 << 20  # more than the sockets between server and client buffer (Linux: up to 32 MiB + 4 MiB)


@pytest.mark.filterwarnings("ignore:Object at big.bin")  # zarr's listing meets a file of no array
def test_an_entry_being_served_is_held_until_the_response_ends(served, served_root):
    [name] = [n for n in os.listdir(served_root) if not n.startswith(".") and "." not in n]
    entry = str(served_root / name)
    with open(os.path.join(entry, "big.bin"), "wb") as f:
        f.truncate(BIG)  # sparse: no disk written, all of it sent
    with httpx.stream("GET", f"{served.url}/entries/{name}/big.bin", timeout=30) as response:
        assert response.status_code == 200
        chunks = response.iter_bytes()  # one iterator: a dropped one closes the connection
        first = next(chunks)  # the send now waits on this client
        hour_ago = time.time() - 3600
        os.utime(entry + ".read", (hour_ago, hour_ago))  # the read recorded long ago: the hold is what counts
        assert collect(str(served_root), max_size=0) == [] and os.path.isdir(entry)
        assert usage.busy(entry).startswith("open by a reader")
        got = len(first) + sum(len(b) for b in chunks)
    assert got == BIG
    for _ in range(100):  # the hold is released just after the last byte, on the server's side
        if not usage.in_use(entry):
            break
        httpx.get(f"{served.url}/api/entries", timeout=30)
    assert not usage.in_use(entry)
    assert [os.path.basename(e.path) for e in collect(str(served_root), max_size=0)] == [name]


@pytest.mark.filterwarnings("ignore:Object at big.bin")
def test_a_client_that_stops_reading_is_cut_off_and_the_entry_released(served, served_root, monkeypatch):
    from layerfuse.serve import guard

    monkeypatch.setattr(guard, "STALL_SECONDS", 1.0)
    [name] = [n for n in os.listdir(served_root) if not n.startswith(".") and "." not in n]
    entry = str(served_root / name)
    with open(os.path.join(entry, "big.bin"), "wb") as f:
        f.truncate(BIG)
    with socket.create_connection(("127.0.0.1", served.port), timeout=10) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.sendall(f"GET /entries/{name}/big.bin HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        assert s.recv(100).startswith(b"HTTP/1.1 200")
        time.sleep(0.5)  # then reads nothing more, and keeps the connection open
        assert usage.in_use(entry)
        deadline = time.monotonic() + 20
        while usage.in_use(entry) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not usage.in_use(entry)  # cut off after the stall: gc and rm no longer wait on it
        s.settimeout(10)
        received = 0
        while chunk := _recv(s):  # what was in flight, then the end of the connection
            received += len(chunk)
        assert received < BIG


def _recv(s) -> bytes:
    try:
        return s.recv(1 << 20)
    except ConnectionResetError:
        return b""
