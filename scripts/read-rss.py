#!/usr/bin/env python3
"""read-rss.py: peak RSS of a queen-node process serving large read answers
(issue 21 item 1; the figures are in docs/operations.md, "Limits").

    go run ./cmd/pgtemp -- python3 scripts/read-rss.py bin/queen-node [VALUES] [VALUE_BYTES]

Stores VALUES (default 24) stream state values and as many dead letters of
VALUE_BYTES (default 8,000,000) each, through the HTTP API, on the database of
QUEEN_PG_URL. Then, for each read below, it starts a fresh node process on that
database (so VmHWM, the peak resident set, counts only that read), waits for
it to settle, sends the read from 3 clients at once, and prints the process's
VmRSS before and VmHWM after, with the answers' status and size:

  state-all    POST /streams/v1/state/get, every value
  state-2      POST /streams/v1/state/get, key_prefix matching two values
  dlq          GET  /api/v1/dlq?queue=...&limit=10000
"""
import concurrent.futures
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(base, method, path, body=None):
    data = None
    if body is not None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=600) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def must(status, body, want, what):
    if status != want:
        sys.exit(f"{what}: status {status}, want {want}: {body[:300]!r}")
    return json.loads(body) if body else None


class Node:
    def __init__(self, binary):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        env = dict(os.environ, QUEEN_HTTP_ADDR=f"127.0.0.1:{self.port}", QUEEN_MESH="0",
                   QUEEN_RETENTION_INTERVAL_MS="0", QUEEN_NODE_NAME="rss")
        self.p = subprocess.Popen([binary], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                if call(self.base, "GET", "/health")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        sys.exit("node did not answer /health")

    def status(self, key):
        with open(f"/proc/{self.p.pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
        return 0

    def stop(self):
        self.p.terminate()
        self.p.wait(timeout=30)


def blob(tag, size):
    return b'{"tag":"' + tag.encode() + b'","blob":"' + b"x" * (size - 30) + b'"}'


def setup(binary, values, size):
    n = Node(binary)
    b = n.base
    must(*call(b, "POST", "/api/v1/configure", {"queue": "rss", "options": {"retryLimit": 0}}), 200, "configure")
    pid = None
    for i in range(values):
        body = b'{"items":[{"queue":"rss","partition":"p","transactionId":"m%d","payload":' % i + blob(f"m{i}", size) + b"}]}"
        pid = must(*call(b, "POST", "/api/v1/push", body), 201, "push")[0]["partitionId"]
    qid = must(*call(b, "POST", "/streams/v1/queries", {"name": "rss", "source_queue": "rss", "config_hash": "h", "reset": True}), 200, "register")["query_id"]
    for i in range(values):
        key = "g%02d/%d" % (i // 2, i % 2)  # two values per key prefix
        body = (b'{"query_id":"%s","partition_id":"%s","consumer_group":"streams.rss","ack":null,"release_lease":true,"push_items":[],"state_ops":[{"type":"upsert","key":"%s","value":'
                % (qid.encode(), pid.encode(), key.encode()) + blob(key, size) + b"}]}")
        must(*call(b, "POST", "/streams/v1/cycle", body), 200, "cycle")
    failed = 0
    while failed < values:
        st, body = call(b, "GET", "/api/v1/pop/queue/rss/partition/p?batch=1&wait=false&consumerGroup=g")
        msgs = must(st, body, 200, "pop")["messages"]
        acks = [{"transactionId": m["transactionId"], "partitionId": pid, "status": "failed", "leaseId": m["leaseId"],
                 "consumerGroup": "g", "error": "boom"} for m in msgs]
        must(*call(b, "POST", "/api/v1/ack/batch", {"acknowledgments": acks}), 200, "ack")
        failed += len(acks)
    n.stop()
    return qid, pid


def measure(binary, name, method, path, body):
    n = Node(binary)
    time.sleep(2)  # let start-up allocations settle
    before = n.status("VmRSS")
    with concurrent.futures.ThreadPoolExecutor(3) as ex:
        res = list(ex.map(lambda _: call(n.base, method, path, body), range(3)))
    hwm = n.status("VmHWM")
    n.stop()
    answers = ", ".join(f"{st} {len(b):,} B" for st, b in res)
    print(f"{name:10} RSS before {before / 2**20:7.1f} MiB  peak {hwm / 2**20:8.1f} MiB  answers: {answers}", flush=True)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    binary = sys.argv[1]
    values = int(sys.argv[2]) if len(sys.argv) > 2 else 24
    size = int(sys.argv[3]) if len(sys.argv) > 3 else 8_000_000
    qid, pid = setup(binary, values, size)
    print(f"{binary}: {values} state values and {values} dead letters of {size:,} bytes", flush=True)
    measure(binary, "state-all", "POST", "/streams/v1/state/get", {"query_id": qid, "partition_id": pid, "keys": None})
    measure(binary, "state-2", "POST", "/streams/v1/state/get", {"query_id": qid, "partition_id": pid, "keys": [], "key_prefix": "g00/"})
    measure(binary, "dlq", "GET", "/api/v1/dlq?queue=rss&limit=10000", None)


if __name__ == "__main__":
    main()
