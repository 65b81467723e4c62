"""The documentation's reference pages, generated from the code so that they cannot drift.

``python -m docsgen`` writes them under ``docs/reference/``; ``python -m docsgen --check`` fails when one
is stale (``tests/docsgen/test_reference.py`` runs that check in ``make test``).
"""

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
"""The repository root: generated pages are written under it, and sources are named relative to it."""
