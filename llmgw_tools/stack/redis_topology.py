"""The three Redis topologies on loopback ports, with Debian's ``redis-server`` and ``redis-cli``:

- ``single``: one ephemeral redis-server;
- ``sentinel``: a master, one replica, three ``redis-server --sentinel`` (quorum 2, a master down for
  1 s is failed over);
- ``cluster``: six nodes made a cluster by ``redis-cli --cluster create … --cluster-replicas 1``
  (three masters, each with a replica).

:func:`start` returns a :class:`Topology` with the URL the gateways, supervisor and sidecar take
(``redis://…``, ``redis+sentinel://h:p,h:p,h:p/llmgw``, ``redis+cluster://h:p,…``); it waits for the
topology to serve by polling with a deadline and stops what it started when that fails. Synchronous (plain
subprocesses): the test harness starts one per test run, ``llmgw-stack --redis`` one per stack.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from llmgw_tools.stack.ports import HOST, bindable, free_port
from llmgw_tools.stack.redis import redis_server_argv

KINDS = ("single", "sentinel", "cluster")
SERVICE = "llmgw"


# A master sends a new replica its first full copy at once, not after Redis's default 5 s wait for more
# replicas to share the transfer: each Sentinel and Cluster topology serves 5 s sooner, revived nodes too.
NO_SYNC_DELAY = ("--repl-diskless-sync-delay", "0")
BUS_OFFSET = 10_000  # a cluster node's bus port is its port + 10000
CLUSTER_PORTS = (12_000, 22_000)  # node and bus ports both below the kernel's ephemeral range


def cluster_port() -> int:
    """A free port whose bus port (+10000) is free too, both outside the ephemeral range."""
    for _ in range(500):
        port = random.randrange(*CLUSTER_PORTS)
        if bindable(port) and bindable(port + BUS_OFFSET):
            return port
    raise RuntimeError("no free port pair for a cluster node")


def poll(check: Callable[[], bool], deadline_s: float, what: str) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if check():
            return
        time.sleep(0.05)
    raise TimeoutError(f"{what} not ready within {deadline_s:g} s")


def cli(port: int, *args: str) -> str:
    """``redis-cli -p port args…``'s output ('' when it could not connect)."""
    done = subprocess.run(
        ["redis-cli", "-h", HOST, "-p", str(port), *args], capture_output=True, text=True, timeout=10
    )
    return done.stdout if done.returncode == 0 else ""


@dataclass
class Node:
    port: int
    popen: subprocess.Popen[bytes]
    role: str
    argv: list[str] = field(default_factory=list)
    log: Path | None = None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the node's process group; one that outlives a SIGTERM by 5 s gets SIGKILL."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, sig)
        try:
            self.popen.wait(5)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(5)


@dataclass
class Topology:
    kind: str
    url: str
    nodes: list[Node] = field(default_factory=list)
    binary: str = "redis-server"  # or another server that takes its flags (the tests' valkey-server)

    @property
    def data_ports(self) -> list[int]:
        return [n.port for n in self.nodes if n.role != "sentinel"]

    def master_port(self, key: str = "") -> int:
        """The port of the master that holds ``key`` now (single and Sentinel: the one master)."""
        if self.kind == "sentinel":
            sentinel = next(n.port for n in self.nodes if n.role == "sentinel" and n.popen.poll() is None)
            return int(cli(sentinel, "SENTINEL", "get-master-addr-by-name", SERVICE).split()[1])
        if self.kind == "single":
            return self.nodes[0].port
        live = next(n.port for n in self.nodes if n.popen.poll() is None and serving(n.port))
        slot = int(cli(live, "CLUSTER", "KEYSLOT", key).strip())
        for line in cli(live, "CLUSTER", "NODES").splitlines():
            parts = line.split()
            if "master" not in parts[2] or "fail" in parts[2]:
                continue
            for span in parts[8:]:
                lo, _, hi = span.partition("-")
                if lo.isdigit() and int(lo) <= slot <= int(hi or lo):
                    return int(parts[1].split("@")[0].rsplit(":", 1)[1])
        raise LookupError(f"no master serves slot {slot}")

    def node(self, port: int) -> Node:
        return next(n for n in self.nodes if n.port == port)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Every live node frozen (SIGSTOP to its group) while the block runs, then continued (SIGCONT):
        a whole-topology outage whose connections stay open, the way a stalled host looks."""
        live = [n for n in self.nodes if n.popen.poll() is None]
        for n in live:
            os.killpg(n.popen.pid, signal.SIGSTOP)
        try:
            yield
        finally:
            for n in live:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(n.popen.pid, signal.SIGCONT)

    def settled(self) -> bool:
        """Every live node answers (a cluster's: with ``cluster_state:ok``)."""
        live = [n for n in self.nodes if n.popen.poll() is None]
        if self.kind != "cluster":
            return all(serving(n.port) for n in live)
        return all("cluster_state:ok" in cli(n.port, "CLUSTER", "INFO") for n in live)

    def revive(self) -> None:
        """Restart every dead data node on its port and files (a Sentinel topology's as a replica of the
        master now), then wait until each serves and is in sync: a test that killed a master leaves the
        next one a whole topology (a Sentinel failover needs a replica to promote)."""
        dead = [n for n in self.nodes if n.role != "sentinel" and n.popen.poll() is not None]
        for n in dead:
            argv = n.argv
            if self.kind == "sentinel":
                argv = [*without_replicaof(argv), "--replicaof", HOST, str(self.master_port())]
            assert n.log is not None, "a node spawn() started"
            n.popen = spawn(argv, n.log, n.role, n.port).popen
        poll(self.settled, 30, "revived nodes serving")
        poll(lambda: all(synced(n.port) for n in dead), 30, "revived nodes in sync")

    def stop(self) -> None:
        """Stop every node (a dead node's group too: a child it left behind). Safe to call twice."""
        for node in self.nodes:
            node.kill(signal.SIGTERM if node.popen.poll() is None else signal.SIGKILL)


def spawn(argv: list[str], log: Path, role: str, port: int) -> Node:
    with log.open("ab") as out:
        popen = subprocess.Popen(
            argv, stdout=out, stderr=out, stdin=subprocess.DEVNULL, start_new_session=True, cwd=log.parent
        )
    return Node(port, popen, role, argv, log)


def without_replicaof(argv: list[str]) -> list[str]:
    """``argv`` less its ``--replicaof host port``."""
    if "--replicaof" not in argv:
        return argv
    at = argv.index("--replicaof")
    return argv[:at] + argv[at + 3 :]


def data_node(tmp: Path, topo: Topology, role: str, extra: list[str]) -> Node:
    port = cluster_port() if role == "cluster" else free_port()
    d = tmp / f"{role}-{port}"
    d.mkdir(parents=True)
    return spawn([*redis_server_argv(topo.binary, port, d), *extra], d / "redis.log", role, port)


def serving(port: int) -> bool:
    return cli(port, "PING").strip() == "PONG"


def start_single(tmp: Path, topo: Topology) -> None:
    node = data_node(tmp, topo, "single", [])
    topo.nodes.append(node)
    topo.url = f"redis://{HOST}:{node.port}/0"
    poll(lambda: serving(node.port), 10, "redis-server")


def start_sentinel(tmp: Path, topo: Topology) -> None:
    master = data_node(tmp, topo, "master", [*NO_SYNC_DELAY])
    topo.nodes.append(master)
    replica = data_node(tmp, topo, "replica", [*NO_SYNC_DELAY, "--replicaof", HOST, str(master.port)])
    topo.nodes.append(replica)
    poll(lambda: "master_link_status:up" in cli(replica.port, "INFO", "replication"), 15, "replica link")
    for _ in range(3):
        port = free_port()
        d = tmp / f"sentinel-{port}"
        d.mkdir(parents=True)
        conf = d / "sentinel.conf"
        conf.write_text(
            f"port {port}\nbind {HOST}\ndir {d}\nsentinel monitor {SERVICE} {HOST} {master.port} 2\n"
            f"sentinel down-after-milliseconds {SERVICE} 1000\nsentinel failover-timeout {SERVICE} 5000\n"
        )
        topo.nodes.append(spawn([topo.binary, str(conf), "--sentinel"], d / "sentinel.log", "sentinel", port))
    sentinels = [n.port for n in topo.nodes if n.role == "sentinel"]
    topo.url = "redis+sentinel://" + ",".join(f"{HOST}:{p}" for p in sentinels) + f"/{SERVICE}?db=0"
    poll(lambda: all(sees_replicas(p) for p in sentinels), 20, "sentinels")


def sees_replicas(sentinel_port: int) -> bool:
    out = cli(sentinel_port, "SENTINEL", "master", SERVICE).split()
    info = dict(zip(out[::2], out[1::2], strict=False))
    return info.get("num-slaves") == "1" and info.get("num-other-sentinels") == "2"


def start_cluster(tmp: Path, topo: Topology) -> None:
    extra = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
    extra += ["--cluster-node-timeout", "2000", *NO_SYNC_DELAY]
    for _ in range(6):
        topo.nodes.append(data_node(tmp, topo, "cluster", extra))
    nodes = topo.nodes
    topo.url = "redis+cluster://" + ",".join(f"{HOST}:{n.port}" for n in nodes)
    poll(lambda: all(serving(n.port) for n in nodes), 10, "cluster nodes")
    addrs = [f"{HOST}:{n.port}" for n in nodes]
    subprocess.run(
        ["redis-cli", "--cluster", "create", *addrs, "--cluster-replicas", "1", "--cluster-yes"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    poll(topo.settled, 30, "cluster")
    poll(lambda: all(synced(n.port) for n in nodes), 30, "cluster replicas in sync")
    poll(lambda: all(sees_roles(n.port, len(nodes) // 2) for n in nodes), 30, "cluster roles known to all")


def sees_roles(port: int, masters: int) -> bool:
    """The node on ``port`` knows every node's role: ``masters`` masters and as many replicas (just after
    ``--cluster create``, a replica can still be a master without slots in another node's view)."""
    flags = [line.split()[2] for line in cli(port, "CLUSTER", "NODES").splitlines() if line.strip()]
    return sum("master" in f for f in flags) == masters and sum("slave" in f for f in flags) == masters


def synced(port: int) -> bool:
    """A master, or a replica whose link to its master is up (a replica never synced cannot fail over)."""
    info = cli(port, "INFO", "replication")
    return "role:master" in info or "master_link_status:up" in info


STARTERS: dict[str, Callable[[Path, Topology], None]] = {
    "single": start_single,
    "sentinel": start_sentinel,
    "cluster": start_cluster,
}


def start(kind: str, tmp: Path, binary: str = "redis-server") -> Topology:
    """Start ``kind`` (one of :data:`KINDS`) with its files under ``tmp``, its nodes ``binary`` (redis-server
    or another server that takes its flags: valkey-server); stopped again if it fails."""
    tmp.mkdir(parents=True, exist_ok=True)
    topo = Topology(kind, "", binary=binary)
    try:
        STARTERS[kind](tmp, topo)
    except BaseException:
        topo.stop()
        raise
    return topo
