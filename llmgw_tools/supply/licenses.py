"""A distribution's license, read from its installed metadata, and the project's license policy.

The order of sources: the PEP 639 ``License-Expression`` field; else a ``License`` field whose first line
names a license this module knows (``MIT``, ``Apache 2.0``, ``BSD-3-Clause``...); else the trove
``License ::`` classifiers, when all of them name one known license; else the ``License`` field's first
line, as free text (or ``UNKNOWN``). Only the first three give an SPDX expression.

The policy: the project is Apache-2.0 (vLLM's license) and its runtime dependencies ship with it, so none may
be under a strong copyleft license only (GPL or AGPL with no permissive alternative). LGPL is allowed (a
Python import is dynamic linking)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from email.message import Message

SPDX_BY_NAME = {
    "mit": "MIT",
    "mit license": "MIT",
    "apache": "Apache-2.0",
    "apache 2.0": "Apache-2.0",
    "apache-2.0": "Apache-2.0",
    "apache 2.0 license": "Apache-2.0",
    "apache license 2.0": "Apache-2.0",
    "apache license, version 2.0": "Apache-2.0",
    "apache software license": "Apache-2.0",
    "bsd": "BSD-3-Clause",
    "bsd license": "BSD-3-Clause",
    "3-clause bsd license": "BSD-3-Clause",
    "bsd 3-clause license": "BSD-3-Clause",
    "bsd-3-clause": "BSD-3-Clause",
    "bsd-2-clause": "BSD-2-Clause",
    "isc": "ISC",
    "isc license": "ISC",
    "isc license (iscl)": "ISC",
    "mpl-2.0": "MPL-2.0",
    "mozilla public license 2.0 (mpl 2.0)": "MPL-2.0",
    "psf-2.0": "PSF-2.0",
    "python software foundation license": "PSF-2.0",
    "unlicense": "Unlicense",
    "cc0-1.0": "CC0-1.0",
    "the unlicense (unlicense)": "Unlicense",
    "gpl-3.0": "GPL-3.0-only",
    "gnu general public license v3 (gplv3)": "GPL-3.0-only",
    "gnu general public license v2 (gplv2)": "GPL-2.0-only",
    "gnu lesser general public license v2 (lgplv2)": "LGPL-2.0-only",
    "gnu lesser general public license v3 (lgplv3)": "LGPL-3.0-only",
    "gnu affero general public license v3": "AGPL-3.0-only",
}
"""License names found in ``License`` fields and trove classifiers -> their SPDX identifier (lower-cased
keys). ``BSD`` alone is read as BSD-3-Clause, the usual meaning on PyPI."""

SPDX_EXPRESSION = re.compile(r"^[A-Za-z0-9.+-]+( (AND|OR|WITH) [A-Za-z0-9.+-]+)*$")
STRONG_COPYLEFT = re.compile(r"^(A?GPL)-\d")


@dataclass(frozen=True)
class License:
    """``spdx``: an SPDX license expression, or None when the metadata names none this module can read;
    ``text``: what a reader is shown (the expression, or the metadata's own words)."""

    spdx: str | None
    text: str


def known(name: str) -> str | None:
    """The SPDX identifier or expression a license name stands for, None if unknown."""
    name = name.strip()
    if name.lower() in SPDX_BY_NAME:
        return SPDX_BY_NAME[name.lower()]
    parts = re.split(r" (AND|OR|WITH) ", name)
    ids = [SPDX_BY_NAME.get(p.lower()) for p in parts[::2]]
    if len(parts) > 1 and all(ids) and SPDX_EXPRESSION.match(name):
        return name
    return None


def read_license(metadata: Message) -> License:
    """The license a distribution's metadata declares (the sources in this module's docstring, in order)."""
    expression = (metadata.get("License-Expression") or "").strip()
    if expression:
        return License(expression, expression)
    field = (metadata.get("License") or "").strip()
    first_line = field.splitlines()[0].strip() if field else ""
    if first_line and (spdx := known(first_line)):
        return License(spdx, spdx)
    classifiers = [
        c.split(" :: ")[-1] for c in metadata.get_all("Classifier") or [] if c.startswith("License ::")
    ]
    from_classifiers = {known(c) for c in classifiers if c != "OSI Approved"}
    if len(from_classifiers) == 1 and (spdx := from_classifiers.pop()):
        return License(spdx, spdx)
    text = first_line if first_line and first_line != "UNKNOWN" else "; ".join(classifiers) or "UNKNOWN"
    return License(None, text[:100])


def strong_copyleft_only(license: License) -> bool:
    """True when every alternative of the license is GPL or AGPL (an ``OR`` with a permissive one is fine);
    free text is judged by the words "GPL" / "General Public License" without "Lesser"."""
    if license.spdx is None:
        words = license.text.replace("LGPL", "").replace("Lesser General Public", "")
        return "GPL" in words or "General Public License" in words
    alternatives = [a.strip("() ") for a in license.spdx.split(" OR ")]
    return all(
        any(STRONG_COPYLEFT.match(term) for term in re.split(r" AND | WITH ", a)) for a in alternatives
    )
