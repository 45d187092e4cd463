#!/usr/bin/env python3
"""layers_test: every #include in the library keeps to the layers of docs/design.md.

The layers' dependencies are read from src/CMakeLists.txt, not restated here: a file of one
layer (a folder of src/ and the OBJECT library built from it) may include another layer's
header only when its library links that layer's library, directly or through others. So a
target links what it uses, and an include across the layers fails CI until the link (and so
the design) says it may. Besides that:

  - include/c10d/ (the public API) includes only its own headers and the standard library;
  - Boost.Asio appears only in src/store/ and src/backends/gloo_like/ (the TCP store and the
    TCP backend), nowhere in the library, tools, tests, benchmarks or examples;
  - examples/ are user programs: only public headers (and a program's own, beside it);
  - python/bridge: torch_process_group.cc names no c10d header but bridge.h, and
    bridge_core.cc and bridge.h no torch header, so the two libraries named c10d meet only in
    bridge.h (docs/torch.md).

    tests/layout/layers_test.py [REPO]     exit 0: no violation; 1: each one printed
    tests/layout/layers_test.py --self-test  plants one violation of each rule in a scratch
                                             copy of the tree's CMake, and checks each is found
"""

import os
import re
import sys

import tree_check

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SOURCES = (".h", ".cc")
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^">]+)[">]', re.M)
LINK = re.compile(r"target_link_libraries\(\s*(c10d_\w+)([^)]*)\)", re.S)
ADD = re.compile(r"add_library\(\s*(c10d_\w+)\s+OBJECT\s+\$\{C10D_(\w+)_SOURCES\}")
GLOB = re.compile(r"file\(GLOB\s+C10D_(\w+)_SOURCES\s+CONFIGURE_DEPENDS\s+"
                  r"\$\{CMAKE_CURRENT_SOURCE_DIR\}/([\w/]+)/\*\.cc\)")
ASIO_HOMES = ("src/store/", "src/backends/gloo_like/")


def files_under(*roots):
    for root in roots:
        for dirpath, _, names in os.walk(os.path.join(REPO, root)):
            for name in sorted(names):
                if name.endswith(SOURCES) or name.endswith(".cpp"):
                    path = os.path.join(dirpath, name)
                    yield os.path.relpath(path, REPO)


def includes(path):
    with open(os.path.join(REPO, path), encoding="utf-8") as f:
        text = f.read()
    for m in INCLUDE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        yield line, m.group(1), m.group(2)


def layers():
    """({folder under src/: library}, {library: libraries it may use, transitively})."""
    with open(os.path.join(REPO, "src", "CMakeLists.txt"), encoding="utf-8") as f:
        cmake = f.read()
    folder_of_var = {var: folder for var, folder in GLOB.findall(cmake)}
    library_of = {folder_of_var[var]: lib for lib, var in ADD.findall(cmake)
                  if var in folder_of_var}
    direct = {lib: set() for lib in library_of.values()}
    for lib, rest in LINK.findall(cmake):
        if lib in direct:
            direct[lib] |= {d for d in re.findall(r"\bc10d_\w+", rest) if d in direct}
    reach = {}
    for lib in direct:
        seen, todo = {lib}, [lib]
        while todo:
            for d in direct[todo.pop()]:
                if d not in seen:
                    seen.add(d)
                    todo.append(d)
        reach[lib] = seen
    return library_of, reach


def layer_of(path, library_of):
    """The longest src/ folder with a library that holds path."""
    best = None
    for folder in library_of:
        if path.startswith(f"src/{folder}/") and (best is None or len(folder) > len(best)):
            best = folder
    return best


def main():
    problems = []
    library_of, reach = layers()
    if len(library_of) < 10:
        sys.exit(f"layers_test: read only {len(library_of)} layer libraries from "
                 "src/CMakeLists.txt; its add_library/file(GLOB) lines changed shape")
    folders = sorted(library_of, key=len, reverse=True)

    for path in files_under("src"):
        mine = layer_of(path, library_of)
        for line, kind, name in includes(path):
            if kind != '"' or name.startswith("c10d/"):
                continue
            theirs = next((f for f in folders if name.startswith(f + "/")), None)
            if theirs is None:
                if not os.path.exists(os.path.join(REPO, "src", name)):
                    continue  # a header of a dependency, e.g. a generated one
                problems.append(f"{path}:{line}: includes {name}, in no layer of "
                                "src/CMakeLists.txt")
                continue
            if mine is None or theirs == mine:
                continue
            if library_of[theirs] not in reach[library_of[mine]]:
                problems.append(
                    f"{path}:{line}: src/{mine} ({library_of[mine]}) includes {name} of "
                    f"src/{theirs} ({library_of[theirs]}), which {library_of[mine]} does not "
                    "link (src/CMakeLists.txt; layers in docs/design.md)")

    for path in files_under("include"):
        for line, kind, name in includes(path):
            if kind == '"' and not name.startswith("c10d/"):
                problems.append(f"{path}:{line}: a public header includes {name}; the API "
                                "may include only c10d/ headers and the standard library")

    for path in files_under("src", "include", "tools", "tests", "bench", "examples", "python"):
        if path.startswith(ASIO_HOMES):
            continue
        for line, kind, name in includes(path):
            if name.startswith("boost/asio") or name == "store/asio.h":
                problems.append(f"{path}:{line}: includes {name}; Asio belongs to "
                                f"{' and '.join(ASIO_HOMES)} only")

    for path in files_under("examples"):
        for line, kind, name in includes(path):
            own = os.path.isfile(os.path.join(REPO, os.path.dirname(path), name))
            if kind == '"' and not name.startswith("c10d/") and not own:
                problems.append(f"{path}:{line}: an example includes {name}; examples are "
                                "user programs and use only the public c10d/ headers")

    bridge = "python/bridge"
    for path in files_under(bridge):
        torch_side = os.path.basename(path) == "torch_process_group.cc"
        for line, kind, name in includes(path):
            if torch_side and kind == '"' and name != "bridge/bridge.h":
                problems.append(f"{path}:{line}: the torch side of the bridge includes {name}; "
                                "it may meet c10d only through bridge/bridge.h")
            if not torch_side and name.startswith(("torch/", "c10/", "ATen/", "pybind11/")):
                problems.append(f"{path}:{line}: the c10d side of the bridge includes {name}; "
                                "torch headers belong to torch_process_group.cc only")

    return tree_check.report("layers_test", problems, "include(s) across the layers",
                             f"{len(library_of)} layers, every include keeps to them")


def self_test():
    """Each rule above, broken once in a scratch tree, must be reported, and nothing else."""
    files = {
        "src/algorithms/bad.cc": '#include "backends/gloo_like/tcp_wire.h"\n',
        "src/backends/gloo_like/tcp_wire.h": "#pragma once\n",
        "include/c10d/bad.h": '#pragma once\n#include "core/check.h"\n',
        "tools/bad.cc": "#include <boost/asio.hpp>\n",
        "examples/bad.cc": '#include "c10d/c10d.h"\n#include "core/parse.h"\n',
        "examples/fine.cc": '#include "c10d/c10d.h"\n#include "fine.h"\n',
        "examples/fine.h": "#pragma once\n",
        "python/bridge/torch_process_group.cc": '#include "bridge/bridge.h"\n#include "c10d/work.h"\n',
        "python/bridge/bridge_core.cc": "#include <torch/torch.h>\n",
        "src/store/fine.cc": '#include "core/check.h"\n#include <boost/asio.hpp>\n',
    }
    expect = ["src/algorithms/bad.cc:1:", "include/c10d/bad.h:2:", "tools/bad.cc:1:",
              "examples/bad.cc:2:", "python/bridge/torch_process_group.cc:2:",
              "python/bridge/bridge_core.cc:1:"]
    return tree_check.check_finds(__file__, files, expect, copies=["src/CMakeLists.txt"])

if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        sys.exit(self_test())
    if len(sys.argv) > 1:
        REPO = sys.argv[1]
    sys.exit(main())
