"""Small programs run inside the emulator's namespaces by the WAN tests."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from sdr.backends.wan import netns_exec

UDP_ECHO_SERVER = textwrap.dedent("""
    import socket, sys
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((sys.argv[1], 9999))
    s.settimeout(10)
    for _ in range(int(sys.argv[2])):
        data, addr = s.recvfrom(65536)
        s.sendto(data, addr)
""")

# each probe carries its number, and an echo of an earlier one (later than its wait) is
# skipped, so a short wait never pairs a probe with another's echo
UDP_ECHO_CLIENT = textwrap.dedent("""
    import json, socket, sys, time
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rtts = []
    for i in range(int(sys.argv[2])):
        probe = str(i).encode().ljust(100)
        t = time.monotonic()
        s.sendto(probe, (sys.argv[1], 9999))
        while (left := t + 0.3 - time.monotonic()) > 0:
            s.settimeout(left)
            try:
                if s.recvfrom(65536)[0] == probe:
                    rtts.append(time.monotonic() - t)
                    break
            except TimeoutError:
                break
    print(json.dumps(rtts))
""")

TCP_SINK = textwrap.dedent("""
    import hashlib, socket, sys
    srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((sys.argv[1], 9998)); srv.listen(1); srv.settimeout(30)
    conn, _ = srv.accept(); h = hashlib.sha256(); n = 0
    while chunk := conn.recv(1 << 20):
        h.update(chunk); n += len(chunk)
    print(n, h.hexdigest())
""")

TCP_SOURCE = textwrap.dedent("""
    import hashlib, socket, sys, time
    data = bytes(range(256)) * (int(sys.argv[2]) // 256)
    for _ in range(50):
        try:
            c = socket.create_connection((sys.argv[1], 9998), timeout=5); break
        except OSError:
            time.sleep(0.1)
    c.sendall(data); c.close()
    print(len(data), hashlib.sha256(data).hexdigest())
""")


def spawn(namespace: str, program: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        netns_exec(namespace, sys.executable, "-c", program, *args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
