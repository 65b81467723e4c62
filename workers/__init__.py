"""The control plane: vLLM replicas supervised to match the fleet file (``llmgw-workers``).

Rooms (docs/architecture/workers.md): ``replica`` (what one replica is: launch arguments, placement,
weights, budgets), ``life`` (one replica's life: the owner, start, restart, publish, adopt, the process),
``converge`` (to the fleet file: the pure actions and the loop), ``ondemand`` (models on demand: demand,
room, wake, sleep, ledgers), ``host`` (GPU, RSS, ports), ``planner``. ``wiring`` builds them, ``cli``
runs them. The offline tools (model preparation, deployment renderers, the embedded stack) are in
``llmgw_tools``.
"""
