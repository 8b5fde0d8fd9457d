"""The errors of the hand-written wire readers (HTTP/1.1, HTTP/2), in a module of their
own so that the limits they read under (:mod:`tritonwatch.wire.limits`) and the
readers can both name them without importing each other."""

from __future__ import annotations


class HttpProtocolError(Exception):
    """The peer sent something this client cannot read as an HTTP/1.1 response."""

    answer_start: bytes = b""
    """The first bytes of the answer it could not read, where the reader kept them (the
    canary logs their first line when a library reads what we could not)."""


class AnswerTooLargeError(HttpProtocolError):
    """An answer (or a part of it) outgrew its bound: the outcome ``too_large``.

    A subclass of :class:`HttpProtocolError` so that every reader that already ends a
    connection on a protocol error (the engine, the event loop's connections) ends it
    here too; the canary tells it apart (:func:`tritonwatch.probe.canary.clients.classify_error`)
    and never retries it on a library client: a library would read the same gibibyte.
    """
