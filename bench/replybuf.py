#!/usr/bin/env python3
"""The memory a client that pipelines large reads costs rproxy.

One client pipelines N GETs of a V-byte value (issue 17: 6,000 x 100 KB),
reads nothing for a second, then reads every reply. rproxy's RSS is sampled
every 20 ms from /proc; printed: its peak, and its RSS 2 s after the last
reply. Usage: bench/replybuf.py RPROXY_PORT RPROXY_PID [N] [V]
"""
import socket, sys, threading, time

port, pid = int(sys.argv[1]), int(sys.argv[2])
n = int(sys.argv[3]) if len(sys.argv) > 3 else 6000
vlen = int(sys.argv[4]) if len(sys.argv) > 4 else 100 * 1024


def rss():
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


peak, stop = [0], [False]


def sample():
    while not stop[0]:
        peak[0] = max(peak[0], rss())
        time.sleep(0.02)


def cmd(*a):
    out = b"*%d\r\n" % len(a)
    for x in a:
        x = x if isinstance(x, bytes) else x.encode()
        out += b"$%d\r\n%s\r\n" % (len(x), x)
    return out


s = socket.create_connection(("127.0.0.1", port))
s.sendall(cmd("SET", "replybuf:v", b"x" * vlen))
assert s.recv(16) == b"+OK\r\n"
before = rss()
t = threading.Thread(target=sample)
t.start()
s.sendall(cmd("GET", "replybuf:v") * n)
time.sleep(1.0)
want = len(b"$%d\r\n" % vlen) + vlen + 2
got = 0
while got < n * want:
    d = s.recv(1 << 20)
    if not d:
        sys.exit("connection closed after %d bytes" % got)
    got += len(d)
done = time.time()
time.sleep(2.0)
after = rss()
stop[0] = True
t.join()
print("replies %d x %d bytes: rss before %.0f MB, peak %.0f MB, 2 s after %.0f MB" % (
    n, vlen, before / 2**20, peak[0] / 2**20, after / 2**20))
