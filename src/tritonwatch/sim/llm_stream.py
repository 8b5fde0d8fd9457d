"""One streamed LLM request, protocol-neutral: start it, then read its responses.

The HTTP generate, OpenAI and gRPC ``ModelStreamInfer`` frontends all go through
``start_stream`` and ``LlmStream.responses``, so faults, accounting and the shape of the
response sequence (the FINAL flag with the last token, or on its own after it as a
Python-backend model sends it) live in one place.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass

from tritonwatch.sim.errors import ErrorCode, SimError
from tritonwatch.sim.llm_engine import LlmEngine, Sequence, StreamError, Token, prompt_tokens
from tritonwatch.sim.models import ModelSpec
from tritonwatch.sim.repository import ModelRepository

DECOUPLED_HTTP_INFER = "HTTP end point doesn't support models with decoupled transaction policy"
"""Real Triton 2.51's answer (501, text/plain) to ``/infer`` on a decoupled model."""
DECOUPLED_GRPC_INFER = "ModelInfer RPC doesn't support models with decoupled transaction policy"
"""Real Triton 2.51's answer (UNIMPLEMENTED) to ``ModelInfer`` on a decoupled model."""


@dataclass(frozen=True, slots=True)
class StreamResponse:
    """One response of a decoupled request: a token, a flag-only final, or an error."""

    token: Token | None
    final: bool
    error: SimError | None = None


@dataclass
class LlmStream:
    """A started request: its model and its place in the engine."""

    spec: ModelSpec
    engine: LlmEngine
    sequence: Sequence

    @property
    def prompt_tokens(self) -> int:
        """The prompt's simulated token count (OpenAI ``usage.prompt_tokens``)."""
        return self.sequence.prompt_tokens

    async def responses(self) -> AsyncGenerator[StreamResponse, None]:
        """The request's responses in order; leaving early cancels the request."""
        flag_only = self.spec.llm is not None and self.spec.llm.final_flag_only
        try:
            while True:
                item = await self.sequence.queue.get()
                if isinstance(item, StreamError):
                    yield StreamResponse(None, True, item.error)
                    return
                if item.last and flag_only:
                    yield StreamResponse(item, False)
                    yield StreamResponse(None, True)
                    return
                yield StreamResponse(item, item.last)
                if item.last:
                    return
        finally:
            self.engine.cancel(self.sequence)


def not_an_llm(name: str) -> SimError:
    """The refusal of a stream to a model that is not an LLM model (UNSUPPORTED, 501)."""
    return SimError(
        ErrorCode.UNSUPPORTED, f"the simulator streams only llm models; '{name}' is not one"
    )


def llm_spec(repository: ModelRepository, name: str, version: str) -> ModelSpec:
    """The model's spec, when it is a loaded LLM model.

    Raises:
        SimError: unknown or unloaded model (Triton's errors), or ``not_an_llm``.
    """
    spec = repository.runtime(name, version).spec
    if spec.llm is None:
        raise not_an_llm(name)
    return spec


def start_stream(
    repository: ModelRepository,
    name: str,
    version: str,
    *,
    prompt: str,
    max_tokens: int | None,
) -> LlmStream:
    """Queues a request in the model's engine, after the arrival faults.

    Raises:
        SimError: as ``llm_engine``, or an injected REJECTED/CANCELED/OTHER failure
            (counted as Triton counts it). A BACKEND failure comes later, in-stream.
    """
    runtime = repository.runtime(name, version)
    spec, engine, llm = runtime.spec, runtime.llm, runtime.spec.llm
    if engine is None or llm is None:
        raise not_an_llm(name)
    doomed = repository.draw_failure(runtime, engine.clock())
    sequence = engine.submit(
        prompt_tokens(prompt, llm.prompt_tokens_per_word),
        llm.default_max_tokens if max_tokens is None else max_tokens,
        doomed=doomed,
    )
    return LlmStream(spec, engine, sequence)
