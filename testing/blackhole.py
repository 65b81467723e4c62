"""A loopback TCP proxy that can black-hole its connections: what a failed-over address, a dropped NAT
entry or a vanished host looks like to a client (no FIN, no RST: the bytes simply stop)."""

from __future__ import annotations

import asyncio
import contextlib


class BlackHoleProxy:
    """Forwards ``127.0.0.1:port`` to ``target_port``. :meth:`black_hole` silences every connection open
    now (both ways, nothing closed); connections made afterwards are forwarded again."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.accepted = 0
        self._silenced: list[asyncio.Event] = []
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> BlackHoleProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return self

    def black_hole(self) -> None:
        for silenced in self._silenced:
            silenced.set()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        silenced = asyncio.Event()
        self._silenced.append(silenced)
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        pipes = [self._pipe(reader, up_writer, silenced), self._pipe(up_reader, writer, silenced)]
        tasks = [asyncio.create_task(p) for p in pipes]
        self._tasks.update(tasks)
        for task in tasks:
            task.add_done_callback(self._tasks.discard)

    @staticmethod
    async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, silenced: asyncio.Event) -> None:
        try:
            while data := await src.read(65536):
                if not silenced.is_set():  # black-holed: read and drop, never close
                    dst.write(data)
                    await dst.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            if not silenced.is_set():
                with contextlib.suppress(Exception):
                    dst.close()
