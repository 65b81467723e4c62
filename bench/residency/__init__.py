"""The residency benchmark (issue 44), on CPU: a seeded multi-model trace (:mod:`.trace`) replayed on a
simulated H200 (:mod:`.device`: a simulated clock, the recorded sleep/wake/start timings and memory of
:mod:`.h200`) under three policies (:mod:`.policies`: the autopilot, today's on-demand policy, all awake
at 1/N); :mod:`.run` prints the table and writes bench/results/residency.json, :mod:`.plot` the states
over time. Not the gateway: the GPU form of item 3 of the issue is not written yet."""
