"""``python3 -m ckpt ...``: the same command-line tool as ``ckpt`` (docs/cli.md)."""

import sys

from . import _ckpt


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    sys.stdout.flush()
    sys.stderr.flush()
    return _ckpt.cli(["ckpt", *argv])


if __name__ == "__main__":
    sys.exit(main())
