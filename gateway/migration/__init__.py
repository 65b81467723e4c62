"""Mid-stream migration: a generation whose replica fails after the first byte continues, token-exact, on
another replica of the model (docs/gateway/migration.md).

Pure parts: :mod:`frames` (SSE events and the token-id fields of vLLM's frames), :mod:`record` (what the
client has seen: ids, the clean seam, finish, usage), :mod:`plan` (which requests may move, and the
continuation request), :mod:`seam` (continuation frames re-shaped as the original stream's). The one I/O
part, :mod:`stream`, reads the replica and moves the generation when it fails.
"""
