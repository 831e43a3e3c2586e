"""The slowloris drill's client side: thousands of half-open connections from one address while
a good client from another address reads its activity. Run by tests/drills/slowloris.sh, which
starts the server; prints its criteria first and exits non-zero naming each one that fails.

Env: SERVER (host:port), SERVER_PID, TOKEN, WORKSPACE, DRILL_SECS, DRILL_CONNECTIONS,
PER_ADDRESS_CAP (the server's), FD_MARGIN (files the server holds besides client connections).
"""

import asyncio
import multiprocessing
import os
import sys
import time

HOST, PORT = os.environ["SERVER"].rsplit(":", 1)
PORT = int(PORT)
PID = os.environ["SERVER_PID"]
TOKEN = os.environ["TOKEN"]
WORKSPACE = os.environ["WORKSPACE"]
SECS = float(os.environ.get("DRILL_SECS", "30"))
CONNECTIONS = int(os.environ.get("DRILL_CONNECTIONS", "3000"))
CAP = int(os.environ.get("PER_ADDRESS_CAP", "256"))
MARGIN = int(os.environ.get("FD_MARGIN", "128"))
ATTACKER, GOOD = "127.0.0.1", "127.0.0.3"

CRITERIA = [
    "the good client, from another address, is answered 2xx every time (at least 5 requests a second)",
    f"open files stay bounded: the server never holds more than the per-address cap ({CAP}) plus {MARGIN} files",
    f"the attack was real: at least {CONNECTIONS} half-open connections attempted, and the server held at least half its cap of them at once",
]


def open_files():
    try:
        return len(os.listdir(f"/proc/{PID}/fd"))
    except OSError:
        return -1


class Tally:
    attempts = 0
    accepted_peak = 0
    closed_by_server = 0
    good = {}
    fds = []


async def half_open(deadline, live):
    """One slowloris connection: half a header, then a byte every 2 s until the server closes
    it or the drill ends; then it connects again."""
    while time.monotonic() < deadline:
        Tally.attempts += 1
        try:
            reader, writer = await asyncio.open_connection(HOST, PORT, local_addr=(ATTACKER, 0))
        except OSError:
            await asyncio.sleep(0.05)
            continue
        live[0] += 1
        try:
            writer.write(b"GET /readyz HTTP/1.1\r\nHost: drill\r\n")
            await writer.drain()
            while time.monotonic() < deadline:
                try:
                    data = await asyncio.wait_for(reader.read(1), timeout=2)
                    if not data:
                        Tally.closed_by_server += 1
                        await asyncio.sleep(0.5)
                        break
                except asyncio.TimeoutError:
                    writer.write(b"X")
                    await writer.drain()
        except OSError:
            Tally.closed_by_server += 1
            await asyncio.sleep(0.5)
        finally:
            live[0] -= 1
            writer.close()


def good_client(deadline, results):
    """The good client, in a process of its own so the attacker's loop cannot starve it: a
    fresh connection from another address five times a second, each with a 5 s bound."""
    import socket

    request = (
        f"GET /v1/workspaces/{WORKSPACE}/activity?limit=1 HTTP/1.1\r\nHost: drill\r\n"
        f"Authorization: Bearer {TOKEN}\r\nConnection: close\r\n\r\n"
    ).encode()
    tally = {}
    while time.time() < deadline:
        started = time.time()
        status = "error"
        try:
            with socket.create_connection((HOST, PORT), timeout=5, source_address=(GOOD, 0)) as s:
                s.sendall(request)
                line = s.makefile("rb").readline()
                status = line.split()[1].decode() if line else "closed"
        except (OSError, IndexError):
            pass
        tally[status] = tally.get(status, 0) + 1
        time.sleep(max(0.0, 0.2 - (time.time() - started)))
    results.put(tally)


async def sample(deadline, live):
    while time.monotonic() < deadline:
        Tally.fds.append(open_files())
        Tally.accepted_peak = max(Tally.accepted_peak, live[0])
        await asyncio.sleep(0.25)


async def main():
    print(f"slowloris drill: {CONNECTIONS} half-open connections from {ATTACKER} for {SECS:.0f} s")
    print("criteria (the run exits non-zero naming each one that fails):")
    for n, criterion in enumerate(CRITERIA, 1):
        print(f"  {n}. {criterion}")
    before = open_files()
    deadline = time.monotonic() + SECS
    live = [0]
    results = multiprocessing.Queue()
    good_process = multiprocessing.Process(
        target=good_client, args=(time.time() + SECS, results)
    )
    good_process.start()
    tasks = [asyncio.create_task(half_open(deadline, live)) for _ in range(CONNECTIONS)]
    tasks.append(asyncio.create_task(sample(deadline, live)))
    await asyncio.gather(*tasks)
    Tally.good = results.get(timeout=30)
    good_process.join(timeout=10)
    # `live` counts what the attacker holds open on its side, which includes connections the
    # server has closed but the attacker has not yet read the end of; the server's own open
    # files are the figure that counts.
    peak = max(Tally.fds) if Tally.fds else -1
    good = Tally.good
    served = sum(n for status, n in good.items() if status.startswith("2"))
    print(
        f"attacker: {Tally.attempts} connection attempts, {Tally.closed_by_server} closed by the "
        f"server; good client: {dict(sorted(good.items()))}; server open files: {before} before, "
        f"peak {peak}, {open_files()} after"
    )
    failures = []
    expected = SECS * 5 * 0.8
    if served != sum(good.values()) or served < expected:
        failures.append((0, f"{served} of {sum(good.values())} answered 2xx, {expected:.0f} expected"))
    if peak < 0 or peak > CAP + MARGIN:
        failures.append((1, f"peak {peak} open files"))
    held = max(0, peak - before)
    if Tally.attempts < CONNECTIONS or held < CAP // 2:
        failures.append((2, f"{Tally.attempts} attempts, {held} connections held at the peak"))
    if not failures:
        print("slowloris drill: every criterion held")
        return 0
    for n, figure in failures:
        print(f"FAILED criterion {n + 1}: {CRITERIA[n]} ({figure})")
    return 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
