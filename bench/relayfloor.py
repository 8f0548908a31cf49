"""`python -m bench.relayfloor TOTAL_BYTES`: the floor of any relay of a PTY
to a WebSocket client, as a process of its own; prints `MB/s ms-CPU-per-MB`.

What it does is the least a relay with the daemon's guarantees does: the
same workload on a bare PTY, read by runnerd's own burst reader
(`runnerd.local.child.ReadBurst`, non-blocking, `poll` when nothing is
ready), every chunk kept (as the replay ring keeps it), framed
(`wsframes.binary_frame_pieces`) and written with one `sendmsg` per burst
to a UNIX socket whose other end a forked counting client reads
(`countclient.FrameCounter`), rate taken there as `throughput` takes the
daemon's. No trio, no HTTP, no session: the daemon's rate against this one
is what those cost; this one against the bare read loop is what reading in
bursts, keeping and sending cost on this machine.
"""

from __future__ import annotations

import os
import select
import socket
import subprocess
import sys
import time

from bench.countclient import BUFFER_BYTES, FrameCounter
from bench.throughput import writer_script
from runnerd.http.wsframes import binary_frame_pieces
from runnerd.local.child import ReadBurst

MB = 1_000_000
CLOSE_FRAME = b"\x88\x02\x03\xe8"  # 1000, no reason


def _count(sock: socket.socket) -> None:
    """The client (a forked child): count to the Close, report the rate."""
    counter, buffer = FrameCounter(), bytearray(BUFFER_BYTES)
    view, held = memoryview(buffer), 0
    while True:
        used = counter.feed(view[:held])
        if counter.closed:
            break
        left = held - used
        buffer[:left] = buffer[used:held]
        held = left + sock.recv_into(view[left:])
    elapsed = time.perf_counter() - (counter.first_output_at or time.perf_counter())
    sock.sendall(f"{counter.received / elapsed / MB}\n".encode())


def relay(total_bytes: int, script: str) -> tuple[float, float]:
    """(MB/s at the client, the relay's CPU seconds per MB)."""
    ours, theirs = socket.socketpair()
    if os.fork() == 0:  # a fresh process of our own: nothing else runs in it
        ours.close()
        _count(theirs)
        os._exit(0)
    theirs.close()
    master, slave = os.openpty()
    proc = subprocess.Popen(
        ["/bin/sh", "-c", script], stdin=slave, stdout=slave, stderr=slave, start_new_session=True
    )
    os.close(slave)
    os.set_blocking(master, False)
    os.write(master, b"go\n")
    poll, burst, kept = select.poll(), ReadBurst(), []
    poll.register(master, select.POLLIN)
    cpu0, seq, eof = time.process_time(), 0, False
    while not eof:
        data, eof = burst.read(master)
        if data:
            seq += 1
            kept.append(data)
            ours.sendmsg(binary_frame_pieces([(seq, data)]))
        elif not eof:
            poll.poll()
    cpu = time.process_time() - cpu0
    ours.sendall(CLOSE_FRAME)
    rate = float(ours.makefile().readline())
    proc.wait()
    os.close(master)
    os.wait()
    return rate, cpu / (sum(map(len, kept)) / MB)


if __name__ == "__main__":
    total = int(sys.argv[1])
    print(*relay(total, writer_script(total)))
