#!/usr/bin/python3
"""c10d across emulated hosts (emucluster.py): the tests of ctest label `cluster`.

    cluster_test.py TEST --bin-dir BUILD [--hosts N] [--nproc N] [--rates R] [--counts C]

TEST is one of:
  script       the emulated hosts themselves: host names, addresses, isolation from the root
               namespace, shaped rates, a cut link, unique names side by side, teardown on
               SIGTERM and of what a SIGKILLed cluster left
  conformance  c10d-conformance over TCP, one c10drun per host (--hosts x --nproc ranks)
  kill         SIGKILL of every rank of host 1 while the job runs: every other rank and every
               launcher exits non-zero within seconds, naming the lost ranks
  cut          host 1's link cut while the job runs: every rank fails within its op timeout,
               naming a peer on the other side of the cut
  stranger     a process on a host outside the job, without the token or with a wrong one,
               tries the store and a rank's port during set-up: refused, the job unaffected
  mpirun       mpirun from host 0 across the hosts (emucluster-rsh), the MPI backend's
               conformance suite
  fmnist       train_fmnist (the demo's DDP training on Fashion-MNIST) across the hosts, one
               c10drun per host, --epochs epochs: the last test accuracy is at least
               --min-accuracy and every host's link carried the gradients
Exit status: 0 passed, 1 failed, 77 skipped (not root, no ip netns: the reason is printed).
BUILD is the build directory (tools/c10drun, tools/c10d-store, tests/c10d-conformance,
tests/pg_fault_child, examples/train_fmnist).
"""

import argparse
import os
import re
import secrets
import signal
import socket
import struct
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree from ctest runs
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import emucluster  # noqa: E402

PY = "/usr/bin/python3"
MASTER_PORT = 29500


class Failure(Exception):
    pass


def check(cond, message):
    if not cond:
        raise Failure(message)


def log(message):
    print(f"cluster_test: {message}", flush=True)


def veth_bytes(cluster, i):
    """Bytes host i's link carried, both ways."""
    return sum(cluster.link_bytes(i).values())


def dump(job):
    for p in job.procs:
        print(f"---- {p.label} (exit {p.popen.returncode}) ----\n{p.text()}", flush=True)


def ranks_of(cluster_host, nproc):
    return list(range(cluster_host * nproc, (cluster_host + 1) * nproc))


# ---- script: the emulated hosts ----

THROUGHPUT = r"""
import socket, sys, time
mode, addr, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
if mode == "serve":
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, port)); s.listen(1); s.settimeout(20)
    print("LISTENING", flush=True)
    c, _ = s.accept(); c.settimeout(20); n = 0; t0 = None
    while True:
        b = c.recv(1 << 20)
        if not b: break
        if t0 is None: t0 = time.monotonic()
        n += len(b)
    print(f"GBITS {n * 8 / (time.monotonic() - t0) / 1e9:.3f}", flush=True)
elif mode == "send":
    s = socket.create_connection((addr, port), timeout=5); buf = b"x" * (1 << 20)
    t0 = time.monotonic()
    while time.monotonic() - t0 < float(sys.argv[4]): s.sendall(buf)
    s.close()
else:  # probe: exit 0 when something answers at addr:port (accepts or refuses)
    try:
        socket.create_connection((addr, port), timeout=float(sys.argv[4])).close()
    except ConnectionRefusedError:
        pass
    except OSError as e:
        print(f"UNREACHABLE {e}", flush=True); sys.exit(1)
"""


def gbits(cluster, src, dst, seconds=1.5):
    server = emucluster.Proc(cluster.hosts[dst].argv([PY, "-c", THROUGHPUT, "serve",
                                                      cluster.hosts[dst].addr, "5001"]))
    server.wait_for("LISTENING", 10)
    cluster.hosts[src].run([PY, "-c", THROUGHPUT, "send", cluster.hosts[dst].addr, "5001",
                            str(seconds)], check=True, timeout=30)
    server.wait(30)
    return float(server.wait_for(r"GBITS (\S+)", 1)[0].group(1))


def reachable(cluster, src, addr, timeout=1.0):
    r = cluster.hosts[src].run([PY, "-c", THROUGHPUT, "probe", addr, "9", str(timeout)],
                               capture_output=True, text=True, timeout=30)
    return r.returncode == 0


def objects_of(tag):
    """The netns and links whose names carry `tag`, and whether its state directory exists."""
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    found = [n.split()[0] for n in names.splitlines() if tag in n]
    found += [line.split(":")[1].strip().split("@")[0] for line in links.splitlines()
              if tag in line.split(":")[1]]
    if os.path.exists(os.path.join(emucluster.STATE_ROOT, tag)):
        found.append(os.path.join(emucluster.STATE_ROOT, tag))
    return found


def test_script(a):
    with emucluster.Cluster(3, "2gbit,2gbit,500mbit") as c:
        for h in c.hosts:
            for _ in range(2):  # the host name persists from one entry to the next
                name = h.run(["hostname"], capture_output=True, text=True).stdout.strip()
                check(name == h.name, f"host {h.index}: hostname is '{name}', not '{h.name}'")
            addrs = h.run(["ip", "-4", "-o", "addr", "show", "dev", "eth0"],
                          capture_output=True, text=True).stdout
            check(f"{h.addr}/24" in addrs, f"{h.name}: eth0 lacks {h.addr}: {addrs}")
            check(len(h.veth) <= 15, f"interface name {h.veth} is over 15 bytes")
        addrs = [h.addr for h in c.hosts]
        check(addrs == [f"{c.subnet}.{i + 1}" for i in range(3)], f"addresses {addrs}")
        check(reachable(c, 0, c.hosts[2].addr), "h0 cannot reach h2")
        # The bridge has no address: the root namespace has no route into the cluster (a
        # packet there would leave by its default route, so none is sent), nor the hosts out.
        route = subprocess.run(["ip", "-o", "route", "get", c.hosts[0].addr],
                               capture_output=True, text=True).stdout
        check(c.bridge not in route, f"the root namespace routes into the cluster: {route}")
        bridge_addrs = subprocess.run(["ip", "-o", "addr", "show", "dev", c.bridge],
                                      capture_output=True, text=True).stdout
        check("inet " not in bridge_addrs, f"the bridge has an address: {bridge_addrs}")
        routes = c.hosts[0].run(["ip", "-4", "route"], capture_output=True, text=True).stdout
        check("default" not in routes, f"host 0 has a default route: {routes}")
        check(not reachable(c, 0, _root_address(), 1),
              "host 0 reaches the root namespace's address")
        fast, slow = gbits(c, 0, 1), gbits(c, 0, 2)
        back = gbits(c, 2, 0)
        log(f"throughput h0->h1 (2gbit) {fast:.2f} Gbit/s, h0->h2 (500mbit) {slow:.2f}, "
            f"h2->h0 {back:.2f}")
        check(fast <= 2.2, f"h0->h1 shaped to 2gbit moved {fast} Gbit/s")
        for v, what in ((slow, "h0->h2"), (back, "h2->h0")):
            check(0.15 <= v <= 0.56, f"{what} shaped to 500mbit moved {v} Gbit/s")
        c.set_rate(2, None)
        check(gbits(c, 0, 2) > 0.56, "h0->h2 still shaped after set_rate(2, None)")
        c.cut(1)
        check(not reachable(c, 0, c.hosts[1].addr), "h1 reachable with its link cut")
        c.restore(1)
        check(reachable(c, 0, c.hosts[1].addr, 5), "h1 unreachable after restore")
        with emucluster.Cluster(2) as other:  # side by side in one process
            check(other.tag != c.tag and other.subnet != c.subnet and
                  other.bridge != c.bridge, "two clusters share a name or subnet")
            check(other.hosts[0].run(["hostname"], capture_output=True,
                                     text=True).stdout.strip() == "h0", "second cluster")
            other_tag = other.tag
        check(not objects_of(other_tag), f"left behind: {objects_of(other_tag)}")
        tag = c.tag
    check(not objects_of(tag), f"left behind: {objects_of(tag)}")

    # A stop signal tears the CLI's cluster down; what a SIGKILLed one leaves, cleanup removes.
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "emucluster.py")
    for sig in (signal.SIGTERM, signal.SIGKILL):
        p = emucluster.Proc([PY, script, "up", "--hosts", "2"], label="emucluster up")
        m = p.wait_for(r"netns (" + emucluster.PREFIX + r"[0-9a-f]+)h0", 30)[0]
        p.wait_for("Ctrl-C tears it down", 30)
        tag = m.group(1)[len(emucluster.PREFIX):]
        check(len(objects_of(tag)) >= 5, f"cluster {tag} not found: {objects_of(tag)}")
        os.kill(p.pid, sig)
        rc = p.wait(30)
        if sig == signal.SIGTERM:
            check(rc == 128 + signal.SIGTERM, f"emucluster up exited {rc} on SIGTERM")
            check(not objects_of(tag), f"left behind after SIGTERM: {objects_of(tag)}")
        else:
            check(objects_of(tag), "nothing left after SIGKILL: the test proves nothing")
            removed = emucluster.cleanup_stale()
            check(not objects_of(tag), f"cleanup left {objects_of(tag)} (removed {removed})")
    log("script: host names, addresses, isolation, rates, cut, teardown: ok")


def _root_address():
    """An address of the root namespace (its default route's source), or 127.0.0.1."""
    r = subprocess.run(["ip", "-4", "-o", "route", "get", "1.1.1.1"], capture_output=True,
                       text=True).stdout
    m = re.search(r"src (\S+)", r)
    return m.group(1) if m else "127.0.0.1"


def wait_all_passed(job, timeout, t0):
    """Waits for every host's launcher to exit 0 (printing their output otherwise); returns the
    seconds since t0."""
    try:
        codes = job.wait(timeout)
    except TimeoutError as e:
        dump(job)
        raise Failure(str(e))
    if any(codes):
        dump(job)
    check(not any(codes), f"exit statuses {codes}")
    return time.monotonic() - t0


# ---- conformance ----

def conformance_args(a):
    return (["--counts", a.counts] if a.counts else []) + (["--large", a.large] if a.large else [])


def test_conformance(a):
    args = conformance_args(a)
    with emucluster.Cluster(a.hosts, a.rates) as c:
        t0 = time.monotonic()
        job = c.c10drun([os.path.join(a.bin_dir, "tests/c10d-conformance"), *args],
                        nproc_per_node=a.nproc, c10drun=a.c10drun)
        elapsed = wait_all_passed(job, a.timeout, t0)
        moved = [veth_bytes(c, i) for i in range(c.n)]
        check(all(m > 1 << 20 for m in moved), f"bytes over each host's link: {moved}")
        passed = job.procs[0].wait_for(r"\[rank 0\]: (.*)", 1)[-1].group(1)
        log(f"conformance {a.hosts} hosts x {a.nproc} ranks, rates {a.rates}, "
            f"{' '.join(args) or 'default counts'}: passed in {elapsed:.1f} s; MB over each link "
            f"{[round(m / 1e6) for m in moved]}; rank 0: {passed}")


# ---- kill and cut ----

def start_loop(c, a, env_extra=None):
    """Every rank loops all_reduce (pg_fault_child loop) until it fails. Ranks ignore SIGTERM, so
    that a launcher which stops its other ranks once one failed (SIGKILL only after its grace
    period) does not cut short what each rank has to say about its own failure."""
    env = emucluster.job_env()
    env.update(env_extra or {})
    job = c.c10drun(["/bin/sh", "-c", f"trap '' TERM; exec {a.child} loop"],
                    nproc_per_node=a.nproc, c10drun=a.c10drun, env=env)
    pids = {}
    try:
        for p in job.procs:
            for m in p.wait_for(r"\[rank (\d+)\]: READY (\d+) (\d+)", 60, count=a.nproc):
                pids[int(m.group(2))] = int(m.group(3))
    except TimeoutError:
        dump(job)
        raise
    return job, pids


def failures(proc):
    """{rank: (ms, message)} from the "FAILED ms message" lines of a launcher's output."""
    out = {}
    for m in re.finditer(r"^\[rank (\d+)\]: FAILED (\d+) (.*)$", proc.text("out"), re.M):
        out[int(m.group(1))] = (int(m.group(2)), m.group(3))
    return out


def names_any(message, ranks):
    return any(re.search(rf"\brank {r}\b", message) for r in ranks)


def wait_after(c, job, t0, timeout, what):
    """Waits for every launcher; returns their exit statuses and their seconds since t0."""
    try:
        codes = job.wait(timeout)
    except TimeoutError as e:
        dump(job)
        raise Failure(f"after the {what}: {e}")
    times = [p.ended - t0 for p in job.procs]
    log(f"{what}: launchers exited {codes} after "
        f"{', '.join(f'{h.name} {t:.2f} s' for h, t in zip(c.hosts, times))}")
    return codes, times


def check_ranks(p, i, a, check_one):
    """check_one(rank, ms, message) for the FAILED line of every rank of host i."""
    failed = failures(p)
    for r in ranks_of(i, a.nproc):
        check(r in failed, f"rank {r} printed no FAILED line")
        ms, msg = failed[r]
        log(f"rank {r} failed after {ms} ms: {msg[:400]}")
        check_one(r, ms, msg)


def test_kill(a):
    victim = 1
    with emucluster.Cluster(a.hosts, a.rates) as c:
        job, pids = start_loop(c, a)
        lost = ranks_of(victim, a.nproc)
        t0 = time.monotonic()
        for r in lost:
            os.kill(pids[r], signal.SIGKILL)
        codes, times = wait_after(c, job, t0, 60, "kill")
        try:
            for i, p in enumerate(job.procs):
                check(codes[i] == 1, f"{p.label} exited {codes[i]}, not 1")
                text = p.text()
                if i == victim:
                    for r in lost:
                        check(re.search(rf"c10drun: rank {r} \(pid {pids[r]}\) (failed|stopped): "
                                        r"killed by signal 9", text),
                              f"{p.label} does not report rank {r} killed")
                    continue
                check(times[i] < a.within, f"{p.label} took {times[i]:.1f} s (limit {a.within})")

                def named_soon(r, ms, msg):
                    check(names_any(msg, lost), f"rank {r} does not name rank(s) {lost}: {msg}")
                    check(ms < a.within * 1000, f"rank {r} failed after {ms} ms")
                check_ranks(p, i, a, named_soon)
                check(re.search(r"c10drun: rank \d+ \(pid \d+\) failed: exited with code 3", text),
                      f"{p.label} does not report its failed rank")
        except Failure:
            dump(job)
            raise


def test_cut(a):
    victim, timeout_ms = 1, a.op_timeout_ms
    limit_ms = timeout_ms + a.slack_ms
    with emucluster.Cluster(a.hosts, a.rates) as c:
        job, pids = start_loop(c, a, {"C10D_TIMEOUT_MS": str(timeout_ms)})
        cut_off = ranks_of(victim, a.nproc)
        others = [r for r in range(a.hosts * a.nproc) if r not in cut_off]
        t0 = time.monotonic()
        c.cut(victim)
        codes, times = wait_after(c, job, t0, timeout_ms / 1000 * 3 + 30, "cut")
        try:
            for i, p in enumerate(job.procs):
                check(codes[i] == 1, f"{p.label} exited {codes[i]}, not 1")
                check(times[i] < limit_ms / 1000 + 2, f"{p.label} took {times[i]:.1f} s")
                far = others if i == victim else cut_off

                def named_in_time(r, ms, msg):
                    check(ms <= limit_ms, f"rank {r} failed after {ms} ms, over {limit_ms}")
                    # A rank of the cut host may have waited on a rank of its own host, and
                    # cannot follow that rank's wait in the store, out of its reach too: it
                    # must say so. Every other rank names a rank across the cut.
                    check(names_any(msg, far) or
                          (i == victim and "the store does not answer" in msg),
                          f"rank {r} names none of ranks {far}: {msg}")
                check_ranks(p, i, a, named_in_time)
                # From the other side of a cut, a rank that made no progress may as well be
                # unreachable: the launchers say both of a rank on another node. (A rank of this
                # host may be named instead, stopped: LeakSanitizer stops a process that exits,
                # to look for leaks, and the launcher sees it in state t.)
                lines = p.text().splitlines() if i != victim else []
                if any("(on another node) is the cause:" in line for line in lines):
                    for line in lines:
                        if "is the cause:" in line:
                            check("made no progress or is unreachable" in line,
                                  f"{p.label}: {line}")
                        if "failed:" in line and "made no progress" in line:
                            check(line.endswith("made no progress or became unreachable"),
                                  f"{p.label}: {line}")
        except Failure:
            dump(job)
            raise


# ---- stranger ----

# The transport handshake's hello (tcp_wire.h: magic "C10T" and the version, read from there),
# before its nonce.
def handshake_version():
    wire = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src",
                        "backends", "gloo_like", "tcp_wire.h")
    with open(wire) as f:
        return int(re.search(r"kHandshakeVersion = (\d+);", f.read()).group(1))


HELLO = struct.pack("<IH", 0x54303143, handshake_version())


def stranger_garbage(addr, port):
    """Sends an HTTP request to a rank's port: returns what came back (b"" when the rank closed
    or reset the connection)."""
    s = socket.create_connection((addr, port), timeout=10)
    s.settimeout(10)
    s.sendall(b"GET / HTTP/1.0\r\n\r\n")
    try:
        return s.recv(100)
    except ConnectionResetError:
        return b""
    finally:
        s.close()


def stranger_handshake(addr, port, group, world, claim_rank, expected_rank, key):
    """The connecting side of the transport's handshake (tcp_wire.h), keyed by `key`: returns
    what the rank answered to the proof (b"" when it closed the connection)."""
    import hashlib
    import hmac
    s = socket.create_connection((addr, port), timeout=10)
    s.settimeout(10)
    nonce_c = secrets.token_bytes(32)
    s.sendall(HELLO + nonce_c)
    challenge = b""
    while len(challenge) < 38:
        more = s.recv(38 - len(challenge))
        if not more:
            return b"closed before the challenge"
        challenge += more
    nonce_a = challenge[6:]
    name = group.encode()
    body = struct.pack("<IIII", world, claim_rank, expected_rank, len(name)) + name
    tkey = hmac.new(key, b"c10d-transport-key", hashlib.sha256).digest()
    mac = hmac.new(tkey, b"c10d-transport-connect" + nonce_c + nonce_a + body,
                   hashlib.sha256).digest()
    s.sendall(body + mac)
    try:
        answer = s.recv(4096)
    except ConnectionResetError:
        answer = b""
    s.close()
    return answer


def stranger_attempts(addr, port, group, world, claim, token):
    """What a stranger tries at a rank's port: garbage, then a well-formed proof under a wrong
    key claiming rank `claim` (one not yet come). Prints the bytes each got back. The control:
    the same proof under the job's key with a world size that is not the job's is answered
    (refused, naming why), so the frames are well formed and only the key kept it out."""
    port, world, claim = int(port), int(world), int(claim)
    print("GARBAGE", len(stranger_garbage(addr, port)))
    print("PROOF", len(stranger_handshake(addr, port, group, world, claim, 0, b"not-the-token")))
    print("CONTROL", len(stranger_handshake(addr, port, group, 99, claim, 0, token.encode())))


def store_cli(c, host, a, *args, token=None):
    env = dict(os.environ)
    env.pop("C10D_STORE_TOKEN", None)
    argv = [a.store, *args, "--addr", f"{c.hosts[0].addr}:{MASTER_PORT}"]
    if token is not None:
        argv += ["--token", token]
    return c.hosts[host].run(argv, capture_output=True, text=True, env=env, timeout=30)


def test_stranger(a):
    with emucluster.Cluster(3, a.rates) as c:
        stranger = 2
        env = emucluster.job_env()
        token = env["C10D_STORE_TOKEN"]
        env["C10D_LOG_LEVEL"] = "warn"
        # TCP alone: with shared memory, set-up exchanges the ranks' host names in the store
        # before any rank listens, so no port would be open while node 1 is away.
        env["C10D_SHM"] = "0"
        program = [a.child, "sum", "1"]
        # Node 0 alone: its ranks listen and wait for node 1's, which comes after the stranger.
        node0 = c.c10drun_node(0, 0, 2, program, a.nproc, a.c10drun, MASTER_PORT, env)
        job = emucluster.Job([node0])
        try:
            # init_process_group's group is "default"; its ranks publish "<group>/addr/<rank>".
            group, addr_key = "default", "default/addr/0"
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                r = store_cli(c, 0, a, "check", addr_key, token=token)
                if r.stdout.strip() == "true":
                    break
                time.sleep(0.1)
            check(r.stdout.strip() == "true", f"rank 0 never published {addr_key}: {r.stderr}")
            published = store_cli(c, 0, a, "get", addr_key, token=token).stdout.strip()
            m = re.search(r"(\d+\.\d+\.\d+\.\d+):(\d+)", published)
            check(m and m.group(1) == c.hosts[0].addr, f"rank 0 published '{published}'")
            rank_port = int(m.group(2))
            log(f"rank 0 listens on {m.group(1)}:{rank_port} (group '{group}')")

            # The store: no token, a wrong token.
            for token_given, expect in ((None, r"token|authenticat"),
                                        ("not-the-token", r"authentication failed|token")):
                r = store_cli(c, stranger, a, "get", addr_key, token=token_given)
                log(f"stranger store client (token {token_given}): exit {r.returncode}: "
                    f"{r.stderr.strip()[:300]}")
                check(r.returncode != 0, f"the store answered a stranger: {r.stdout}")
                check(re.search(expect, r.stderr, re.I), f"no reason given: {r.stderr}")
                check(str(rank_port) not in r.stdout, "the stranger read rank 0's address")
            # The rank's port, from the stranger's host (stranger_attempts, below).
            r = c.hosts[stranger].run(
                [PY, "-B", os.path.abspath(__file__), "_stranger", c.hosts[0].addr,
                 str(rank_port), group, str(2 * a.nproc), str(a.nproc), token],
                capture_output=True, text=True, timeout=60)
            log(f"stranger at rank 0's port: {r.stdout.strip()} {r.stderr.strip()[-300:]}")
            check(r.returncode == 0, f"stranger script failed: {r.stderr}")
            # Bytes each attempt got back before the rank closed the connection.
            got = {k: int(v) for k, v in re.findall(r"^(\w+) (\d+)$", r.stdout, re.M)}
            check(got.get("GARBAGE") == 0, f"garbage was answered: {r.stdout}")
            check(got.get("PROOF") == 0, f"a wrong-key proof was answered: {r.stdout}")
            check(got.get("CONTROL", 0) > 0, f"the control was not answered: {r.stdout}")

            job.procs.append(c.c10drun_node(1, 1, 2, program, a.nproc, a.c10drun, MASTER_PORT,
                                            env))
            codes = job.wait(60)
            check(codes == [0, 0], f"the job exited {codes}")
            world = 2 * a.nproc
            for p in job.procs:
                check(len(p.wait_for(rf"SUM {world}\b", 1, count=a.nproc)) == a.nproc,
                      f"{p.label}: not every rank summed to {world}")
            refusals = re.findall(rf"refused connection from {re.escape(c.hosts[stranger].addr)}"
                                  r":\d+: ([^\n]*)", job.procs[0].text("err"))
            store_log = re.findall(rf"store server :{MASTER_PORT}: [^\n]*"
                                   rf"{re.escape(c.hosts[stranger].addr)}:\d+[^\n]*",
                                   job.procs[0].text("err"))
            log(f"the store logged: {store_log}")
            check(any("wrong token" in line for line in store_log),
                  "the store did not log the stranger's wrong token")
            log(f"rank 0 logged {len(refusals)} refusals of the stranger: {refusals}")
            check(len(refusals) == 2, f"rank 0 logged {refusals}, expected 2 refusals of "
                  f"{c.hosts[stranger].addr}")
        except (Failure, TimeoutError):
            dump(job)
            raise
        finally:
            job.kill()


# ---- mpirun ----

def test_mpirun(a):
    with emucluster.Cluster(a.hosts, a.rates) as c:
        p = c.mpirun(["hostname"], per_host=a.nproc, mpirun=a.mpirun)
        check(p.wait(60) == 0, f"mpirun hostname: {p.text()}")
        names = sorted(p.text("out").split())
        want = sorted(h.name for h in c.hosts for _ in range(a.nproc))
        check(names == want, f"ranks ran on {names}, expected {want}")
        env = dict(os.environ, C10D_BACKEND="mpi")
        args = conformance_args(a)
        t0 = time.monotonic()
        p = c.mpirun([os.path.join(a.bin_dir, "tests/c10d-conformance"), *args],
                     per_host=a.nproc, env=env, mpirun=a.mpirun)
        rc = p.wait(a.timeout)
        elapsed = time.monotonic() - t0
        if rc != 0:
            print(p.text(), flush=True)
        check(rc == 0, f"mpirun exited {rc}")
        moved = [veth_bytes(c, i) for i in range(c.n)]
        check(all(m > 1 << 20 for m in moved), f"bytes over each host's link: {moved}")
        log(f"mpirun: ranks on {names}; MPI-backend conformance {a.hosts} x {a.nproc} passed in "
            f"{elapsed:.1f} s; MB over each link {[round(m / 1e6) for m in moved]}; "
            f"{p.text('out').strip().splitlines()[-1] if p.text('out') else ''}")


# ---- the demo across hosts ----

def test_fmnist(a):
    data = os.environ.get("C10D_FASHION_MNIST", "/usr/share/datasets/fashion-mnist")
    if not os.path.exists(os.path.join(data, "train-images-idx3-ubyte.gz")):
        raise emucluster.Unavailable(f"no Fashion-MNIST in {data} (dataset-fashion-mnist)")
    with emucluster.Cluster(a.hosts, a.rates) as c:
        t0 = time.monotonic()
        job = c.c10drun([os.path.join(a.bin_dir, "examples/train_fmnist"), "--backend", "tcp",
                         "--epochs", str(a.epochs), "--min-accuracy", str(a.min_accuracy),
                         "--data", data], nproc_per_node=a.nproc, c10drun=a.c10drun)
        elapsed = wait_all_passed(job, a.timeout, t0)
        epochs = job.procs[0].wait_for(
            r"epoch (\d+) loss (\S+) test accuracy (\S+)% (\d+) samples/s", 1, a.epochs)
        accuracy = float(epochs[-1].group(3))
        check(accuracy >= 100 * a.min_accuracy,
              f"test accuracy {accuracy}% below {100 * a.min_accuracy}%")
        moved = [veth_bytes(c, i) for i in range(c.n)]
        # Each epoch all-reduces the gradients (about 2 MB of float32) hundreds of times.
        check(all(m > 100 << 20 for m in moved), f"bytes over each host's link: {moved}")
        log(f"fmnist {a.hosts} hosts x {a.nproc} ranks, rates {a.rates}, {a.epochs} epochs: "
            f"test accuracy {accuracy}% in {elapsed:.1f} s ("
            f"{', '.join(m.group(4) for m in epochs)} samples/s); MB over each link "
            f"{[round(m / 1e6) for m in moved]}")


TESTS = {"script": test_script, "conformance": test_conformance, "kill": test_kill,
         "cut": test_cut, "stranger": test_stranger, "mpirun": test_mpirun,
         "fmnist": test_fmnist}


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "_stranger":  # run on the stranger's host
        stranger_attempts(*sys.argv[2:8])
        return 0
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("test", choices=sorted(TESTS))
    p.add_argument("--bin-dir", required=True, help="the build directory")
    p.add_argument("--hosts", type=int, default=2)
    p.add_argument("--nproc", type=int, default=2, help="ranks per host")
    p.add_argument("--rates", default=None, help="tc rate of every link, or one per host")
    p.add_argument("--counts", default="", help="c10d-conformance --counts")
    p.add_argument("--large", default="", help="c10d-conformance --large")
    p.add_argument("--timeout", type=float, default=110, help="seconds for the job")
    p.add_argument("--within", type=float, default=10, help="kill: seconds the others may take")
    p.add_argument("--mpirun", default="mpirun", help="mpirun: Open MPI's mpirun")
    p.add_argument("--op-timeout-ms", type=int, default=5000, help="cut: C10D_TIMEOUT_MS")
    p.add_argument("--slack-ms", type=int, default=4000, help="cut: over the op timeout")
    p.add_argument("--epochs", type=int, default=3, help="fmnist: training epochs")
    p.add_argument("--min-accuracy", type=float, default=0.85, help="fmnist: the last epoch's")
    a = p.parse_args()
    a.c10drun = os.path.join(a.bin_dir, "tools/c10drun")
    a.store = os.path.join(a.bin_dir, "tools/c10d-store")
    a.child = os.path.join(a.bin_dir, "tests/pg_fault_child")
    reason = emucluster.why_unavailable()
    if reason:
        print(f"SKIPPED: cannot build emulated hosts here: {reason}", flush=True)
        return emucluster.SKIP
    started = time.monotonic()
    try:
        TESTS[a.test](a)
    except emucluster.Unavailable as e:
        print(f"SKIPPED: cannot build emulated hosts here: {e}", flush=True)
        return emucluster.SKIP
    except (Failure, TimeoutError) as e:
        print(f"FAILED: {a.test}: {e}", flush=True)
        return 1
    log(f"{a.test} passed in {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
