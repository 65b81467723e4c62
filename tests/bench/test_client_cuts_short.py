"""The short form of `make client-cuts` (bench/client_cuts.py): two in-process gateways, one Redis, two
FAKE ENGINEs. A keyed stream cut at each point (before the first byte once an engine has it,
mid-stream, at the last event) and retried through the openai SDK (the same key, ``Last-Event-ID``) runs
one generation by the engines' own count and reads byte for byte what an uninterrupted run reads; and
the fault suite's "at most one generation" checker (bench/faults/checks.py, over the engines' request
logs) finds the second generation of each retry without a key, and none with one."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from bench.client_cuts import CUTS, Setup, Table, run_trials
from bench.client_cuts_stacks import fake_setup
from bench.faults.checks import count_engine_runs


@pytest_asyncio.fixture(scope="module")
async def setup(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Setup]:
    async with fake_setup(2, 6, tmp_path_factory.mktemp("cuts")) as got:
        yield got


@pytest_asyncio.fixture(scope="module")
async def keyed(setup: Setup) -> Table:
    return await run_trials(setup, 2 * len(CUTS), seed=46, rid_prefix="keyed.")


@pytest.mark.parametrize("cut", CUTS)
async def test_a_cut_keyed_stream_retried_as_the_sdk_does_runs_once_and_reads_the_same_bytes(
    keyed: Table, cut: str
) -> None:
    trials = [t for t in keyed.trials if t.cut == cut]
    assert len(trials) == 2 and not [t.error for t in trials if t.error]
    assert [t.generations for t in trials] == [1, 1]
    assert all(t.identical for t in trials)


async def test_the_fault_checker_counts_a_retry_without_a_key_as_a_second_generation(
    setup: Setup,
) -> None:
    await run_trials(setup, len(CUTS), seed=46, keyed=False, rid_prefix="plain.")
    plain = count_engine_runs(setup.logs, "plain.", {})
    assert plain.ran_twice == ["plain.0", "plain.1", "plain.2", "plain.3"]  # every cut point: run again


def test_the_fault_checker_finds_no_second_generation_of_a_keyed_retry(setup: Setup, keyed: Table) -> None:
    runs = count_engine_runs(setup.logs, "keyed.", {})
    assert len(runs.ids) == len(keyed.trials)
    assert runs.ran_twice == []


def test_the_table_counts_duplicates_per_cut_point(keyed: Table) -> None:
    rows = {r["cut"]: r for r in keyed.rows()}
    assert set(rows) == set(CUTS) and all(r["trials"] == 2 for r in rows.values())
    assert "| cut point | trials | duplicate generations |" in keyed.text()
