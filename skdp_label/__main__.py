"""Command line: ``python -m skdp_label demo`` (or ``skdp-label demo``)."""

import argparse
import sys


def main(argv=None):
    parser = argparse.ArgumentParser(prog="skdp-label", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="privacy-utility table of every mechanism on bundled data")
    demo.add_argument("--repeats", type=int, default=5, help="train/test splits to average (default 5)")
    demo.add_argument("--seed", type=int, default=0, help="seed of the splits and the noise")
    args = parser.parse_args(argv)
    if args.command == "demo":
        from ._demo import run_demo

        run_demo(n_repeats=args.repeats, random_state=args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
