"""CPU time of one small TCP send on loopback, back to back and with the reader asleep between sends.

Usage: ``python bench/loopback_send_cost.py [--sends 20000] [--gap-us 200] [--bytes 200]``

A relayed chunk is one such send to the client. A forked child reads the socket as data comes; this process
sends ``--bytes`` bytes ``--sends`` times, once with no pause and once spinning ``--gap-us`` µs between sends
(the reader has gone back to sleep, as a client between two tokens has), and prints the system CPU per
send from ``getrusage`` (user time is left out: the spin's, shared with whatever else runs, swamps it).
On a VM, waking the reader on the other vCPU is most of a spaced send's cost.
"""

import argparse
import os
import resource
import socket
import time


def per_send(sock: socket.socket, sends: int, size: int, gap: float) -> float:
    """System CPU µs per send."""
    message = b"x" * size
    before = resource.getrusage(resource.RUSAGE_SELF)
    for _ in range(sends):
        sock.send(message)
        started = time.perf_counter()
        while time.perf_counter() - started < gap:
            pass
    after = resource.getrusage(resource.RUSAGE_SELF)
    return (after.ru_stime - before.ru_stime) / sends * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--sends", type=int, default=20000)
    parser.add_argument("--gap-us", type=float, default=200.0)
    parser.add_argument("--bytes", type=int, default=200)
    args = parser.parse_args()
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        if os.fork() == 0:
            with socket.create_connection(listener.getsockname()) as reader:
                while reader.recv(65536):
                    pass
            os._exit(0)
        sock, _ = listener.accept()
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for gap in (0.0, args.gap_us / 1e6):
        system = per_send(sock, args.sends, args.bytes, gap)
        print(f"{args.bytes} B sends {gap * 1e6:.0f} µs apart: {system:.1f} µs of system CPU per send")
    sock.close()
    os.wait()


if __name__ == "__main__":
    main()
