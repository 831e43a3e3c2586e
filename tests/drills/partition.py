"""The partition drill's driver: a TCP proxy between a release server and Postgres, load through
the server, and the network made silent twice. Run by tests/drills/partition.sh, which creates
the database and its tenant; prints its criteria first and exits non-zero naming each that fails.

Phases: warm-up; every connection stalled (bytes held, nothing closed) for STALL_SECS, then
healed; the connections open at that moment stranded for good (as when a NAT or a firewall
forgets them) while new ones pass, for STRAND_SECS. Throughout, keyed writers issue tokens
(each key retried until it is answered 2xx), unkeyed writers issue tokens (their batches), and
readers read the activity.

Env: SERVER_BIN, PORT, PROXY_PORT, PG_TARGET (host:port), DATABASE_URL (direct, for the checks),
SERVER_DATABASE_URL (through the proxy), TOKEN, ORG, WS, LEASE_MS, STALL_SECS, STRAND_SECS,
DRILL_SERVER_ENV.
"""

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor

PORT = int(os.environ["PORT"])
PROXY_PORT = int(os.environ["PROXY_PORT"])
PG_HOST, PG_PORT = os.environ["PG_TARGET"].rsplit(":", 1)
TOKEN, ORG, WS = os.environ["TOKEN"], os.environ["ORG"], os.environ["WS"]
LEASE = int(os.environ.get("LEASE_MS", "6000")) / 1000
STALL_SECS = float(os.environ.get("STALL_SECS", "8"))
STRAND_SECS = float(os.environ.get("STRAND_SECS", "30"))
BASE = f"http://127.0.0.1:{PORT}"
# The server's bounds: a write is stopped at two thirds of the lease, a read at the statement
# timeout (5 s) plus 1 s; the answer may take a little longer to be written.
ANSWER_BOUND = max(LEASE * 2 / 3, 6.0) + 2.0
CLIENT_TIMEOUT = 30.0
RECOVERY_BOUND = 30.0

CRITERIA = [
    f"bounded: every request is answered within {ANSWER_BOUND:.0f} s (the write and read deadlines plus 2 s); none waits out the client's {CLIENT_TIMEOUT:.0f} s",
    "honest: every answer is 2xx, 409 idempotency_in_progress or 503 unavailable, and every 409 and 503 carries retry-after; no 500",
    f"recovery: writes are answered 2xx again within 5 s of the heal and within {RECOVERY_BOUND:.0f} s of the strand, with no restart",
    "exactly once: every key ends answered 2xx, and each key's token exists exactly once; every unkeyed token answered 2xx exists",
    "the faults were real: the stall and the strand each caught writes in flight (answered 503 or 409)",
]


# --- the proxy -----------------------------------------------------------------------------

class Net:
    stall_all = False
    strand_before = 0
    next_conn = 0


async def pump(reader, writer, conn):
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            while Net.stall_all or conn < Net.strand_before:
                await asyncio.sleep(0.05)
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        try:
            writer.close()
        except Exception:
            pass


async def accept(client_reader, client_writer):
    conn = Net.next_conn
    Net.next_conn += 1
    try:
        pg_reader, pg_writer = await asyncio.open_connection(PG_HOST, int(PG_PORT))
    except OSError:
        client_writer.close()
        return
    await asyncio.gather(pump(client_reader, pg_writer, conn), pump(pg_reader, client_writer, conn))


def run_proxy(ready):
    async def main():
        server = await asyncio.start_server(accept, "127.0.0.1", PROXY_PORT)
        ready.set()
        async with server:
            await server.serve_forever()

    asyncio.run(main())


# --- the load ------------------------------------------------------------------------------

class Tally:
    lock = threading.Lock()
    answers = []  # (phase, kind, status, seconds, has_retry_after, code)
    keyed_done = {}  # key -> answered 2xx
    unkeyed_ok = []  # names answered 2xx
    unkeyed_503 = []  # names answered 503 (outcome unknown)
    write_ok = []  # (kind, started, answered) of 2xx writes, monotonic


PHASE = ["warm"]
STOP = threading.Event()


def request(method, path, body=None, key=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(BASE + path, data=data, method=method)
    req.add_header("authorization", f"Bearer {TOKEN}")
    if data is not None:
        req.add_header("content-type", "application/json")
    if key:
        req.add_header("idempotency-key", key)
    started = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=CLIENT_TIMEOUT) as resp:
            resp.read()
            status, headers, payload = resp.status, resp.headers, b""
    except urllib.error.HTTPError as e:
        status, headers, payload = e.code, e.headers, e.read()
    except Exception:
        status, headers, payload = 0, {}, b""
    took = time.monotonic() - started
    code = ""
    if payload:
        try:
            code = json.loads(payload).get("error", {}).get("code", "")
        except ValueError:
            code = "?"
    return status, took, "retry-after" in {k.lower() for k in headers.keys()}, code


def note(kind, status, took, retry_after, code):
    now = time.monotonic()
    with Tally.lock:
        Tally.answers.append((PHASE[0], kind, status, took, retry_after, code))
        if 200 <= status < 300 and kind != "read":
            Tally.write_ok.append((kind, now - took, now))


def issuance(name):
    return {"name": name, "scopes": ["activity:read"], "organisationId": ORG, "workspaceIds": [WS]}


def keyed_writer():
    while not STOP.is_set():
        key = f"part-{uuid.uuid4().hex}"
        Tally.keyed_done[key] = False
        # A key is retried until it is answered 2xx, even after the load stops.
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            status, took, ra, code = request("POST", "/v1/personal-access-tokens", issuance(key), key)
            note("keyed", status, took, ra, code)
            if 200 <= status < 300:
                Tally.keyed_done[key] = True
                break
            time.sleep(0.5)


def unkeyed_writer():
    while not STOP.is_set():
        name = f"unkeyed-{uuid.uuid4().hex}"
        status, took, ra, code = request("POST", "/v1/personal-access-tokens", issuance(name))
        note("unkeyed", status, took, ra, code)
        with Tally.lock:
            if 200 <= status < 300:
                Tally.unkeyed_ok.append(name)
            elif status == 503:
                Tally.unkeyed_503.append(name)
        if status != 200:
            time.sleep(0.5)


def reader():
    while not STOP.is_set():
        status, took, ra, code = request("GET", f"/v1/workspaces/{WS}/activity?limit=10")
        note("read", status, took, ra, code)
        if status != 200:
            time.sleep(0.5)


def psql(sql):
    out = subprocess.run(["psql", os.environ["DATABASE_URL"], "-At", "-c", sql], check=True,
                         capture_output=True, text=True).stdout
    return out.strip()


def main():
    print("# partition drill: a release server on Postgres through a proxy; "
          f"stall {STALL_SECS:.0f} s, then strand for {STRAND_SECS:.0f} s; lease {LEASE:.0f} s")
    print("criteria:")
    for i, c in enumerate(CRITERIA, 1):
        print(f"  {i}. {c}")
    print(flush=True)

    ready = threading.Event()
    threading.Thread(target=run_proxy, args=(ready,), daemon=True).start()
    ready.wait(5)
    env = dict(os.environ, DATABASE_URL=os.environ["SERVER_DATABASE_URL"],
               CP_IDEMPOTENCY_LEASE_MS=str(int(LEASE * 1000)))
    # DRILL_SERVER_ENV="K=V ...": the server's settings changed behind the drill's back (to see
    # it fail), e.g. CP_IDEMPOTENCY_LEASE_MS=600000 for writes with no deadline to speak of.
    env.update(kv.split("=", 1) for kv in os.environ.get("DRILL_SERVER_ENV", "").split())
    log = open(os.environ.get("SERVER_LOG", "/dev/null"), "w")
    server = subprocess.Popen([os.environ["SERVER_BIN"], "--listen", f"127.0.0.1:{PORT}",
                               "--log-format", "json"], env=env, stdout=log, stderr=log)
    try:
        return drill(server)
    finally:
        server.kill()
        server.wait()


def drill(server):
    for _ in range(100):
        try:
            urllib.request.urlopen(BASE + "/readyz", timeout=2).read()
            break
        except Exception:
            if server.poll() is not None:
                print("the server exited before it was ready", file=sys.stderr)
                return 2
            time.sleep(0.2)
    pool = ThreadPoolExecutor(12)
    workers = [pool.submit(f) for f in [keyed_writer] * 4 + [unkeyed_writer] * 4 + [reader] * 4]

    time.sleep(3)
    PHASE[0] = "stall"
    stall_at = time.monotonic()
    Net.stall_all = True
    time.sleep(STALL_SECS)
    PHASE[0] = "healed"
    Net.stall_all = False
    healed_at = time.monotonic()
    time.sleep(6)
    PHASE[0] = "strand"
    Net.strand_before = Net.next_conn
    strand_at = time.monotonic()
    time.sleep(STRAND_SECS)
    PHASE[0] = "end"
    STOP.set()
    for w in workers:
        w.result()
    end_at = time.monotonic()

    def recovered(t):
        # Seconds from t until both kinds of write, sent after t, were answered 2xx.
        firsts = [min((a for k, s, a in Tally.write_ok if k == kind and s > t), default=None)
                  for kind in ("keyed", "unkeyed")]
        print(f"  first 2xx keyed and unkeyed writes sent after {t - stall_at + 3:.1f} s: at "
              + ", ".join("never" if f is None else f"{f - stall_at + 3:.1f} s" for f in firsts))
        return None if None in firsts else max(firsts) - t

    answers = Tally.answers
    worst = max(a[3] for a in answers)
    by_status = {}
    for a in answers:
        by_status[a[2]] = by_status.get(a[2], 0) + 1
    dishonest = [a for a in answers if not (200 <= a[2] < 300 or (a[2] == 409 and a[5] == "idempotency_in_progress")
                                           or (a[2] == 503 and a[5] == "unavailable"))]
    no_retry_after = [a for a in answers if a[2] in (409, 503) and not a[4]]
    heal_recovery = recovered(healed_at)
    strand_recovery = recovered(strand_at)
    keys = list(Tally.keyed_done)
    unanswered = [k for k, ok in Tally.keyed_done.items() if not ok]
    counts = {}
    rows = psql("SELECT name, count(*) FROM tokens WHERE name LIKE 'part-%' GROUP BY name")
    for line in rows.splitlines():
        name, n = line.split("|")
        counts[name] = int(n)
    wrong = [k for k in keys if counts.get(k, 0) != 1]
    ok_names = Tally.unkeyed_ok
    present = set()
    if ok_names:
        rows = psql("SELECT name FROM tokens WHERE name LIKE 'unkeyed-%'")
        present = set(rows.splitlines())
    lost = [n for n in ok_names if n not in present]
    landed_503 = [n for n in Tally.unkeyed_503 if n in present]
    caught = {p: sum(1 for a in answers if a[0] == p and a[1] != "read" and a[2] in (409, 503))
              for p in ("stall", "strand")}

    print(f"answers: {len(answers)} in {end_at - stall_at + 3:.0f} s; by status {dict(sorted(by_status.items()))}")
    for p in ("warm", "stall", "healed", "strand", "end"):
        xs = [a[3] for a in answers if a[0] == p]
        if xs:
            xs.sort()
            print(f"  {p}: {len(xs)} answers, p50 {xs[len(xs) // 2] * 1000:.0f} ms, max {xs[-1] * 1000:.0f} ms")
    print(f"slowest answer: {worst:.2f} s")
    def secs(x):
        return "never" if x is None else f"{x:.2f} s"

    print(f"keyed and unkeyed writes 2xx again: {secs(heal_recovery)} after the heal, {secs(strand_recovery)} after the strand")
    print(f"keys: {len(keys)}, answered 2xx {len(keys) - len(unanswered)}, tokens not exactly once {len(wrong)}")
    print(f"unkeyed: {len(ok_names)} answered 2xx, {len(lost)} of them missing; {len(Tally.unkeyed_503)} answered 503, "
          f"{len(landed_503)} of those landed (outcome unknown, as the 503 says)")
    print(f"writes caught in flight: stall {caught['stall']}, strand {caught['strand']}")

    failed = []
    if worst > ANSWER_BOUND:
        failed.append((1, f"an answer took {worst:.2f} s"))
    if dishonest:
        failed.append((2, f"{len(dishonest)} answers outside the list, e.g. {dishonest[0][:3]} {dishonest[0][5]!r}"))
    if no_retry_after:
        failed.append((2, f"{len(no_retry_after)} answers 409/503 without retry-after"))
    if heal_recovery is None or heal_recovery > 5:
        failed.append((3, f"no 2xx write within 5 s of the heal ({heal_recovery})"))
    if strand_recovery is None or strand_recovery > RECOVERY_BOUND:
        failed.append((3, f"no 2xx write within {RECOVERY_BOUND:.0f} s of the strand"))
    if unanswered or wrong or lost:
        failed.append((4, f"{len(unanswered)} keys never answered 2xx, {len(wrong)} keys whose token is not there exactly once, {len(lost)} unkeyed 2xx tokens missing"))
    if caught["stall"] == 0 or caught["strand"] == 0:
        failed.append((5, f"writes caught: {caught}"))
    for n, why in failed:
        print(f"FAILED criterion {n}: {why}", file=sys.stderr)
    if not failed:
        print("partition drill: every criterion met")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
