"""skdp-label: label differential privacy from the command line.

Subcommands: ``demo`` (privacy-utility table on bundled data), ``warmup``
(compile the numba kernels once, ahead of the first fit), ``keygen``
(a release key file) and ``privatize`` (release one label column of a CSV or
Parquet file). ``skdp-label privatize --help`` shows an example per
mechanism family.
"""

import argparse
import sys


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="skdp-label", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    from . import __version__

    parser.add_argument("--version", action="version", version=f"skdp-label {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="privacy-utility table of every mechanism on bundled data")
    demo.add_argument("--repeats", type=int, default=5, help="train/test splits to average (default 5)")
    demo.add_argument("--seed", type=int, default=0, help="seed of the splits and the noise")
    warmup = sub.add_parser(
        "warmup",
        help="compile and cache the numba kernels ahead of the first fit (a few seconds each)",
    )
    warmup.add_argument(
        "names", nargs="*", metavar="MECHANISM", help="mechanism names (default: every mechanism)"
    )
    from ._cli import add_subcommands, run

    add_subcommands(sub)
    args = parser.parse_args(argv)
    if args.command == "demo":
        from ._demo import run_demo

        run_demo(n_repeats=args.repeats, random_state=args.seed)
        return 0
    if args.command == "warmup":
        from ._warmup import warm_up

        try:
            warm_up(args.names, progress=lambda name, s: print(f"{name:<26} {s:6.2f} s", flush=True))
        except ValueError as exc:
            parser.error(str(exc))
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
