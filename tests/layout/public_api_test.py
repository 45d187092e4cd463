#!/usr/bin/env python3
"""public_api_test: what a user program may and may not do with include/c10d/ alone.

A user waits for a Work and reads it; only the backends complete it, name a receive's sender
and give it a wait hook, through core::WorkControl (src/core/work_control.h), which the public
headers only name. This compiles, with the C++ compiler $CXX (default c++) and -fsyntax-only,
against include/ and nothing else:
  - a user's use of Work and Future, which must compile;
  - each backend-only use of a Work, which must fail with a diagnostic that names what it used
    (so a snippet broken for another reason does not pass).

    tests/layout/public_api_test.py [REPO]     exit 0: all as expected; 1: each problem printed
    tests/layout/public_api_test.py --self-test  plants the backend-only methods back into a
                                                 scratch copy of work.h, and checks each is found
"""

import glob
import os
import subprocess
import sys
import tempfile

import tree_check

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

USER = r"""
#include <chrono>
#include <exception>
#include <memory>
#include <vector>

#include "c10d/c10d.h"

// A Work subclass, as a backend makes; users may derive too.
class MyWork : public c10d::Work {
 public:
  using Work::Work;
};

void use(const std::shared_ptr<c10d::Work>& w) {
  (void)w->op_name();
  (void)w->sequence();
  (void)w->is_completed();
  (void)w->is_success();
  (void)w->exception();
  w->wait(std::chrono::milliseconds(1));
  w->wait();
  (void)w->result();
  (void)w->source_rank();
  std::shared_ptr<c10d::Future> f = w->future();
  (void)f->completed();
  (void)f->has_error();
  (void)f->exception();
  (void)f->wait_for(std::chrono::milliseconds(1));
  (void)f->wait_until(std::chrono::steady_clock::now());
  f->wait();
  (void)f->value();
  f->add_callback([](c10d::Future&) {});
  auto next = f->then([](c10d::Future& done) { return done.value(); });
  // A comm hook completes its own Future.
  auto mine = std::make_shared<c10d::Future>();
  mine->mark_completed(std::vector<c10d::Tensor>{});
  auto failed = std::make_shared<c10d::Future>();
  failed->set_error(std::make_exception_ptr(c10d::Error("x")));
  auto own = std::make_shared<MyWork>("all_reduce", 0);
  own->wait(std::chrono::milliseconds(1));
}
"""

# (name, statement in a function of `c10d::Work& w`, word the compiler's diagnostic must name)
BACKEND_ONLY = [
    ("Work::finish", "w.finish();", "finish"),
    ("Work::finish_with_error", "w.finish_with_error(std::exception_ptr());",
     "finish_with_error"),
    ("Work::set_source_rank", "w.set_source_rank(0);", "set_source_rank"),
    ("Work::set_wait_hook", "w.set_wait_hook(nullptr);", "set_wait_hook"),
    ("Work::WaitClock", "c10d::Work::WaitClock* p = nullptr; (void)p;", "WaitClock"),
    ("Work::WaitHook", "c10d::Work::WaitHook* p = nullptr; (void)p;", "WaitHook"),
    ("core::WorkControl", "c10d::core::WorkControl::finish(w);", "WorkControl"),
]


def compile_snippet(root, text):
    """(compiled, diagnostics) of text compiled against root/include only."""
    cxx = os.environ.get("CXX") or "c++"
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "user.cc")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        try:
            run = subprocess.run([cxx, "-std=c++20", "-fsyntax-only", "-fmax-errors=5",
                                  "-I", os.path.join(root, "include"), path],
                                 capture_output=True, text=True, timeout=120)
        except subprocess.TimeoutExpired:
            return False, f"{cxx} took over 120 s"
    return run.returncode == 0, run.stderr


def main(root):
    if not glob.glob(os.path.join(root, "include", "c10d", "*.h")):
        sys.exit(f"public_api_test: no include/c10d/*.h under {root}")
    problems = []
    ok, diagnostics = compile_snippet(root, USER)
    if not ok:
        problems.append("user code: a user's use of Work and Future does not compile against "
                        "include/ alone:\n" + diagnostics)
    for name, statement, word in BACKEND_ONLY:
        text = ("#include <exception>\n\n#include \"c10d/work.h\"\n\n"
                f"void backend_only(c10d::Work& w) {{ {statement} }}\n")
        ok, diagnostics = compile_snippet(root, text)
        if ok:
            problems.append(f"{name}: a user program can use it (`{statement}` compiles against "
                            "include/ alone); the backends reach it through core::WorkControl, "
                            "src/core/work_control.h")
        elif word not in diagnostics:
            problems.append(f"{name}: `{statement}` failed, but not naming {word}:\n"
                            + diagnostics)
    return tree_check.report("public_api_test", problems, "problem(s) with the public API",
                             f"user code compiles; {len(BACKEND_ONLY)} backend-only uses of a "
                             "Work do not")


def self_test():
    """The backend-only members, planted back into a copy of work.h, must each be reported."""
    copies = [os.path.relpath(p, REPO)
              for p in sorted(glob.glob(os.path.join(REPO, "include", "c10d", "*.h")))]
    with open(os.path.join(REPO, "include", "c10d", "work.h"), encoding="utf-8") as f:
        work_h = f.read()
    anchor = "Work& operator=(const Work&) = delete;\n"
    if work_h.count(anchor) != 1:
        print(f"public_api_test --self-test: work.h has not one `{anchor.strip()}` to plant at")
        return 1
    planted = work_h.replace(anchor, anchor + """
  void finish(std::vector<Tensor> outputs = {});
  void finish_with_error(std::exception_ptr error);
  void set_source_rank(int rank);
  class WaitClock {};
  using WaitHook = std::function<void(Work&, WaitClock&)>;
  void set_wait_hook(std::shared_ptr<const WaitHook> hook);
""")
    end = "}  // namespace c10d::inline v1\n"
    if not planted.endswith(end):
        print(f"public_api_test --self-test: work.h does not end with `{end.strip()}`")
        return 1
    planted = planted[:-len(end)] + """namespace core {
class WorkControl {
 public:
  static void finish(Work&) {}
};
}  // namespace core
""" + end
    files = {"include/c10d/work.h": planted}
    expect = [f"{name}:" for name, _, _ in BACKEND_ONLY]
    return tree_check.check_finds(__file__, files, expect, copies=copies)


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        sys.exit(self_test())
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else REPO))
