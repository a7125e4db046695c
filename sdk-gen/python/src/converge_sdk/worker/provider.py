"""Providers: the code that serves one ``(kind, kind_version)``."""

from __future__ import annotations

import abc
import asyncio
import contextvars
import functools
import inspect
from concurrent.futures import Executor
from typing import Awaitable, Callable, Dict, Mapping, Optional, TypeVar, Union

from converge_sdk.worker.outcome import Outcome, UnknownReactionError
from converge_sdk.worker.request import ReactionRequest
from converge_sdk.worker.types import KindVersion, ProviderConfig

#: What a handler returns: an :class:`Outcome`, or ``None`` for an empty
#: success (nothing to report, e.g. a teardown).
HandlerResult = Optional[Outcome]

#: A reaction handler: a coroutine function, or a plain function that the
#: runtime runs in a thread (see :class:`Reactions`).
Handler = Callable[[ReactionRequest], Union[Awaitable[HandlerResult], HandlerResult]]

_H = TypeVar("_H", bound=Handler)


class Provider(abc.ABC):
    """Serves exactly one ``(kind, kind_version)``.

    A worker hosts one provider per pair it serves and calls :meth:`handle`
    concurrently (up to its ``max_parallel``), always on the worker's event
    loop. Most providers are a :class:`Reactions` table; subclass this for
    full control.
    """

    @property
    @abc.abstractmethod
    def kind(self) -> KindVersion:
        """The pair this provider serves. Must be stable."""

    @abc.abstractmethod
    async def handle(self, request: ReactionRequest) -> HandlerResult:
        """Runs one task. Dispatch on ``request.reaction`` and raise
        :class:`~converge_sdk.worker.UnknownReactionError` for names the
        provider does not know.

        Raise :class:`~converge_sdk.worker.TerminalError` when retrying cannot
        help; any other exception is a transient failure of this task only.
        The coroutine is cancelled when the task's deadline passes.
        """

    def ready(self) -> bool:
        """Whether the provider can take tasks now. Polled by the runtime, so
        keep it cheap and non-blocking. A provider that is not ready gets no
        new tasks, and a task that still arrives fails transiently. An
        exception counts as not ready."""
        return True

    def requires_default_config(self) -> bool:
        """Whether the provider cannot work without its kind's default
        provider config (credentials, an endpoint, ...). When true the pair is
        reported unready until a default has arrived, and again if it is
        deleted. Default false."""
        return False

    def on_config(self, config: Optional[ProviderConfig]) -> None:
        """The kind's default provider config changed: called once after it
        is first fetched and then on every change (refresh or push). ``None``
        = the kind has no default config (or it was deleted). Keep it quick:
        it runs on the event loop."""


class Reactions(Provider):
    """A provider that dispatches each task to the handler registered for
    its reaction name.

    Handlers are registered with the constructor's ``handlers`` mapping or
    the :meth:`reaction` decorator::

        leaf = Reactions(KindVersion("bucket", 1))

        @leaf.reaction("work")
        async def work(request: ReactionRequest) -> Outcome:
            ...

    A coroutine function runs on the event loop and is cancelled at the task
    deadline. A plain ``def`` handler runs in ``executor`` (the loop's
    default thread pool when ``None``) so it cannot block the loop; its
    deadline cancellation is best-effort: the runtime reports the deadline
    failure and sets ``request.cancel_event``, but the thread runs on (keeping
    its concurrency slot) until the function returns, so long-running
    synchronous handlers should poll ``request.cancelled()``.

    An unknown reaction raises :class:`UnknownReactionError`, transient
    unless ``unknown_reaction_terminal`` is set.
    """

    def __init__(
        self,
        kind: KindVersion,
        handlers: Optional[Mapping[str, Handler]] = None,
        *,
        executor: Optional[Executor] = None,
        unknown_reaction_terminal: bool = False,
    ) -> None:
        self._kind = kind
        self._handlers: Dict[str, Handler] = dict(handlers or {})
        self._executor = executor
        self._unknown_terminal = unknown_reaction_terminal

    @property
    def kind(self) -> KindVersion:
        return self._kind

    def reaction(self, name: str) -> Callable[[_H], _H]:
        """A decorator registering the handler of reaction ``name``."""

        def register(handler: _H) -> _H:
            if name in self._handlers:
                raise ValueError(f"reaction {name!r} of {self._kind} already has a handler")
            self._handlers[name] = handler
            return handler

        return register

    @property
    def reactions(self) -> Mapping[str, Handler]:
        """The registered handlers by reaction name."""
        return dict(self._handlers)

    async def handle(self, request: ReactionRequest) -> HandlerResult:
        handler = self._handlers.get(request.reaction)
        if handler is None:
            raise UnknownReactionError(request.reaction, self._kind, terminal=self._unknown_terminal)
        if _is_async(handler):
            result = handler(request)
            assert inspect.isawaitable(result)
            return await result
        loop = asyncio.get_running_loop()
        # copy_context: the thread sees the task's context variables (e.g. a
        # logging correlation id), as asyncio.to_thread would.
        call = functools.partial(contextvars.copy_context().run, handler, request)
        future = loop.run_in_executor(self._executor, call)
        try:
            result = await asyncio.shield(future)
        except asyncio.CancelledError:
            # A thread cannot be stopped: this coroutine (and with it the
            # handler's slot) lives on until the function returns, so
            # max_parallel still bounds the busy threads. The runtime has
            # already reported the deadline and set request.cancel_event.
            await asyncio.wait({future})
            raise
        if inspect.isawaitable(result):
            # A plain function that returned an awaitable (e.g. a lambda
            # wrapping a coroutine function): finish it on the loop.
            return await result
        return result


def _is_async(handler: Handler) -> bool:
    target = handler.func if isinstance(handler, functools.partial) else handler
    if inspect.iscoroutinefunction(target):
        return True
    call = getattr(target, "__call__", None)
    return call is not None and inspect.iscoroutinefunction(call)
