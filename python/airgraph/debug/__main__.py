"""Command line: python -m airgraph.debug compare DUMP_A DUMP_B [--rtol R] [--atol A]

Compares two data dumps (from AIRGRAPH_DUMP_DATA=1, with or without
AIRGRAPH_RUN_EAGERLY=1) node by node and prints the first divergence.
Exit status 0 when they agree, 1 when they diverge.
"""
import argparse
import sys

from .compare import compare_dumps


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m airgraph.debug")
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("compare", help="compare two data dumps")
    c.add_argument("dump_a")
    c.add_argument("dump_b")
    c.add_argument("--rtol", type=float, default=1e-4)
    c.add_argument("--atol", type=float, default=1e-5)
    a = ap.parse_args(argv)
    rep = compare_dumps(a.dump_a, a.dump_b, a.rtol, a.atol)
    print(rep)
    return 0 if rep.ok else 1


if __name__ == "__main__":
    sys.exit(main())
