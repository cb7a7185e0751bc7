"""A simulated GPU running vLLM's scheduler, honest enough to show the problem QoS solves.

The model, in vLLM's terms (defaults those of vLLM 0.33):
- a KV cache of `kv_cache_tokens`, handed out in blocks of `block_size` tokens;
- continuous batching: up to `max_num_seqs` sequences run together, each decode step
  gives every running sequence one token and lasts `decode_step_seconds`;
- chunked prefill (vLLM's default): each step has a budget of `max_num_batched_tokens`;
  the running sequences are scheduled first (one token each while decoding, the next
  chunk of their prompt while prefilling), then waiting ones get what is left, so a long
  prompt is prefilled a chunk per step beside everyone's decode. A step lasts the decode
  step (if anyone decodes) plus its prefill tokens / `prefill_tokens_per_second`;
- unchunked prefill (`chunked_prefill=False`, the brief's case): a step that admits new
  sequences does only their whole prefill, so a 32K-token prompt stalls the decode of the
  whole batch for ~2 s;
- a waiting queue for sequences that find no seat or no KV blocks (head-of-line, FCFS);
- when a running sequence needs a block and none is free, the newest sequence is
  preempted: its blocks are freed and it is recomputed (prefilled again) later.
With `scheduling_policy="priority"` the waiting queue is ordered by (priority, arrival)
and the preemption victim is the lowest-priority (highest value) sequence. Under "fcfs"
a request's priority is accepted and ignored, as vLLM 0.33 does.

Time comes from injected `clock` and `sleep`, scaled by `time_scale`, so tests can run
the engine on virtual time.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

_VOCABULARY = (
    " the",
    " order",
    " is",
    " on",
    " its",
    " way",
    " and",
    " your",
    " payment",
    " was",
    " received",
    " we",
    " will",
    " ship",
    " it",
    " today",
    " thank",
    " you",
    " for",
    " waiting",
    ".",
    ",",
    " please",
    " check",
    " again",
    " later",
    " a",
    " new",
    " offer",
)


@dataclass(frozen=True)
class EngineConfig:
    kv_cache_tokens: int = 131_072
    block_size: int = 16
    max_num_seqs: int = 256
    max_model_len: int = 40_960
    prefill_tokens_per_second: float = 16_384.0
    decode_step_seconds: float = 0.025
    output_tokens_min: int = 32
    output_tokens_max: int = 256
    scheduling_policy: str = "fcfs"  # or "priority"
    chunked_prefill: bool = True
    max_num_batched_tokens: int = 2048  # tokens one step schedules, with chunked prefill
    time_scale: float = 1.0
    seed: int = 0
    # vLLM's --max-num-queued-reqs: past this many unfinished requests (waiting and
    # running), a newcomer is refused (503). None: no limit, vLLM's default.
    max_num_queued_reqs: int | None = None

    @property
    def num_blocks(self) -> int:
        return self.kv_cache_tokens // self.block_size


class RequestRejected(ValueError):
    """The engine cannot take this request at all (vLLM answers 400)."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class QueueFull(RuntimeError):
    """Taking the request would pass the engine's queue limit (vLLM answers 503)."""

    # vLLM's own words (QueueOverflowError), and the reason its counter gives.
    MESSAGE = (
        "The engine is currently busy and cannot accept new requests. "
        "Please try again later or on a different instance."
    )
    REASON = "max_num_queued_reqs"


@dataclass(eq=False)
class Sequence:
    request_id: str
    prompt_tokens: int
    max_tokens: int
    target_tokens: int
    priority: int
    arrival: int
    submitted_at: float
    generated: int = 0
    blocks: int = 0
    # Context tokens still to prefill: the prompt at first, prompt and output after a
    # preemption (recomputed); 0 while decoding.
    to_prefill: int = 0
    finish_reason: str | None = None
    token_times: list[float] = field(default_factory=list)
    output: asyncio.Queue[str | None] = field(default_factory=asyncio.Queue)

    @property
    def context_tokens(self) -> int:
        return self.prompt_tokens + self.generated

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


class Engine:
    def __init__(
        self,
        config: EngineConfig,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.config = config
        self._clock = clock
        self._sleep = sleep
        self._rng = random.Random(config.seed)
        self._arrivals = itertools.count()
        self._ids = itertools.count(1)
        self._wake = asyncio.Event()
        self.waiting: list[Sequence] = []
        self.running: list[Sequence] = []
        self.free_blocks = config.num_blocks
        self.preemptions = 0
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.busy_seconds = 0.0  # computing steps, in the wall clock's seconds
        self.admission_rejections = 0  # requests refused at the queue limit
        self.on_finish: Callable[[Sequence], None] | None = None

    # -- the API the HTTP layer uses ------------------------------------------------

    def check_admission(self, sequences: int) -> None:
        """Refuse a request of `sequences` answers that would pass the queue limit, as
        vLLM's API server does before it submits anything (counted by reason)."""
        limit = self.config.max_num_queued_reqs
        if limit is not None and len(self.waiting) + len(self.running) + sequences > limit:
            self.admission_rejections += 1
            raise QueueFull(QueueFull.MESSAGE)

    def submit(
        self,
        prompt_tokens: int,
        max_tokens: int | None,
        priority: int = 0,
        ignore_eos: bool = False,
    ) -> Sequence:
        limit = self.config.max_model_len - prompt_tokens
        wanted = max_tokens if max_tokens is not None else 0
        too_long = limit <= 0 or self._blocks_for(prompt_tokens + 1) > self.config.num_blocks
        if too_long or wanted > limit:
            # vLLM 0.33 answers both with one message whose param is input_tokens.
            raise RequestRejected(
                f"This model's maximum context length is {self.config.max_model_len} tokens. "
                f"However, you requested {wanted} output tokens and your prompt contains at "
                f"least {prompt_tokens} input tokens, for a total of at least "
                f"{prompt_tokens + wanted} tokens. Please reduce the length of the input prompt "
                f"or the number of requested output tokens. "
                f"(parameter=input_tokens, value={prompt_tokens})",
                param="input_tokens",
            )
        cap = max_tokens if max_tokens is not None else limit
        natural = self._rng.randint(self.config.output_tokens_min, self.config.output_tokens_max)
        sequence = Sequence(
            request_id=str(next(self._ids)),
            prompt_tokens=prompt_tokens,
            max_tokens=cap,
            # A model stops at its natural length unless told to ignore end-of-sequence.
            target_tokens=cap if ignore_eos else max(1, min(cap, natural)),
            priority=priority,
            arrival=next(self._arrivals),
            submitted_at=self._clock(),
            to_prefill=prompt_tokens,
        )
        self.waiting.append(sequence)
        self._wake.set()
        return sequence

    def abort(self, sequence: Sequence) -> None:
        """The client went away: free the sequence's seat and blocks at once."""
        if sequence.finished:
            return
        if sequence in self.waiting:
            self.waiting.remove(sequence)
        if sequence in self.running:
            self.running.remove(sequence)
        self._free(sequence)
        sequence.finish_reason = "abort"
        sequence.output.put_nowait(None)

    def next_token(self) -> str:
        return self._rng.choice(_VOCABULARY)

    @property
    def kv_cache_usage(self) -> float:
        return 1.0 - self.free_blocks / self.config.num_blocks

    # -- the scheduler loop ------------------------------------------------------------

    async def run(self) -> None:
        while True:
            if not self.running and not self.waiting:
                self._wake.clear()
                await self._wake.wait()
                continue
            if not await self.step():
                # Nothing could run (the head of the queue waits for blocks held by
                # nobody running): wait for a new arrival or an abort.
                self._wake.clear()
                await self._wake.wait()

    async def step(self) -> bool:
        """One engine step; False when nothing could run."""
        if self.config.chunked_prefill:
            return await self._chunked_step()
        return await self._unchunked_step()

    async def _unchunked_step(self) -> bool:
        """A prefill step if anything was admitted, else a decode step."""
        admitted = self._admit_waiting()
        if admitted:
            tokens = sum(s.context_tokens for s in admitted)
            await self._wait(tokens / self.config.prefill_tokens_per_second)
            self.prompt_tokens_total += tokens
            for sequence in admitted:
                sequence.to_prefill = 0
            self._emit([s for s in admitted if s in self.running])
            return True
        if not self.running:
            return False
        self._reserve_decode_blocks()
        await self._wait(self.config.decode_step_seconds)
        self._emit(list(self.running))
        return True

    async def _chunked_step(self) -> bool:
        """Running sequences first (a token each, or their next prompt chunk), then waiting
        ones while the step's token budget and the seats last."""
        budget = self.config.max_num_batched_tokens
        scheduled: list[tuple[Sequence, int]] = []
        preempted = self.preemptions
        for sequence in sorted(self.running, key=self._keep_order):
            if sequence not in self.running:
                continue  # preempted while making room for an earlier one
            if budget <= 0:
                break
            tokens = min(sequence.to_prefill, budget) if sequence.to_prefill else 1
            if self._grow(sequence, tokens, preempt=True):
                scheduled.append((sequence, tokens))
                budget -= tokens
        if self.preemptions == preempted:  # vLLM admits nobody in a step that preempted
            self._order_waiting()
            while self.waiting and budget > 0 and len(self.running) < self.config.max_num_seqs:
                candidate = self.waiting[0]
                tokens = min(candidate.to_prefill, budget)
                if not self._grow(candidate, tokens, preempt=False):
                    break  # head-of-line: vLLM does not skip ahead of the oldest waiter
                self.waiting.pop(0)
                self.running.append(candidate)
                scheduled.append((candidate, tokens))
                budget -= tokens
        if not scheduled:
            return False
        prefill = sum(tokens for s, tokens in scheduled if s.to_prefill)
        decoding = any(not s.to_prefill for s, _ in scheduled)
        await self._wait(
            (self.config.decode_step_seconds if decoding else 0.0)
            + prefill / self.config.prefill_tokens_per_second
        )
        self.prompt_tokens_total += prefill
        ready = []
        for sequence, tokens in scheduled:
            if sequence not in self.running:
                continue  # aborted while the step ran
            if sequence.to_prefill:
                sequence.to_prefill -= tokens
                if sequence.to_prefill:
                    continue  # more chunks to come; no token yet
            ready.append(sequence)
        self._emit(ready)
        return True

    def _grow(self, sequence: Sequence, tokens: int, preempt: bool) -> bool:
        """Give `sequence` the blocks for `tokens` more tokens (and the token they yield if
        they end its prefill), preempting others if `preempt`; False if there is no room."""
        if sequence.to_prefill:  # the chunk, and the first token if the chunk is the last
            computed = sequence.context_tokens - sequence.to_prefill + tokens
            target = computed + (1 if tokens == sequence.to_prefill else 0)
        else:  # decoding: room for the next token, as in _reserve_decode_blocks
            target = sequence.context_tokens + 1
        needed = self._blocks_for(target) - sequence.blocks
        while needed > self.free_blocks:
            if not preempt:
                return False
            victim = max(self.running, key=self._keep_order)
            self._preempt(victim)
            if victim is sequence:
                return False
        sequence.blocks += max(needed, 0)
        self.free_blocks -= max(needed, 0)
        return True

    async def _wait(self, seconds: float) -> None:
        self.busy_seconds += seconds * self.config.time_scale
        await self._sleep(seconds * self.config.time_scale)

    def _admit_waiting(self) -> list[Sequence]:
        admitted = []
        self._order_waiting()
        while self.waiting and len(self.running) < self.config.max_num_seqs:
            candidate = self.waiting[0]
            needed = self._blocks_for(candidate.context_tokens + 1)
            if needed > self.free_blocks:
                break  # head-of-line: vLLM does not skip ahead of the oldest waiter
            self.waiting.pop(0)
            candidate.blocks = needed
            self.free_blocks -= needed
            self.running.append(candidate)
            admitted.append(candidate)
        return admitted

    def _order_waiting(self) -> None:
        if self.config.scheduling_policy == "priority":
            self.waiting.sort(key=lambda s: (s.priority, s.arrival))

    def _reserve_decode_blocks(self) -> None:
        """Give every running sequence room for its next token, preempting if needed."""
        for sequence in sorted(self.running, key=self._keep_order):
            if sequence not in self.running:
                continue  # preempted while making room for an earlier one
            needed = self._blocks_for(sequence.context_tokens + 1) - sequence.blocks
            while needed > self.free_blocks:
                victim = max(self.running, key=self._keep_order)
                self._preempt(victim)
                if victim is sequence:
                    break
            if sequence in self.running:
                sequence.blocks += needed
                self.free_blocks -= needed

    def _keep_order(self, sequence: Sequence) -> tuple[int, int]:
        """Sort key: the first to keep, the last to preempt."""
        if self.config.scheduling_policy == "priority":
            return (sequence.priority, sequence.arrival)
        return (0, sequence.arrival)

    def _preempt(self, sequence: Sequence) -> None:
        self.running.remove(sequence)
        self._free(sequence)
        sequence.to_prefill = sequence.context_tokens
        self.waiting.insert(0, sequence)  # recompute: prefilled again, first in line
        self.preemptions += 1

    def _emit(self, sequences: list[Sequence]) -> None:
        now = self._clock()
        for sequence in sequences:
            sequence.generated += 1
            sequence.token_times.append(now)
            self.generation_tokens_total += 1
            sequence.output.put_nowait(self.next_token())
            if sequence.generated >= sequence.target_tokens:
                sequence.finish_reason = (
                    "length" if sequence.generated >= sequence.max_tokens else "stop"
                )
                self.running.remove(sequence)
                self._free(sequence)
                sequence.output.put_nowait(None)
                if self.on_finish is not None:
                    self.on_finish(sequence)

    def _free(self, sequence: Sequence) -> None:
        self.free_blocks += sequence.blocks
        sequence.blocks = 0
        self._wake.set()

    def _blocks_for(self, tokens: int) -> int:
        return math.ceil(tokens / self.config.block_size)
