"""What the tree checks share: how they report, and their self-test, which plants faults in a
scratch tree, runs the check on it, and requires that it fails (exit 1) reporting exactly the
planted faults, each by its file:line."""

import os
import shutil
import subprocess
import sys
import tempfile


def check_finds(script, files, expect, copies=()):
    """files: {path: text} written under a scratch root; copies: paths copied there from the
    repository (beside the script's tests/layout/); expect: the file:line prefixes that must be
    reported, and nothing else. Returns the exit code for the self-test."""
    name = os.path.basename(script)[:-len(".py")]
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(script))))
    with tempfile.TemporaryDirectory() as root:
        for path in copies:
            os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
            shutil.copy(os.path.join(repo, path), os.path.join(root, path))
        for path, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
            with open(os.path.join(root, path), "w") as f:
                f.write(text)
        run = subprocess.run([sys.executable, os.path.abspath(script), root],
                             capture_output=True, text=True)
    found = run.stdout.splitlines()
    missing = [e for e in expect if not any(line.startswith(e) for line in found)]
    extra = [line for line in found if not any(line.startswith(e) for e in expect)]
    if run.returncode != 1 or missing or extra:
        print(f"{name} --self-test: exit {run.returncode}, missed {missing}, reported too {extra}")
        return 1
    print(f"{name} --self-test: all {len(expect)} planted faults reported")
    return 0


def report(name, problems, what, all_good):
    """Prints each problem and a summary; the exit code: 1 when there is a problem."""
    for p in problems:
        print(p)
    if problems:
        print(f"{name}: {len(problems)} {what}", file=sys.stderr)
        return 1
    print(f"{name}: {all_good}")
    return 0
