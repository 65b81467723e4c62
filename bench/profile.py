"""py-spy profiles of a proxy under load (``make bench``'s ``--profile DIR``), and their short summary.

:func:`recording` runs ``py-spy record`` on one process for as long as its block runs: raw collapsed
stacks (one line per distinct stack, ``frame;frame;... count``, frames aggregated by function: ``name
(file:first line)``), the format flamegraph.pl and speedscope read. It keeps only the samples of a thread
holding the GIL (``--gil``): py-spy's idle test counts a thread blocked in ``Condition.wait`` or the event
loop's poll as running, while a single-loop proxy's CPU is spent holding the GIL (its Python, and the C
code it calls without releasing it: uvloop, httptools, json), so the samples are where the CPU goes.
:func:`summary` reads such a file into the top functions by self and by total time and the self time per
source file, as plain text a reader can take in without a flame graph viewer.
"""

from __future__ import annotations

import gzip
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from testing.poll import wait_until

PYSPY = Path(sys.executable).parent / "py-spy"


def available() -> bool:
    """Whether py-spy is installed beside this interpreter."""
    return PYSPY.exists()


@contextmanager
def recording(pid: int, out: Path, rate: int, core: str) -> Iterator[None]:
    """``py-spy record`` of process ``pid`` into ``out`` (raw collapsed stacks) while the block runs,
    py-spy itself pinned to ``core``; stopped with SIGINT (py-spy then writes its file). Its own output
    goes to ``out`` + ``.pyspy.log``, removed once it has succeeded."""
    log = out.with_name(out.name + ".pyspy.log")
    argv = ["taskset", "-c", core, str(PYSPY), "record", "--pid", str(pid), "--format", "raw"]
    argv += ["--function", "--gil", "--rate", str(rate), "--output", str(out)]
    with log.open("wb") as sink:
        proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: "Sampling process" in log.read_text(errors="replace"), 15, "py-spy")
        yield
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc.returncode not in (0, -signal.SIGINT) or not out.exists():
        raise RuntimeError(f"py-spy failed (exit {proc.returncode}): {log.read_text(errors='replace')}")
    log.unlink()


def stacks(lines: Iterable[str]) -> Iterator[tuple[list[str], int]]:
    """The (frames outermost first, sample count) of each line of a collapsed-stacks file."""
    for line in lines:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if stack and count.isdigit():
            yield stack.split(";"), int(count)


def source_of(frame: str) -> str:
    """The file of a frame written ``name (file:line)``: the text inside the last parentheses, less the
    line number (the frame itself when it has none)."""
    inner = frame[frame.rfind("(") + 1 : frame.rfind(")")] if frame.endswith(")") else frame
    return inner.rpartition(":")[0] or inner


def package_of(source: str) -> str:
    """The folder of a source file (``gateway/admission`` of ``gateway/admission/resp.py``; a file at the
    top, ``threading.py``, is its own)."""
    return source.rpartition("/")[0] or source


def summary(lines: Iterable[str], top: int = 15) -> str:
    """The top ``top`` functions by self samples, by total samples (a function counted once per stack it
    is on), the self samples per source file and per folder, and the total samples per folder (a folder
    counted once per stack it is on: a step with what it calls, e.g. ``gateway/auth`` with its Redis
    round trips), each as a share of all samples."""
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    files: Counter[str] = Counter()
    folders: Counter[str] = Counter()
    reach: Counter[str] = Counter()
    samples = 0
    for frames, count in stacks(lines):
        samples += count
        own[frames[-1]] += count
        files[source_of(frames[-1])] += count
        folders[package_of(source_of(frames[-1]))] += count
        for frame in set(frames):
            total[frame] += count
        for folder in {package_of(source_of(frame)) for frame in frames}:
            reach[folder] += count
    if not samples:
        return "no samples\n"

    def block(title: str, counts: Counter[str]) -> list[str]:
        rows = [f"{100 * n / samples:6.1f} %  {name}" for name, n in counts.most_common(top)]
        return [f"{title}:", *rows, ""]

    return "\n".join(
        [
            f"{samples} samples",
            "",
            *block(f"top {top} functions by self time", own),
            *block(f"top {top} functions by total time (on the stack)", total),
            *block(f"top {top} files by self time", files),
            *block(f"top {top} folders by self time", folders),
            *block(f"top {top} folders by total time (on the stack)", reach),
        ]
    )


def keep(raw: Path, top: int, head: str) -> tuple[Path, Path]:
    """``raw`` (collapsed stacks) gzip'ed beside it and its :func:`summary` (under ``head``) as
    ``.top.txt``; ``raw`` removed. The two paths written."""
    text = raw.read_text()
    packed = raw.with_name(raw.name + ".gz")
    packed.write_bytes(gzip.compress(text.encode(), mtime=0))
    brief = raw.with_name(raw.name.removesuffix(".collapsed") + ".top.txt")
    brief.write_text(f"{head}\n{summary(text.splitlines(), top)}")
    raw.unlink()
    return packed, brief
