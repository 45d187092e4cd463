#!/usr/bin/env python3
"""docs_links_test: every relative link in README.md and docs/*.md leads somewhere.

A link to a file must name a file of the repository; a link with an anchor (`page.md#part`, or
`#part` within the page) must name a heading of that page, by GitHub's rule for heading anchors
(lower case, punctuation dropped but `-` and `_`, spaces to `-`, a repeated heading's anchor
suffixed -1, -2, ...). Links to other sites are not followed. The repository also speaks of
itself only: no page counts its work in numbered sittings (WORK_LABEL and a number); figures
are labelled by date, commit and machine.

    tests/layout/docs_links_test.py [REPO]      exit 0: all good; 1: each fault printed
    tests/layout/docs_links_test.py --self-test  plants faults in a scratch page, checks each is found
"""

import os
import re
import sys

import tree_check

LINK = re.compile(r"(?<!\!)\[[^\]]*\]\(([^)\s]+)\)|\!\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")
# The word is spelled in pieces so that this file does not hold what it forbids.
WORK_LABEL = "ses" + "sion"
SESSION = re.compile(r"\b" + WORK_LABEL + r"[s]?\s+\d+\b", re.I)


def slug(text):
    text = re.sub(r"`|\*\*|\*", "", text)  # markup, not words
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link keeps its words
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def read_page(path):
    """(lines outside code fences with their numbers, the set of anchors of the page)."""
    with open(path, encoding="utf-8") as f:
        raw = f.read().splitlines()
    lines, anchors, seen, fenced = [], set(), {}, False
    for number, line in enumerate(raw, 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        lines.append((number, line))
        m = HEADING.match(line)
        if m:
            base = slug(m.group(2))
            n = seen.get(base, 0)
            anchors.add(base if n == 0 else f"{base}-{n}")
            seen[base] = n + 1
    return lines, anchors


def pages(repo):
    found = [os.path.join(repo, "README.md")]
    docs = os.path.join(repo, "docs")
    if os.path.isdir(docs):
        found += sorted(os.path.join(docs, n) for n in os.listdir(docs) if n.endswith(".md"))
    return [p for p in found if os.path.exists(p)]


def check(repo):
    problems = []
    parsed = {}

    def page(path):
        if path not in parsed:
            parsed[path] = read_page(path)
        return parsed[path]

    for path in pages(repo):
        rel = os.path.relpath(path, repo)
        lines, _ = page(path)
        for number, line in lines:
            if SESSION.search(line):
                problems.append(f"{rel}:{number}: names a work session "
                                f"({SESSION.search(line).group(0)!r}); label by date and commit")
            # Inline code is not a link.
            for m in LINK.finditer(re.sub(r"`[^`]*`", "", line)):
                target = m.group(1) or m.group(2)
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, mailto:, ...
                    continue
                file_part, _, anchor = target.partition("#")
                dest = (os.path.normpath(os.path.join(os.path.dirname(path), file_part))
                        if file_part else path)
                if not os.path.exists(dest):
                    problems.append(f"{rel}:{number}: link to {target}: no file {file_part}")
                    continue
                if anchor and dest.endswith(".md"):
                    if anchor not in page(dest)[1]:
                        problems.append(f"{rel}:{number}: link to {target}: "
                                        f"{os.path.relpath(dest, repo)} has no heading "
                                        f"#{anchor}")
    return problems


def self_test():
    page = ("# A page\n\n## The `x` part, and more\n\n## Twice\n\n## Twice\n\n"
            "[ok](#the-x-part-and-more) [ok](#twice-1) [ok](../README.md#top)\n"
            "[bad](#nowhere)\n[bad](missing.md)\n[bad](../README.md#gone)\n"
            "Measured in " + WORK_LABEL + " 4.\n```\n[not a link](nowhere.md)\n```\n")
    readme = "# Top\n\n[ok](docs/a.md#a-page) ![ok](docs/a.md)\n"
    return tree_check.check_finds(__file__, {"docs/a.md": page, "README.md": readme},
                               ["docs/a.md:10:", "docs/a.md:11:", "docs/a.md:12:",
                                "docs/a.md:13:"])

def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    repo = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return tree_check.report("docs_links_test", check(repo), "fault(s)",
                             f"{len(pages(repo))} pages, every relative link leads somewhere")


if __name__ == "__main__":
    sys.exit(main())
