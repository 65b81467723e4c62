"""The residency benchmark (issue 44): the H200's recorded numbers for the simulated device (:mod:`.h200`)."""
