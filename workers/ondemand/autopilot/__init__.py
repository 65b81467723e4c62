"""The residency autopilot (issue 44), pure logic: from a snapshot of one device
(:mod:`.snapshot`) it decides which on-demand models are awake, asleep at level 1 (weights in host RAM),
at level 2 (weights dropped) or stopped, as a list of :class:`.moves.Move`, each with a one-line reason
(:func:`.policy.decide`). What it weighs: each model's predicted demand (:mod:`.forecast`), the GPU and
host-RAM budgets (:mod:`.plan`) and the seconds each move costs, learned per model (:mod:`.costs`).
No I/O: the caller reads the device and carries the moves out."""
