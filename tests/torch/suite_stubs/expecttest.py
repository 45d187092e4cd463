"""A minimal stand-in for the `expecttest` package, which Debian 12 does not package.

torch.testing._internal.common_utils imports it for two names only: `TestCase`, the base of its
TestCase, and `ACCEPT`, the flag that rewrites expected-output literals in place. The distributed
suite uses neither expect-inline assertion, so the base is unittest's TestCase and ACCEPT stays
False; the suite driver (tests/torch/distributed_suite.py) puts this directory on the path only
when no real expecttest is importable.
"""

import unittest

ACCEPT = False


class TestCase(unittest.TestCase):
    longMessage = True
