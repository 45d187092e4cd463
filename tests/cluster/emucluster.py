#!/usr/bin/python3
"""emucluster: a cluster of N emulated hosts on one Linux machine, for multi-host tests.

Each host is a network namespace with its own address (10.A.B.i+1/24) on one Linux bridge,
joined to it by a veth pair, and its own UTS namespace with its own host name (h0, h1, ...), so
`hostname` and c10d's shared-memory host identity differ per host while the file system and
/dev/shm stay shared. A host's link can be shaped (tbf, both directions) or cut. Commands run
on a host through nsenter (Host.argv). Everything is torn down on exit, on an exception or a
stop signal, and a later cluster removes what a killed one left (its pid is gone).

Needs root, iproute2 (ip netns, veth, bridge, tc) and util-linux (nsenter, unshare); without
them Cluster.up() raises Unavailable, whose reason tests print before exiting with SKIP (77).

Library (from Python: sys.path.insert(0, "tests/cluster"); import emucluster):
    with emucluster.Cluster(hosts=3, rates="2gbit,2gbit,500mbit") as c:
        c.hosts[1].run(["hostname"], capture_output=True)  # subprocess.run inside host 1
        job = c.c10drun(["build/tests/c10d-conformance"], nproc_per_node=2,
                        c10drun="build/tools/c10drun")    # a c10drun per host, a fresh token
        codes = job.wait(timeout=120)                      # exit status per host
        text = job.procs[0].text()                         # host 0's launcher, every line
        c.cut(1); c.restore(1); c.set_rate(2, "1gbit")     # links
        c.link_bytes(1)                                    # {"sent": ..., "received": ...}
        p = c.mpirun(["build/bench/c10d-mpi-reference", "all_reduce"], per_host=2)
        p.wait(120); print(p.text("out"))

CLI (tests/cluster/emucluster.py --help):
    emucluster.py --hosts 3 --rates 2gbit -- sh -c 'echo {host} {addr} {node_rank}'
    emucluster.py c10drun --hosts 2 --nproc-per-node 2 -- build/tests/c10d-conformance
    emucluster.py mpirun --hosts 2 --per-host 2 -- build/bench/c10d-mpi-reference all_reduce
    emucluster.py up --hosts 2       # build, print the hosts, wait for Ctrl-C
    emucluster.py cleanup            # remove what killed clusters left
    emucluster.py check              # exit 77 with the reason when clusters cannot be built
"""

import argparse
import fcntl
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time

PREFIX = "c10dc"  # every interface and namespace this script makes starts with it
STATE_ROOT = "/run/c10d-cluster"
SKIP = 77
HERE = os.path.dirname(os.path.abspath(__file__))
RSH_AGENT = os.path.join(HERE, "emucluster-rsh")
# Interface names are at most 15 bytes (IFNAMSIZ - 1): PREFIX (5) + tag (at most 7) + p<i> (3).
MAX_HOSTS = 99
_RATE = re.compile(r"^\d+(\.\d+)?([kmgt]?bit|[kmgt]?bps)$")
_NAME = re.compile(r"^" + PREFIX + r"([0-9a-f]+?)(br|p\d+|h\d+)$")
_seq_lock = threading.Lock()
_seq = 0


class Unavailable(RuntimeError):
    """The machine cannot host an emulated cluster (not root, no ip netns, ...)."""


def _sh(*argv, check=True):
    r = subprocess.run(argv, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {r.returncode}: {r.stderr.strip()}")
    return r


def why_unavailable():
    """The reason emulated clusters cannot be built here, or None."""
    if os.geteuid() != 0:
        return f"not root (euid {os.geteuid()}): network namespaces need CAP_SYS_ADMIN"
    for tool in ("ip", "tc", "nsenter", "unshare"):
        if shutil.which(tool) is None:
            return f"'{tool}' is not installed (iproute2, util-linux)"
    r = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    if r.returncode != 0:
        return f"'ip netns list' failed: {r.stderr.strip()}"
    return None


def _pid_start(pid):
    """The start time of `pid` (field 22 of /proc/pid/stat), or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _tag_owner_alive(tag, start=None):
    pid = int(tag[:-1], 16) if len(tag) > 1 else -1
    now = _pid_start(pid)
    return now is not None and (start is None or now == start)


class Host:
    """One emulated host: `name` (its host name), `addr`, `netns`, `uts` (a bind-mounted UTS
    namespace file), `veth` (the bridge-side end of its link, in the root namespace)."""

    def __init__(self, index, name, addr, netns, uts, veth, rate):
        self.index, self.name, self.addr = index, name, addr
        self.netns, self.uts, self.veth, self.rate = netns, uts, veth, rate

    def argv(self, cmd):
        """`cmd` (a list) run inside this host's network and UTS namespaces."""
        return ["nsenter", f"--net=/run/netns/{self.netns}", f"--uts={self.uts}", "--", *cmd]

    def popen(self, cmd, **kwargs):
        return subprocess.Popen(self.argv(cmd), **kwargs)

    def run(self, cmd, **kwargs):
        return subprocess.run(self.argv(cmd), **kwargs)

    def to_json(self):
        return dict(vars(self))


class Proc:
    """A process whose stdout and stderr lines are collected (with their arrival times) by
    reader threads, optionally echoed with a prefix. `lines` holds (time, stream, text)."""

    def __init__(self, argv, env=None, echo_prefix=None, label=""):
        self.label = label
        self.started = time.monotonic()
        self.popen = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      start_new_session=True)
        self.lines = []
        self.ended = None  # time.monotonic() when it ended, as seen by the reaper thread
        self._cond = threading.Condition()
        self._done = threading.Event()
        self._readers = [threading.Thread(target=self._read, args=(s, n, echo_prefix), daemon=True)
                         for s, n in ((self.popen.stdout, "out"), (self.popen.stderr, "err"))]
        for t in self._readers:
            t.start()
        threading.Thread(target=self._reap, daemon=True).start()

    def _reap(self):
        self.popen.wait()
        self.ended = time.monotonic()
        self._done.set()
        with self._cond:
            self._cond.notify_all()

    def _read(self, stream, name, echo_prefix):
        for raw in stream:
            text = raw.decode(errors="replace").rstrip("\n")
            with self._cond:
                self.lines.append((time.monotonic(), name, text))
                self._cond.notify_all()
            if echo_prefix is not None:
                out = sys.stdout if name == "out" else sys.stderr
                print(f"{echo_prefix}{text}", file=out, flush=True)

    @property
    def pid(self):
        return self.popen.pid

    def wait(self, timeout):
        """The exit status (negative: killed by that signal); kills the process group after
        `timeout` seconds and raises TimeoutError."""
        if not self._done.wait(timeout):
            self.kill()
            raise TimeoutError(f"{self.label or self.popen.args[0]} still running after "
                               f"{timeout} s; killed")
        for t in self._readers:
            t.join(timeout=5)
        return self.popen.returncode

    def kill(self):
        try:
            os.killpg(self.popen.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self._done.wait(10)

    def text(self, stream=None):
        with self._cond:
            return "\n".join(t for _, s, t in self.lines if stream is None or s == stream)

    def wait_for(self, pattern, timeout, count=1):
        """Waits until `count` lines match the regex `pattern`; returns the matches. Raises
        TimeoutError naming the pattern and the output so far."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                found = [m for m in (regex.search(t) for _, _, t in self.lines) if m]
                if len(found) >= count:
                    return found
                left = deadline - time.monotonic()
                if left <= 0 or (self._done.is_set() and
                                 not any(t.is_alive() for t in self._readers)):
                    raise TimeoutError(f"{self.label}: {len(found)} of {count} lines match "
                                       f"{pattern!r}; output:\n" +
                                       "\n".join(t for _, _, t in self.lines))
                self._cond.wait(min(left, 0.2))


class Job:
    """One Proc per host (`procs[i]` runs on host i)."""

    def __init__(self, procs):
        self.procs = procs

    def wait(self, timeout):
        """Every host's exit status, in host order; kills what outlives `timeout` seconds
        (counted from now, for them all) and raises TimeoutError."""
        deadline = time.monotonic() + timeout
        codes, late = [], []
        for p in self.procs:
            try:
                codes.append(p.wait(max(0.1, deadline - time.monotonic())))
            except TimeoutError as e:
                late.append(str(e))
                codes.append(None)
        if late:
            raise TimeoutError("; ".join(late))
        return codes

    def kill(self):
        for p in self.procs:
            if not p._done.is_set():
                p.kill()


def _install_stop_handlers():
    """Turns SIGTERM and SIGHUP into SystemExit(128 + signal), so `with Cluster()` and finally
    blocks run. Only where the signal has its default action and on the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return
    def stop(signum, frame):
        raise SystemExit(128 + signum)
    for s in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(s) == signal.SIG_DFL:
            signal.signal(s, stop)


class Cluster:
    """N emulated hosts. `rates`: None, one rate for every link, or a list (or comma list) of
    one per host, in tc's units (2gbit, 500mbit); each shapes both directions of that host's
    link. Use as a context manager, or call up() and down(). Names carry the owner's pid in hex
    and a per-process sequence digit, so clusters of concurrent processes never collide."""

    def __init__(self, hosts=2, rates=None, host_names=None):
        if not 1 <= hosts <= MAX_HOSTS:
            raise ValueError(f"hosts {hosts}: expected 1 to {MAX_HOSTS}")
        self.n = hosts
        self.rates = self._parse_rates(rates, hosts)
        self.names = host_names or [f"h{i}" for i in range(hosts)]
        if len(self.names) != hosts or len(set(self.names)) != hosts:
            raise ValueError(f"host_names {host_names}: expected {hosts} distinct names")
        global _seq
        with _seq_lock:
            seq, _seq = _seq, (_seq + 1) % 16
        self.tag = f"{os.getpid():x}{seq:x}"
        self.bridge = f"{PREFIX}{self.tag}br"
        self.dir = os.path.join(STATE_ROOT, self.tag)
        self.hosts = []
        self.subnet = None
        self._up = False

    @staticmethod
    def _parse_rates(rates, n):
        if rates is None or rates == "":
            return [None] * n
        if isinstance(rates, str):
            rates = rates.split(",")
        rates = [r.strip() or None for r in rates]
        if len(rates) == 1:
            rates = rates * n
        if len(rates) != n:
            raise ValueError(f"rates {rates}: {len(rates)} rates for {n} hosts")
        for r in rates:
            if r is not None and not _RATE.match(r):
                raise ValueError(f"rate '{r}': expected a number and a tc unit, e.g. 2gbit")
        return rates

    # ---- building and tearing down ----

    def __enter__(self):
        self.up()
        return self

    def __exit__(self, *exc):
        self.down()
        return False

    def up(self):
        reason = why_unavailable()
        if reason:
            raise Unavailable(reason)
        _install_stop_handlers()
        os.makedirs(STATE_ROOT, exist_ok=True)
        try:
            with open(os.path.join(STATE_ROOT, ".lock"), "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                cleanup_stale()
                self.subnet = self._pick_subnet()
                if os.path.exists(self.dir):  # this pid's leftover from an earlier process
                    _teardown(self.dir)
                os.makedirs(self.dir)
                self.hosts = [
                    Host(i, self.names[i], f"{self.subnet}.{i + 1}", f"{PREFIX}{self.tag}h{i}",
                         os.path.join(self.dir, f"h{i}.uts"), f"{PREFIX}{self.tag}p{i}",
                         self.rates[i]) for i in range(self.n)]
                self._write_state()  # first, so that a crash from here on can be cleaned up
            self._up = True
            self._build()
        except Exception as e:
            self.down()
            # Root without CAP_NET_ADMIN or CAP_SYS_ADMIN (a container): nothing can be built.
            if isinstance(e, RuntimeError) and re.search(r"not permitted|ermission denied",
                                                         str(e)):
                raise Unavailable(str(e)) from e
            raise

    def _pick_subnet(self):
        taken = set()
        for tag in os.listdir(STATE_ROOT):
            try:
                with open(os.path.join(STATE_ROOT, tag, "state.json")) as f:
                    taken.add(json.load(f)["subnet"])
            except (OSError, ValueError, KeyError):
                pass
        routes = _sh("ip", "-4", "route", "show", "table", "all", check=False).stdout
        n = int(self.tag, 16)
        for k in range(100 * 256):
            v = (n + k) % (100 * 256)
            subnet = f"10.{150 + v // 256}.{v % 256}"
            if subnet not in taken and f"{subnet}." not in routes:
                return subnet
        raise RuntimeError("no free 10.150-249.x.0/24 subnet")

    def _write_state(self):
        state = {"owner_pid": os.getpid(), "owner_start": _pid_start(os.getpid()),
                 "tag": self.tag, "subnet": self.subnet, "bridge": self.bridge,
                 "hosts": [h.to_json() for h in self.hosts]}
        with open(os.path.join(self.dir, "state.json"), "w") as f:
            json.dump(state, f, indent=1)
        # For emucluster-rsh (mpirun's agent): name address netns uts, one host a line.
        with open(self.hostfile, "w") as f:
            for h in self.hosts:
                f.write(f"{h.name} {h.addr} {h.netns} {h.uts}\n")

    def _build(self):
        _sh("ip", "link", "add", self.bridge, "type", "bridge")
        _sh("ip", "link", "set", self.bridge, "up")
        for h in self.hosts:
            _sh("ip", "netns", "add", h.netns)
            _sh("ip", "link", "add", h.veth, "type", "veth", "peer", "name", "eth0", "netns",
                h.netns)
            _sh("ip", "link", "set", h.veth, "master", self.bridge, "up")
            _sh("ip", "-n", h.netns, "addr", "add", f"{h.addr}/24", "dev", "eth0")
            _sh("ip", "-n", h.netns, "link", "set", "eth0", "up")
            _sh("ip", "-n", h.netns, "link", "set", "lo", "up")
            open(h.uts, "w").close()
            # A persistent UTS namespace: unshare bind-mounts it on the file, so every nsenter
            # finds the same host name and no holder process has to live.
            _sh("unshare", f"--uts={h.uts}", "hostname", h.name)
            if h.rate:
                self.set_rate(h.index, h.rate)
        for h in self.hosts:  # the bridge forwards once its ports leave the listening state
            self._wait_reachable(h)

    def _wait_reachable(self, host, timeout=10):
        """Bridge ports start forwarding at once (STP is off), but the veth's carrier can take
        a moment; waits until host 0 sees `host`'s address in its neighbour table or answers."""
        deadline = time.monotonic() + timeout
        probe = ["/usr/bin/python3", "-c",
                 "import socket,sys\ns=socket.socket()\ns.settimeout(0.5)\n"
                 "try: s.connect((sys.argv[1], 9))\nexcept ConnectionRefusedError: sys.exit(0)\n"
                 "except OSError: sys.exit(1)\nsys.exit(0)", host.addr]
        src = self.hosts[0] if host.index != 0 else host
        while time.monotonic() < deadline:
            if src.run(probe, capture_output=True).returncode == 0:
                return
            time.sleep(0.1)
        raise RuntimeError(f"host {host.name} ({host.addr}) unreachable from {src.name} "
                           f"after {timeout} s")

    def down(self):
        """Kills every process left in the hosts, removes the links, bridge, namespaces and
        state. Safe to call twice."""
        if os.path.isdir(self.dir):
            _teardown(self.dir)
        self._up = False

    # ---- links ----

    def set_rate(self, i, rate):
        """Shapes host i's link to `rate` both ways (None: unshaped): tbf on the egress of
        both ends of its veth pair."""
        h = self.hosts[i]
        for netns, dev in ((None, h.veth), (h.netns, "eth0")):
            pre = ["ip", "netns", "exec", netns] if netns else []
            _sh(*pre, "tc", "qdisc", "del", "dev", dev, "root", check=False)
            if rate:
                bits = _rate_bits(rate)
                # At least one timer tick's worth of bytes (HZ 250: 4 ms) and a 64 KiB GSO
                # packet, or tbf drops what it can never send.
                burst = max(int(bits / 8 * 0.004), 128 * 1024)
                _sh(*pre, "tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", rate,
                    "burst", str(burst), "latency", "50ms")
        h.rate = rate

    def cut(self, i):
        """Cuts host i off: the bridge end of its link goes down (no carrier, no resets)."""
        _sh("ip", "link", "set", self.hosts[i].veth, "down")

    def restore(self, i):
        _sh("ip", "link", "set", self.hosts[i].veth, "up")

    def link_bytes(self, i):
        """What host i's link has carried since the cluster was built: {"sent": bytes the
        host sent, "received": bytes it received}, from the bridge end's counters."""
        def read(what):
            with open(f"/sys/class/net/{self.hosts[i].veth}/statistics/{what}") as f:
                return int(f.read())
        return {"sent": read("rx_bytes"), "received": read("tx_bytes")}

    # ---- files and jobs ----

    @property
    def hostfile(self):
        """Lines of "name address netns uts-file", read by emucluster-rsh."""
        return os.path.join(self.dir, "hosts")

    def mpi_hostfile(self, slots):
        path = os.path.join(self.dir, f"mpi-hosts-{slots}")
        with open(path, "w") as f:
            for h in self.hosts:
                f.write(f"{h.name} slots={slots}\n")
        return path

    def substitute(self, cmd, i):
        """`cmd` with {host} {addr} {node_rank} {nnodes} {master_addr} replaced for host i."""
        h = self.hosts[i]
        values = {"{host}": h.name, "{addr}": h.addr, "{node_rank}": str(i),
                  "{nnodes}": str(self.n), "{master_addr}": self.hosts[0].addr}
        out = []
        for arg in cmd:
            for k, v in values.items():
                arg = arg.replace(k, v)
            out.append(arg)
        return out

    def run_all(self, cmd, env=None, echo=False, hosts=None):
        """Starts `cmd` (placeholders substituted) on each host (all, or the indices in
        `hosts`); returns a Job."""
        procs = []
        for i in (range(self.n) if hosts is None else hosts):
            h = self.hosts[i]
            procs.append(Proc(h.argv(self.substitute(cmd, i)), env=env, label=h.name,
                              echo_prefix=f"[{h.name}] " if echo else None))
        return Job(procs)

    def c10drun(self, program, nproc_per_node=1, c10drun="c10drun", master_port=29500,
                token=None, env=None, echo=False, hosts=None, extra_args=()):
        """Starts a c10d job: one c10drun per host, node rank = the host's position in `hosts`
        (default: every host), node 0's store on that host's address. `token`: the job's
        C10D_STORE_TOKEN (None: a fresh random one; "": none, the job is open). Returns a Job
        whose `token` is the token."""
        hosts = list(range(self.n)) if hosts is None else list(hosts)
        env = job_env(token, env)
        procs = [self.c10drun_node(i, node, len(hosts), program, nproc_per_node, c10drun,
                                   master_port, env, echo, hosts[0], extra_args)
                 for node, i in enumerate(hosts)]
        job = Job(procs)
        job.token = env.get("C10D_STORE_TOKEN", "")
        return job

    def c10drun_node(self, i, node_rank, nnodes, program, nproc_per_node=1, c10drun="c10drun",
                     master_port=29500, env=None, echo=False, master=0, extra_args=()):
        """One node of a c10d job: c10drun on host i, as node `node_rank` of `nnodes`, the store
        on host `master` (hosted there by node 0). `env`: see job_env(). The hosts share this
        machine's CPUs, which c10drun cannot know: binding each host's ranks to its own share of
        them would stack local rank 0 of every host on one CPU, so the job runs unbound (as
        mpirun's default leaves jobs of more than 2 ranks) unless `extra_args` says --bind-to.
        Returns a Proc."""
        h = self.hosts[i]
        extra_args = list(extra_args)
        if not any(a == "--bind-to" or a.startswith("--bind-to=") for a in extra_args):
            extra_args += ["--bind-to", "none"]
        argv = [os.path.abspath(c10drun) if os.sep in c10drun else c10drun,
                "--nnodes", str(nnodes), "--node-rank", str(node_rank),
                "--nproc-per-node", str(nproc_per_node), "--master-addr",
                self.hosts[master].addr, "--master-port", str(master_port), *extra_args, "--",
                *self.substitute(program, i)]
        return Proc(h.argv(argv), env=env, label=f"{h.name} c10drun",
                    echo_prefix=f"[{h.name}] " if echo else None)

    def mpirun_argv(self, program, per_host=1, mpirun="mpirun", mca=(), yield_when_idle=True):
        """argv that runs mpirun inside host 0, placing `per_host` ranks on every host, each
        host reached through emucluster-rsh; run it with env=self.mpi_env(). `mca`: more
        (name, value) pairs. `yield_when_idle`: the hosts share this machine's cores, which
        mpirun cannot know (each host has per_host slots), so its ranks would busy-poll; on 2
        cores that made the MPI conformance suite at 2 x 2 ranks take 48 s instead of 9."""
        args = [mpirun, "--allow-run-as-root", "--hostfile", self.mpi_hostfile(per_host),
                "-np", str(per_host * self.n), "--mca", "plm_rsh_agent", RSH_AGENT,
                "--mca", "plm_rsh_no_tree_spawn", "1", "--mca", "btl", "self,vader,tcp",
                "--mca", "btl_tcp_if_include", "eth0", "--mca", "oob_tcp_if_include", "eth0"]
        if yield_when_idle:
            args += ["--mca", "mpi_yield_when_idle", "1"]
        for k, v in mca:
            args += ["--mca", k, v]
        return self.hosts[0].argv(args + list(program))

    def mpi_env(self, base=None):
        env = dict(os.environ if base is None else base)
        env["C10D_CLUSTER_HOSTS"] = self.hostfile
        return env

    def mpirun(self, program, per_host=1, mpirun="mpirun", env=None, echo=False, mca=(),
               yield_when_idle=True):
        """Starts mpirun_argv(...) with the agent's environment; returns a Proc."""
        return Proc(self.mpirun_argv(program, per_host, mpirun, mca, yield_when_idle),
                    env=self.mpi_env(env), label="mpirun", echo_prefix="" if echo else None)


def job_env(token=None, base=None):
    """`base` (default os.environ) with C10D_STORE_TOKEN set to `token`: None makes a fresh
    random one, "" removes it (an open job)."""
    env = dict(os.environ if base is None else base)
    if token is None:
        token = secrets.token_hex(32)
    if token:
        env["C10D_STORE_TOKEN"] = token
    else:
        env.pop("C10D_STORE_TOKEN", None)
    return env


def _rate_bits(rate):
    m = re.match(r"^(\d+(?:\.\d+)?)([kmgt]?)(bit|bps)$", rate)
    scale = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}[m.group(2)]
    return float(m.group(1)) * scale * (8 if m.group(3) == "bps" else 1)


def _kill_netns_procs(netns):
    r = _sh("ip", "netns", "pids", netns, check=False)
    for pid in r.stdout.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass


def _teardown(state_dir):
    """Removes everything the cluster of `state_dir` made, from its state.json when there is
    one, and the directory."""
    try:
        with open(os.path.join(state_dir, "state.json")) as f:
            state = json.load(f)
    except (OSError, ValueError):
        state = {"hosts": [], "bridge": None}
    for h in state["hosts"]:
        _kill_netns_procs(h["netns"])
    for h in state["hosts"]:
        _sh("ip", "link", "del", h["veth"], check=False)
        _sh("ip", "netns", "del", h["netns"], check=False)
        _sh("umount", h["uts"], check=False)
    if state.get("bridge"):
        _sh("ip", "link", "del", state["bridge"], check=False)
    for name in os.listdir(state_dir) if os.path.isdir(state_dir) else []:
        _sh("umount", os.path.join(state_dir, name), check=False)
    shutil.rmtree(state_dir, ignore_errors=True)


def cleanup_stale():
    """Removes the clusters (and stray interfaces and namespaces named PREFIX...) whose owner
    process is gone. Returns the names of what it removed."""
    removed = []
    if os.path.isdir(STATE_ROOT):
        for tag in os.listdir(STATE_ROOT):
            path = os.path.join(STATE_ROOT, tag)
            if not os.path.isdir(path):
                continue
            try:
                with open(os.path.join(path, "state.json")) as f:
                    start = json.load(f).get("owner_start")
            except (OSError, ValueError):
                start = None
            if not _tag_owner_alive(tag, start):
                _teardown(path)
                removed.append(path)
    netns = _sh("ip", "netns", "list", check=False).stdout.split("\n")
    for ns in (line.split()[0] for line in netns if line.strip()):
        m = _NAME.match(ns)
        if m and not _tag_owner_alive(m.group(1)):
            _kill_netns_procs(ns)
            _sh("ip", "netns", "del", ns, check=False)
            removed.append(ns)
    links = _sh("ip", "-o", "link", "show", check=False).stdout.split("\n")
    for line in links:
        parts = line.split(":")
        if len(parts) < 2:
            continue
        name = parts[1].strip().split("@")[0]
        m = _NAME.match(name)
        if m and not _tag_owner_alive(m.group(1)):
            _sh("ip", "link", "del", name, check=False)
            removed.append(name)
    return removed


# ---- CLI ----

def _cli(argv):
    modes = ("run", "c10drun", "mpirun", "up", "cleanup", "check")
    mode = argv.pop(0) if argv and argv[0] in modes else "run"
    p = argparse.ArgumentParser(
        prog=f"emucluster.py {mode}",
        description="Emulated hosts on one machine (network + UTS namespaces on a bridge).",
        epilog="run: COMMAND on every host at once, with {host} {addr} {node_rank} {nnodes} "
               "{master_addr} substituted; exit status: the first non-zero host's. "
               "c10drun: one c10drun per host, store on host 0, a random C10D_STORE_TOKEN. "
               "mpirun: mpirun in host 0, PER_HOST ranks on every host.")
    p.add_argument("--hosts", type=int, default=2)
    p.add_argument("--rates", default=None, help="one tc rate for all, or one per host")
    p.add_argument("--timeout", type=float, default=3600, help="seconds before the command "
                   "is killed (default 3600)")
    if mode == "c10drun":
        p.add_argument("--nproc-per-node", type=int, default=1)
        p.add_argument("--c10drun", default=os.path.join(HERE, "../../build/tools/c10drun"))
        p.add_argument("--master-port", type=int, default=29500)
    if mode == "mpirun":
        p.add_argument("--per-host", type=int, default=1)
    if mode in ("run", "c10drun", "mpirun"):
        p.add_argument("command", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    command = getattr(a, "command", [])
    if command and command[0] == "--":
        command = command[1:]
    if mode in ("run", "c10drun", "mpirun") and not command:
        p.error("missing the command (after --)")
    if mode == "cleanup":
        for name in cleanup_stale():
            print(f"removed {name}")
        return 0
    reason = why_unavailable()
    if reason:
        print(f"emucluster: cannot build emulated hosts here: {reason}", file=sys.stderr)
        return SKIP
    if mode == "check":
        return 0
    with Cluster(a.hosts, a.rates) as c:
        for h in c.hosts:
            print(f"emucluster: {h.name} {h.addr} netns {h.netns} link {h.veth}"
                  f"{' rate ' + h.rate if h.rate else ''}", file=sys.stderr)
        if mode == "up":
            print(f"emucluster: up; enter a host with: nsenter --net=/run/netns/NETNS "
                  f"--uts={c.dir}/hN.uts -- sh; mpirun agent: C10D_CLUSTER_HOSTS={c.hostfile} "
                  f"{RSH_AGENT}; Ctrl-C tears it down", file=sys.stderr)
            try:
                signal.pause()
            except KeyboardInterrupt:
                pass
            return 0
        if mode == "mpirun":
            proc = c.mpirun(command, per_host=a.per_host, echo=True)
            return proc.wait(a.timeout)
        if mode == "c10drun":
            job = c.c10drun(command, nproc_per_node=a.nproc_per_node, c10drun=a.c10drun,
                            master_port=a.master_port, echo=True)
        else:
            job = c.run_all(command, echo=True)
        codes = job.wait(a.timeout)
        return next((rc if rc > 0 else 128 - rc for rc in codes if rc != 0), 0)


if __name__ == "__main__":
    try:
        sys.exit(_cli(sys.argv[1:]))
    except KeyboardInterrupt:
        sys.exit(130)
