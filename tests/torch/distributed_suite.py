#!/usr/bin/python3
"""PyTorch's own distributed test suite, run against the c10d backend and against gloo.

Debian's python3-torch ships torch/testing/_internal/distributed/distributed_test.py, whose
`DistributedTest._DistTestBase` is the suite PyTorch runs against gloo (through
test/distributed/test_distributed_spawn.py, which Debian does not ship). This driver does what
that file does -- a `TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase)`
whose setUp spawns WORLD_SIZE processes -- with `BACKEND=c10d` as well as `BACKEND=gloo`:

  - c10d joins every backend feature set of the suite that gloo is in (`_FEATURES`), before
    the suite module is imported (its skip decorators read those sets at import);
  - every process that runs c10d tests imports c10d_torch, which registers the backend: the
    runner, and the spawned ranks, which re-run this file's top level (as `__mp_main__`) to
    find the test class, and so run `_suite_module()` below before they unpickle it;
  - Debian does not package `expecttest`; tests/torch/suite_stubs/expecttest.py stands in;
  - on Python 3.11, DDP's ReplicatedTensor mode stays off (`_keep_ddp_off_sharded_tensors`).

Usage (from the repository root, after building; see docs/torch.md):

  tests/torch/distributed_suite.py --backend both --world 2,3 --json out.json
  tests/torch/distributed_suite.py -k 'test_all_reduce_*' -k test_barrier -v
  tests/torch/distributed_suite.py --tests-from tests/torch/suite_subset.txt
  tests/torch/distributed_suite.py --list
  tests/torch/distributed_suite.py --gates     # the tests the suite skips for non-gloo backends
  tests/torch/distributed_suite.py --ungate --tests-from tests/torch/suite_gloo_only.txt

Each (backend, world size) runs in a runner process of its own, from a copy of this file in
the log directory; the tests of one run go one at a time (each test is one process group). The
exit status is 1 when a c10d test fails that tests/torch/suite_known_failures.txt does not list
for that world size, or a runner dies.
"""

import argparse
import ast
import datetime
import fnmatch
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
KNOWN_FAILURES = os.path.join(HERE, "suite_known_failures.txt")
GLOO_ONLY = os.path.join(HERE, "suite_gloo_only.txt")
SUITE_MODULE = "torch.testing._internal.distributed.distributed_test"
ROLE_ENV = "C10D_SUITE_ROLE"
UNGATE_ENV = "C10D_SUITE_UNGATE"

# The suite's feature sets (DistTestCases.backend_feature) that c10d joins: every set gloo is
# in, and "plugin", the set for backends registered through Backend.register_backend, as c10d
# is. "gpu" and "cuda" gate CUDA tests, which also need GPUs (they skip without), and a few CPU
# tests too (the object collectives); c10d_torch refuses CUDA tensors, so on a machine with GPUs
# its CUDA tests fail with that refusal.
_FEATURES = ("gpu", "cuda", "ddp", "subgroup", "plugin")


# ---------------------------------------------------------------------------------------------
# The suite itself: imported by the runner and by every spawned rank.
# ---------------------------------------------------------------------------------------------

def _use_expecttest_stand_in():
    try:
        import expecttest  # noqa: F401
    except ImportError:
        sys.path.insert(0, os.path.join(HERE, "suite_stubs"))


def _register_c10d_features():
    from torch.testing._internal.common_distributed import DistTestCases

    for feature in _FEATURES:
        DistTestCases.backend_feature[feature].add("c10d")


def _decoration_skips(module):
    """{test name: skip reason} for the tests the suite's decorators skip in `module`."""
    base = module.DistributedTest._DistTestBase
    skips = {}
    for name in dir(base):
        if name.startswith("test"):
            fn = getattr(base, name)
            if getattr(fn, "__unittest_skip__", False):
                skips[name] = getattr(fn, "__unittest_skip_why__", "")
    return skips


def _load_suite_as(backend, module_name):
    """A second copy of the suite module, imported as if BACKEND were `backend`."""
    import importlib.util

    spec = importlib.util.find_spec(SUITE_MODULE)
    saved = os.environ.get("BACKEND")
    os.environ["BACKEND"] = backend
    try:
        copy = importlib.util.module_from_spec(importlib.util.spec_from_file_location(
            module_name, spec.origin))
        copy.__spec__.loader.exec_module(copy)
    finally:
        os.environ["BACKEND"] = saved
    return copy


def _keep_ddp_off_sharded_tensors():
    """Leaves DDP's ReplicatedTensor mode off when torch.distributed._shard cannot be imported.

    The suite's ranks turn that mode on (`_set_ddp_with_replicated_tensor(True)` in
    TestDistBackend._run), so every DDP constructor imports torch.distributed._shard; torch
    1.13's copy of it fails to import on Python 3.11 (a dataclass field whose default is a
    TensorProperties instance: "mutable default ... use default_factory"), which fails every DDP
    test, gloo's and c10d's alike, before a byte is sent. The mode only wraps the module in
    ReplicatedTensors; DDP's communication is the same without it.
    """
    try:
        import torch.distributed._shard  # noqa: F401
    except ValueError:
        import torch.nn.parallel._replicated_tensor_ddp_utils as utils

        utils._set_ddp_with_replicated_tensor = lambda value: None


def _suite_module():
    _use_expecttest_stand_in()
    import torch  # noqa: F401

    _keep_ddp_off_sharded_tensors()

    if os.environ["BACKEND"] == "c10d":
        import c10d_torch  # noqa: F401  (registers the backend in this process)

        # Only then: the suite's gates look the sets' names up as backends.
        _register_c10d_features()
    if os.environ.get(UNGATE_ENV) == "1" and os.environ["BACKEND"] != "gloo":
        return _import_suite_as_gloo()
    import importlib

    return importlib.import_module(SUITE_MODULE)


class _NamedAsGloo(str):
    """A backend name the suite's checks take for "gloo" while its value stays the real name.

    The suite compares its module-level BACKEND with backend names in skip decorators
    (`BACKEND != "gloo"`, `require_backend({"gloo"})`) and in test bodies (`if BACKEND ==
    "mpi" or BACKEND == "gloo":` picks the CPU model). With this name, both answer as for gloo,
    while init_process_group(backend=BACKEND) and BACKEND.lower() still say the real backend.
    """

    def __eq__(self, other):
        return other == "gloo" or str.__eq__(self, other)

    def __ne__(self, other):
        return not self.__eq__(other)

    def __hash__(self):  # found in sets that hold "gloo"
        return hash("gloo")


def _import_suite_as_gloo():
    """The suite module, with its BACKEND a _NamedAsGloo: for --ungate.

    Executes the module's own source (compiled under its own file name, so tracebacks and line
    numbers are the file's) with one assignment changed, and registers it under its name before
    anything imports it.
    """
    import importlib.util

    spec = importlib.util.find_spec(SUITE_MODULE)
    with open(spec.origin) as f:
        source = f.read()
    line = 'BACKEND = os.environ["BACKEND"]\n'
    if source.count(line) != 1:
        raise SystemExit(f"--ungate: {spec.origin} has no single line {line.strip()!r}")
    source = source.replace(line, 'BACKEND = _NamedAsGloo(os.environ["BACKEND"])\n')
    module = importlib.util.module_from_spec(spec)
    module._NamedAsGloo = _NamedAsGloo
    sys.modules[SUITE_MODULE] = module
    exec(compile(source, spec.origin, "exec"), module.__dict__)
    return module


if os.environ.get(ROLE_ENV) == "runner":
    import torch

    # torch's common_utils parses sys.argv when imported: keep the driver's flags from it.
    _argv, sys.argv = sys.argv, sys.argv[:1]
    _suite = _suite_module()
    sys.argv = _argv

    # As test/distributed/test_distributed_spawn.py defines it.
    class TestDistBackendWithSpawn(_suite.TestDistBackend, _suite.DistributedTest._DistTestBase):
        def setUp(self):
            super().setUp()
            self._spawn_processes()
            torch.backends.cudnn.flags(enabled=True, allow_tf32=False).__enter__()


# ---------------------------------------------------------------------------------------------
# Runner: one (backend, world size), in a process of its own; writes one JSON line per test.
# ---------------------------------------------------------------------------------------------

def _test_names():
    return sorted(n for n in dir(TestDistBackendWithSpawn) if n.startswith("test"))


def _matches(name, patterns):
    """unittest's -k rule: a pattern with a wildcard is an fnmatch pattern, else a substring."""
    if not patterns:
        return True
    for p in patterns:
        if any(c in p for c in "*?["):
            if fnmatch.fnmatchcase(name, p) or fnmatch.fnmatchcase(name, "*" + p + "*"):
                return True
        elif p in name:
            return True
    return False


_EXC_LINE = re.compile(r"^(?:[\w.]+\.)?\w*(?:Error|Exception|Exit|Interrupt)\b.*$|^AssertionError.*$")


_FRAME_LINE = re.compile(r"^\s*frame #\d+: ")
_NOT_REASON = re.compile(r"^RuntimeError: Process \d+ (exited|terminated)|^Exception raised from ")


def _reason_of(text):
    """The exception line a failure comes down to: the last one in a child's traceback."""
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    # Not the parent's "Process N exited with error code" wrapper, nor c10::Error's trailer
    # ("Exception raised from <function> at <file>", then a C++ backtrace) after its message.
    found = [l for l in lines if _EXC_LINE.match(l) and not _NOT_REASON.match(l)]
    if found:
        return found[-1][:300]
    return lines[-1][:300] if lines else ""


def _run_runner(args):
    import unittest

    names = [n for n in _test_names() if _matches(n, args.filter)]
    if args.tests_from:
        wanted = _read_names(args.tests_from)
        missing = sorted(set(wanted) - set(names))
        if missing and not args.filter:
            raise SystemExit(f"{args.tests_from}: not tests of the suite: {', '.join(missing)}")
        names = [n for n in names if n in set(wanted)]
    if args.list:
        print(json.dumps(names))
        return 0

    out = open(args._runner_out, "w", buffering=1)

    class Result(unittest.TestResult):
        def startTest(self, test):
            super().startTest(test)
            self._t0 = time.monotonic()
            self._outcome = ("passed", "")

        def addSuccess(self, test):
            self._outcome = ("passed", "")

        def addFailure(self, test, err):
            super().addFailure(test, err)
            self._outcome = ("failed", self.failures[-1][1])

        def addError(self, test, err):
            super().addError(test, err)
            self._outcome = ("errors", self.errors[-1][1])

        def addSkip(self, test, reason):
            self._outcome = ("skipped", reason)

        def addExpectedFailure(self, test, err):
            self._outcome = ("passed", "expected failure")

        def addUnexpectedSuccess(self, test):
            self._outcome = ("failed", "unexpected success")

        def stopTest(self, test):
            super().stopTest(test)
            outcome, detail = self._outcome
            name = test.id().split(".")[-1]
            seconds = round(time.monotonic() - self._t0, 2)
            reason = detail if outcome == "skipped" else _reason_of(detail)
            record = {"test": name, "outcome": outcome, "seconds": seconds, "reason": reason}
            if outcome in ("failed", "errors"):
                # Without c10::Error's C++ backtraces, which would crowd the Python ones out.
                record["detail"] = "\n".join(
                    l for l in detail.splitlines() if not _FRAME_LINE.match(l))[-8000:]
            out.write(json.dumps(record) + "\n")
            print(f"{name} ... {outcome} ({seconds}s){': ' + reason if reason else ''}",
                  flush=True)

    suite = unittest.TestSuite(TestDistBackendWithSpawn(n) for n in names)
    suite.run(Result())
    out.close()
    return 0


# ---------------------------------------------------------------------------------------------
# Driver: runs the runners, compares, checks against the known failures.
# ---------------------------------------------------------------------------------------------

def _load_known_failures(path):
    """[(name pattern, world or None, reason)] from the known-failures file."""
    known = []
    if not path or not os.path.exists(path):
        return known
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split(None, 2)
            if len(parts) < 3:
                raise SystemExit(f"{path}: want 'test world reason', got: {line}")
            world = None if parts[1] == "*" else int(parts[1])
            known.append((parts[0], world, parts[2]))
    return known


def _load_gloo_only(path):
    """{test: 'file:line condition'} from the --gates listing."""
    gated = {}
    if path and os.path.exists(path):
        with open(path) as f:
            for line in f:
                if line.startswith("#") or "|" not in line:
                    continue
                fields = [x.strip() for x in line.split("|")]
                gated[fields[0]] = f"{fields[1]}: {fields[2]}"
    return gated


def _known_reason(known, name, world):
    for pattern, w, reason in known:
        if (w is None or w == world) and fnmatch.fnmatchcase(name, pattern):
            return reason
    return None


def _runner_env(args, backend, world):
    env = dict(os.environ)
    env.update({
        ROLE_ENV: "runner",
        "BACKEND": backend,
        "WORLD_SIZE": str(world),
        "DISTRIBUTED_TESTS_DEFAULT_TIMEOUT": str(args.timeout),
        UNGATE_ENV: "1" if args.ungate else "0",
        # The suite reads INIT_METHOD at import and runs its file:// only tests under file://,
        # as PyTorch's run_test.py does with its init file. Each test's setUp sets its own
        # file before it spawns the ranks, so this one is never opened.
        "INIT_METHOD": "file://" + os.path.join(args.log_dir, "init_file_unused"),
        "PYTHONUNBUFFERED": "1",
    })
    pythonpath = [os.path.join(args.build_dir, "python")]
    if env.get("PYTHONPATH"):
        pythonpath.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(pythonpath)
    return env


def _snapshot(args):
    """A copy of this driver (and the stand-in) in the log directory, which the runners and
    their ranks run: each rank re-imports the driver, and a run takes an hour or more, in which
    the checkout's copy may change."""
    import shutil

    where = os.path.join(args.log_dir, "driver")
    os.makedirs(where, exist_ok=True)
    shutil.copy(os.path.abspath(__file__), os.path.join(where, os.path.basename(__file__)))
    shutil.copytree(os.path.join(HERE, "suite_stubs"), os.path.join(where, "suite_stubs"),
                    dirs_exist_ok=True)
    args.driver = os.path.join(where, os.path.basename(__file__))


def _runner_cmd(args, extra):
    cmd = [sys.executable, getattr(args, "driver", os.path.abspath(__file__)), "--_runner"]
    for p in args.filter:
        cmd += ["-k", p]
    if args.tests_from:
        cmd += ["--tests-from", os.path.abspath(args.tests_from)]
    return cmd + extra


def _read_names(path):
    """Test names: the first word of each line ('#' starts a comment)."""
    names = []
    with open(path) as f:
        for line in f:
            fields = line.split("#", 1)[0].replace("|", " ").split()
            if fields:
                names.append(fields[0])
    return names


def _runner_json(args, backend, flag, what):
    """The JSON a runner prints last when started with `flag`; exits naming `what` on failure."""
    env = _runner_env(args, backend, args.worlds[0])
    proc = subprocess.run(_runner_cmd(args, [flag]), env=env, capture_output=True, text=True,
                          timeout=300)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        raise SystemExit(f"{what} failed")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _list(args):
    return _runner_json(args, "gloo", "--list", "listing the suite")


def _run_config(args, backend, world, log_dir):
    tag = f"{backend}-w{world}"
    jsonl = os.path.join(log_dir, f"{tag}.jsonl")
    log = os.path.join(log_dir, f"{tag}.log")
    done = os.path.join(log_dir, f"{tag}.done")
    if args.resume and os.path.exists(done):
        with open(done) as f:
            run = json.load(f)
        print(f"== {tag}: results of an earlier run ({done})", flush=True)
        return run
    print(f"== {tag}: running (log {log})", flush=True)
    t0 = time.monotonic()
    with open(log, "w") as logf:
        proc = subprocess.Popen(_runner_cmd(args, ["--_runner-out", jsonl]),
                                env=_runner_env(args, backend, world), stdout=subprocess.PIPE,
                                stderr=logf, text=True, cwd=REPO)
        for line in proc.stdout:
            logf.write(line)
            logf.flush()
            if args.verbose:
                print(f"  [{tag}] {line.rstrip()}", flush=True)
        proc.wait()
    results = {}
    if os.path.exists(jsonl):
        with open(jsonl) as f:
            for line in f:
                r = json.loads(line)
                results[r["test"]] = r
    seconds = round(time.monotonic() - t0, 1)
    run = {"backend": backend, "world": world, "seconds": seconds, "exit": proc.returncode,
           "tests": results}
    if proc.returncode != 0:
        print(f"== {tag}: runner exited with {proc.returncode}; see {log}", flush=True)
    elif not args.filter and not args.tests_from:
        with open(done, "w") as f:
            json.dump(run, f)
    return run


OUTCOMES = ("passed", "failed", "errors", "skipped")


def _counts(run):
    c = {o: 0 for o in OUTCOMES}
    for r in run["tests"].values():
        c[r["outcome"]] += 1
    c["total"] = len(run["tests"])
    return c


def _summarize(args, runs, known, gated):
    lines = []
    for run in runs:
        c = _counts(run)
        lines.append(f"{run['backend']:>5} world {run['world']}: {c['passed']} passed, "
                     f"{c['failed']} failed, {c['skipped']} skipped, {c['errors']} errors "
                     f"({c['total']} tests, {run['seconds']} s)")
    by = {(r["backend"], r["world"]): r for r in runs}
    gaps = {}
    for world in args.worlds:
        g, c = by.get(("gloo", world)), by.get(("c10d", world))
        if not (g and c):
            continue
        gc, cc = _counts(g), _counts(c)
        lines.append("")
        lines.append(f"world {world}      gloo   c10d")
        for o in OUTCOMES + ("total",):
            lines.append(f"  {o:<9} {gc[o]:>6} {cc[o]:>6}")
        gap = sorted(n for n, r in g["tests"].items() if r["outcome"] == "passed"
                     and c["tests"].get(n, {}).get("outcome") != "passed")
        gaps[world] = gap
        lines.append(f"  passed with gloo, not with c10d: {len(gap)}")
        for n in gap:
            r = c["tests"].get(n, {"outcome": "missing", "reason": ""})
            k = _known_reason(known, n, world)
            if r["outcome"] == "skipped" and n in gated:
                note = f"the suite runs it for gloo only ({gated[n]})"
            elif k:
                note = f"known: {k}"
            else:
                note = f"UNEXPECTED: {r['reason']}"
            lines.append(f"    {n} [{r['outcome']}] {note}")
    unexpected, fixed = [], []
    for run in runs:
        if run["backend"] != "c10d":
            continue
        for n, r in sorted(run["tests"].items()):
            k = _known_reason(known, n, run["world"])
            if r["outcome"] in ("failed", "errors") and not k:
                unexpected.append((run["world"], n, r["reason"]))
            elif r["outcome"] == "passed" and k:
                fixed.append((run["world"], n))
    if unexpected:
        lines.append("")
        lines.append("c10d tests failing that suite_known_failures.txt does not list:")
        lines += [f"  world {w} {n}: {why}" for w, n, why in unexpected]
    if fixed:
        lines.append("")
        lines.append("c10d tests passing that suite_known_failures.txt lists (take them out):")
        lines += [f"  world {w} {n}" for w, n in fixed]
    ok = not unexpected and all(run["exit"] == 0 for run in runs)
    counts = [f"c10d world {r['world']}: {_counts(r)['passed']} passed, "
              f"{_counts(r)['failed'] + _counts(r)['errors']} failed, "
              f"{_counts(r)['skipped']} skipped" for r in runs if r["backend"] == "c10d"]
    return lines, ok, unexpected, fixed, gaps, counts


# ---------------------------------------------------------------------------------------------
# --gates: the tests the suite itself skips for any backend not named gloo.
# ---------------------------------------------------------------------------------------------

def _run_gates(args):
    """Runs in a runner-role process: compares decoration-time skips for gloo and c10d."""
    module = sys.modules[SUITE_MODULE]
    ours = _decoration_skips(module)
    gloo = _decoration_skips(_load_suite_as("gloo", "_c10d_suite_as_gloo"))
    path = module.__file__
    with open(path) as f:
        source = f.read()
    tree = ast.parse(source)
    decorators = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test"):
            decorators[node.name] = node.decorator_list
    rows = []
    for name in sorted(set(ours) - set(gloo)):
        cond = ""
        line = 0
        for d in decorators.get(name, []):
            text = ast.get_source_segment(source, d) or ""
            if "BACKEND" in text or "require_backend" in text:
                call = d if isinstance(d, ast.Call) else None
                if call is not None and call.args:
                    cond = " ".join((ast.get_source_segment(source, call.args[0]) or "").split())
                    fn = ast.get_source_segment(source, call.func)
                    if fn.startswith("require_backend"):
                        cond = f"{fn}({cond})"
                line = d.lineno
                break
        rows.append({"test": name, "condition": cond, "line": line, "reason": ours[name]})
    rel = "torch/testing/_internal/distributed/distributed_test.py"
    print(json.dumps({"file": rel, "rows": rows}))
    return 0


def _gates(args):
    data = _runner_json(args, "c10d", "--_gates", "reading the suite's gates")
    print(f"# Tests that {data['file']} ({_torch_version()}) skips for any")
    print("# backend not named gloo, once c10d is in every feature set gloo is in: the skip")
    print("# decorator's line in that file, its condition and its message. These are skipped,")
    print("# not failed, for c10d; --ungate runs them (docs/torch.md).")
    print("# Produced by: tests/torch/distributed_suite.py --gates")
    print("# test | file:line | condition | the suite's skip message")
    for r in data["rows"]:
        print(f"{r['test']} | distributed_test.py:{r['line']} | {r['condition']} | {r['reason']}")
    return 0


def _torch_version():
    """Debian's package version where there is one (torch.__version__ says 1.13.0a0 there)."""
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "python3-torch"],
                             capture_output=True, text=True)
        if out.returncode == 0 and out.stdout.strip():
            return "python3-torch " + out.stdout.strip()
    except OSError:
        pass
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"],
                         capture_output=True, text=True)
    return "torch " + out.stdout.strip()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", choices=("c10d", "gloo", "both"), default="c10d")
    ap.add_argument("--world", default="2", help="world sizes, comma-separated (default 2)")
    ap.add_argument("-k", "--filter", action="append", default=[],
                    help="run tests whose name has this substring or matches this glob "
                         "(repeatable; unittest's -k rule)")
    ap.add_argument("--tests-from", metavar="FILE",
                    help="run only the tests named in FILE (one a line)")
    ap.add_argument("--json", help="write the per-test results and counts here")
    ap.add_argument("--summary", help="write the text summary here too")
    ap.add_argument("--list", action="store_true", help="list the selected tests and exit")
    ap.add_argument("--gates", action="store_true",
                    help="list the tests the suite skips for any backend not named gloo")
    ap.add_argument("--ungate", action="store_true",
                    help="run c10d with the suite's backend-name checks answering as for gloo "
                         "(runs the tests it gates to gloo: see tests/torch/suite_gloo_only.txt)")
    ap.add_argument("--known-failures", default=KNOWN_FAILURES)
    ap.add_argument("--build-dir", default=os.path.join(REPO, "build"))
    ap.add_argument("--log-dir", help="runner logs and per-test JSON lines (default: a new "
                                      "directory under build/torch-suite)")
    ap.add_argument("--resume", action="store_true",
                    help="take the results of a whole (unfiltered) backend and world size that "
                         "an earlier run left in --log-dir instead of running it again")
    ap.add_argument("--timeout", type=int, default=300,
                    help="per-test timeout in seconds (the suite's default: 300)")
    ap.add_argument("-v", "--verbose", action="store_true", help="print each test's outcome")
    ap.add_argument("--_runner", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--_runner-out", help=argparse.SUPPRESS)
    ap.add_argument("--_gates", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.worlds = [int(w) for w in args.world.split(",") if w]
    if not args.log_dir:
        args.log_dir = os.path.join(args.build_dir, "torch-suite",
                                    datetime.datetime.now().strftime("%Y%m%d-%H%M%S"))
    args.log_dir = os.path.abspath(args.log_dir)
    if not args._runner:
        os.makedirs(args.log_dir, exist_ok=True)

    if args._runner:
        return _run_gates(args) if args._gates else _run_runner(args)
    if args.gates:
        return _gates(args)
    if args.list:
        for n in _list(args):
            print(n)
        return 0

    backends = ("c10d", "gloo") if args.backend == "both" else (args.backend,)
    log_dir = args.log_dir
    _snapshot(args)
    known = _load_known_failures(args.known_failures)
    runs = []
    for world in args.worlds:
        for backend in backends:
            runs.append(_run_config(args, backend, world, log_dir))
    lines, ok, unexpected, fixed, gaps, counts = _summarize(args, runs, known,
                                                            _load_gloo_only(GLOO_ONLY))
    text = "\n".join(lines)
    print(text)
    if args.summary:
        with open(args.summary, "w") as f:
            f.write(text + "\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({
                "date": datetime.datetime.now().isoformat(timespec="seconds"),
                "filters": args.filter,
                "ungate": args.ungate,
                "runs": [dict(r, counts=_counts(r)) for r in runs],
                "gloo_pass_c10d_not": {str(w): g for w, g in gaps.items()},
                "unexpected": [{"world": w, "test": n, "reason": why}
                               for w, n, why in unexpected],
                "known_but_passed": [{"world": w, "test": n} for w, n in fixed],
            }, f, indent=1)
    # A closing line ctest and CI read: c10d's counts, failures counting the known ones.
    for c in counts:
        print(c)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
