"""``python -m docsgen``: write the generated reference pages; ``--check``: exit 1 when one is stale."""

from __future__ import annotations

import argparse
import sys

from docsgen.pages import REGENERATE, rendered, stale, write


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m docsgen", description=__doc__)
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a page is stale")
    args = parser.parse_args(argv)
    pages = rendered()
    if args.check:
        outdated = stale(pages)
        for path in outdated:
            print(f"{path} is stale: regenerate with `{REGENERATE}`", file=sys.stderr)
        return 1 if outdated else 0
    for path in write(pages):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
