"""The summary of a py-spy profile (:mod:`bench.profile`): self time is a stack's innermost frame, total
time counts a function once per stack it is on (recursion too), files and folders by their frames' self
time, folders also by total time (pure)."""

from __future__ import annotations

from bench.profile import package_of, source_of, summary

STACKS = [
    "main (app.py:1);serve (gateway/proxy.py:10);parse (json/decoder.py:5) 6",
    "main (app.py:1);serve (gateway/proxy.py:10);serve (gateway/proxy.py:10) 3",
    "main (app.py:1) 1",
    "not a stack line",
]


def test_self_total_and_files_are_shares_of_all_samples() -> None:
    text = summary(STACKS, top=3)
    assert text.startswith("10 samples\n")
    by_self, by_total, by_file, by_folder, folder_total = text.split("\n\n")[1:6]
    assert by_self.splitlines()[1:] == [
        "  60.0 %  parse (json/decoder.py:5)",
        "  30.0 %  serve (gateway/proxy.py:10)",
        "  10.0 %  main (app.py:1)",
    ]
    assert by_total.splitlines()[1:3] == [
        " 100.0 %  main (app.py:1)",
        "  90.0 %  serve (gateway/proxy.py:10)",
    ]
    assert by_file.splitlines()[1] == "  60.0 %  json/decoder.py"
    assert by_folder.splitlines()[1:3] == ["  60.0 %  json", "  30.0 %  gateway"]
    assert folder_total.splitlines()[1:3] == [" 100.0 %  app.py", "  90.0 %  gateway"]


def test_a_frame_without_a_line_is_its_own_source_and_no_samples_say_so() -> None:
    assert source_of("serve (gateway/proxy.py:10)") == "gateway/proxy.py"
    assert source_of("<native>") == "<native>"
    assert package_of("threading.py") == "threading.py"
    assert summary([]) == "no samples\n"
