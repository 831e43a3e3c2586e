"""The slow-reader drill's client side: readers of one audit stream that keep up and that stay
far behind (a small receive window, a slow drain, a stall), a user disabled mid-replay, events
written after it. Run by tests/drills/slow-reader.sh, which starts the server and makes the
member user and its token; prints the criteria first and exits non-zero naming each failure.

Env: SERVER (host:port), ADMIN_TOKEN, READER_TOKEN, WORKSPACE, POOL, DISABLE (a command line that
disables the reader's user), DRILL_EVENTS (the log before the cut-off), DRILL_AFTER (events
written after it), DRILL_READERS (which readers: names from READERS, comma-separated),
DRILL_CUT_AT (seconds after the readers open).
"""

import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time

HOST, PORT = os.environ["SERVER"].rsplit(":", 1)
PORT = int(PORT)
ADMIN = os.environ["ADMIN_TOKEN"]
READER = os.environ["READER_TOKEN"]
WORKSPACE = os.environ["WORKSPACE"]
POOL = os.environ["POOL"]
DISABLE = os.environ["DISABLE"]
EVENTS = int(os.environ.get("DRILL_EVENTS", "20000"))
AFTER = int(os.environ.get("DRILL_AFTER", "100"))
CUT_AT = float(os.environ.get("DRILL_CUT_AT", "2"))
RECHECK = 1.0  # service/audit.rs RECHECK
# What the server may hold for a stream outside the kernel's socket buffers: hyper's write buffer
# (its default max_buf_size, 8 KB + 100 x 4 KB = 408 KB, measured full: a stalled reader got
# ~420 KB more than its socket held) and the replay page the stream holds.
SERVER_SLACK = 512 * 1024
# How long after RECHECK every stream's check has surely run (its two reads and a decision).
CHECK_MARGIN = 0.3

# name: (receive buffer or None for the default, drain rate in bytes/s or None for as fast as
# possible, seconds to read nothing after the cut-off)
READERS = {
    "fast": (None, None, 0.0),
    "window-8k-80kBps": (8192, 80 * 1024, 0.0),
    "window-8k-1MBps": (8192, 1024 * 1024, 0.0),
    "stalled-8k": (8192, None, 2.0),
}
CHOSEN = [n for n in os.environ.get("DRILL_READERS", ",".join(READERS)).split(",") if n]


def request(method, path, body=None):
    conn = http.client.HTTPConnection(HOST, PORT, timeout=10)
    headers = {"authorization": f"Bearer {ADMIN}"}
    if body is not None:
        headers["content-type"] = "application/json"
    conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
    response = conn.getresponse()
    data = response.read()
    conn.close()
    if response.status >= 300:
        raise RuntimeError(f"{method} {path}: {response.status} {data[:200]!r}")
    return json.loads(data) if data else None


def head():
    page = request("GET", f"/v1/workspaces/{WORKSPACE}/activity?limit=1")
    return page["items"][0]["sequence"] if page["items"] else 0


def write(count, threads=16):
    """Writes `count` events (runner commands) with `threads` keep-alive connections."""
    left = [count]
    lock = threading.Lock()

    def worker():
        conn = http.client.HTTPConnection(HOST, PORT, timeout=10)
        body = json.dumps({"poolId": POOL, "command": "echo"})
        headers = {"authorization": f"Bearer {ADMIN}", "content-type": "application/json"}
        while True:
            with lock:
                if left[0] == 0:
                    break
                left[0] -= 1
            conn.request("POST", f"/v1/workspaces/{WORKSPACE}/runner-commands", body=body, headers=headers)
            response = conn.getresponse()
            response.read()
            if response.status >= 300:
                raise RuntimeError(f"submit: {response.status}")
        conn.close()

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()


def queues(local_port):
    """(the server's send queue to this reader, the reader's unread receive queue), bytes, from
    /proc/net/tcp: on loopback both ends are on this host."""
    send = recv = 0
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            local, remote, tx_rx = fields[1], fields[2], fields[4]
            lport, rport = int(local.split(":")[1], 16), int(remote.split(":")[1], 16)
            tx, rx = (int(x, 16) for x in tx_rx.split(":"))
            if lport == PORT and rport == local_port:
                send = tx
            elif lport == local_port and rport == PORT:
                recv = rx
    return send, recv


class Reader(threading.Thread):
    def __init__(self, name, rcvbuf, rate, stall):
        super().__init__(daemon=True)
        self.name_, self.rcvbuf, self.rate, self.stall = name, rcvbuf, rate, stall
        self.events = []  # (sequence, arrival time)
        self.comment = None
        self.ended_at = None
        self.bytes = 0
        self.bytes_at_cut = None
        self.cut_at = None  # set by the drill: read nothing until cut_at + stall
        self.error = None
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.connect((HOST, PORT))
        self.port = self.sock.getsockname()[1]
        self.sock.sendall(
            (
                f"GET /v1/workspaces/{WORKSPACE}/audit/stream?after=0 HTTP/1.1\r\n"
                f"Host: {HOST}\r\nAuthorization: Bearer {READER}\r\nAccept: text/event-stream\r\n\r\n"
            ).encode()
        )

    def run(self):
        try:
            self.read()
        except Exception as e:  # reported as a failed criterion
            self.error = repr(e)

    def read(self):
        raw, body, started = b"", b"", time.monotonic()
        chunked = None
        sse = b""
        while True:
            # A stalled reader reads nothing from the start until `stall` after the cut-off.
            if self.stall and (self.cut_at is None or time.monotonic() < self.cut_at + self.stall):
                time.sleep(0.01)
                continue
            if self.rate:
                due = started + self.bytes / self.rate
                if due > time.monotonic():
                    time.sleep(due - time.monotonic())
            data = self.sock.recv(8192 if self.rcvbuf else 262144)
            if not data:
                break
            self.bytes += len(data)
            raw += data
            if chunked is None:
                if b"\r\n\r\n" not in raw:
                    continue
                header, raw = raw.split(b"\r\n\r\n", 1)
                status = header.split(b"\r\n", 1)[0]
                if b" 200 " not in status:
                    raise RuntimeError(f"stream refused: {status!r}")
                chunked = b"transfer-encoding: chunked" in header.lower()
            if chunked:
                # De-chunk what is complete.
                done = False
                while True:
                    if b"\r\n" not in raw:
                        break
                    size_line, rest = raw.split(b"\r\n", 1)
                    size = int(size_line.split(b";")[0], 16)
                    if size == 0:
                        done = True
                        break
                    if len(rest) < size + 2:
                        break
                    sse += rest[:size]
                    raw = rest[size + 2 :]
            else:
                sse, raw, done = sse + raw, b"", False
            now = time.monotonic()
            while b"\n\n" in sse:
                block, sse = sse.split(b"\n\n", 1)
                for line in block.decode().split("\n"):
                    if line.startswith("id: "):
                        self.events.append((int(line[4:]), now))
                    elif line.startswith(": "):
                        self.comment = line[2:]
            if done:
                break
        self.ended_at = time.monotonic()
        self.sock.close()


def main():
    print("criteria, for every reader:")
    print("  1. it ends with ': access revoked' (not max age, not still open)")
    print("  2. it receives 0 events with a sequence above the head at the cut-off")
    print(f"  3. what it receives from the re-check interval ({RECHECK:.0f} s, +{CHECK_MARGIN} s) after the")
    print("     cut-off on was already in its socket then (the server's send queue and its own")
    print(f"     receive queue, from /proc/net/tcp), plus {SERVER_SLACK // 1024} KB for the server's own buffers")
    print("  4. it ends by then (or the end of its stall) plus the time to read 3's bytes at its")
    print("     drain rate, plus 1 s")
    print("  5. a slow reader is cut off mid-replay: before it was sent the whole log it opened on")
    t0 = time.monotonic()
    write(EVENTS)
    opened_at_head = head()
    print(f"wrote {EVENTS} events in {time.monotonic() - t0:.1f} s; head {opened_at_head}")

    readers = [Reader(n, *READERS[n]) for n in CHOSEN]
    for r in readers:
        r.start()
    opened = time.monotonic()
    stop = threading.Event()

    def keep_writing():
        while not stop.is_set():
            write(5, threads=1)
            time.sleep(0.05)

    writer = threading.Thread(target=keep_writing, daemon=True)
    writer.start()
    time.sleep(CUT_AT)
    # The cut-off: no write in flight, so the head read after it is exactly its boundary.
    stop.set()
    writer.join()
    subprocess.run(DISABLE, shell=True, check=True, stdout=subprocess.DEVNULL)
    cut = time.monotonic()
    cut_off = head()
    for r in readers:
        r.bytes_at_cut = r.bytes
        r.cut_at = cut
    print(f"user disabled {cut - opened:.2f} s after the readers opened; head then {cut_off}")
    # Keep writing after the cut-off, while the re-check interval runs out.
    after = threading.Thread(target=write, args=(AFTER, 4))
    after.start()
    # By then every stream has had its check (the server ends it within RECHECK): what a
    # reader still receives must already be in its socket.
    time.sleep(RECHECK + CHECK_MARGIN)
    checked = time.monotonic()
    held = {}
    for r in readers:
        held[r.name_] = (queues(r.port), r.bytes)
    after.join()
    print(f"wrote {AFTER} events after the cut-off; head {head()}")

    failed = []
    for r in readers:
        rcvbuf, rate, stall = READERS[r.name_]
        (send_q, recv_q), bytes_then = held[r.name_]
        bound_bytes = send_q + recv_q + SERVER_SLACK
        drain = bound_bytes / rate if rate else 1.0
        bound = max(checked, cut + stall) - cut + drain + 1.0
        r.join(timeout=max(0.0, cut + bound + 5 - time.monotonic()))
        before = [s for s, at in r.events if at <= cut]
        late = [s for s, _ in r.events if s > cut_off]
        last_before = before[-1] if before else 0
        last = r.events[-1][0] if r.events else 0
        took = (r.ended_at - cut) if r.ended_at else None
        later = r.bytes - bytes_then
        print(
            f"reader {r.name_}: at the cut-off at sequence {last_before} of {cut_off}, last received "
            f"{last}; events received {len(r.events)}, {len(r.events) - len(before)} after the "
            f"cut-off, {len(late)} committed after it; "
            f"{'ended ' + format(took, '.2f') + ' s after the cut-off' if took is not None else 'still open'} "
            f"(bound {bound:.1f} s) with {r.comment!r}; bytes after the cut-off {r.bytes - r.bytes_at_cut}, "
            f"after the re-check interval {later} (its socket held {send_q} + {recv_q} then)"
        )
        if r.error:
            failed.append(f"{r.name_}: reading failed: {r.error}")
        if r.comment != "access revoked" or r.ended_at is None:
            failed.append(f"{r.name_}: criterion 1 (ended with {r.comment!r}, open: {r.ended_at is None})")
        if late:
            failed.append(f"{r.name_}: criterion 2 ({len(late)} events committed after the cut-off, first {late[:5]})")
        if later > bound_bytes:
            failed.append(
                f"{r.name_}: criterion 3 ({later} bytes after the re-check interval, more than its "
                f"socket held then plus {SERVER_SLACK}: {bound_bytes})"
            )
        if took is None or took > bound:
            failed.append(f"{r.name_}: criterion 4 (ended {took} s after the cut-off, bound {bound:.1f} s)")
        # Also the witness that the drill is real: the reader was far behind at the cut-off.
        if r.name_ != "fast" and last >= opened_at_head:
            failed.append(
                f"{r.name_}: criterion 5 (it was sent the whole log it opened on, up to "
                f"{opened_at_head}; if it ended at once, the log fits its socket: more DRILL_EVENTS)"
            )
    for f in failed:
        print(f"FAILED: {f}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
