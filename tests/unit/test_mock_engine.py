"""The simulated GPU on virtual time: every duration is exact, nothing sleeps."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from sidecar.tooling.mockvllm.engine import Engine, EngineConfig, QueueFull, RequestRejected

STEP = 0.025  # decode step, seconds
PREFILL_RATE = 16_384.0  # tokens/s: a 32K prompt takes 2 s


class VirtualTime:
    def __init__(self) -> None:
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds
        await asyncio.sleep(0)


def engine(**overrides) -> tuple[Engine, VirtualTime]:
    time = VirtualTime()
    config = EngineConfig(
        decode_step_seconds=STEP, prefill_tokens_per_second=PREFILL_RATE, **overrides
    )
    return Engine(config, clock=time.clock, sleep=time.sleep), time


async def run_until_finished(gpu: Engine, sequences, on_step=None) -> None:
    while not all(s.finished for s in sequences):
        if on_step:
            on_step()
        assert await gpu.step(), "the engine stalled with work left"


def gaps(times):
    return [later - earlier for earlier, later in itertools.pairwise(times)]


@pytest.mark.asyncio
async def test_short_requests_decode_at_the_step_time():
    gpu, _ = engine()
    shorts = [gpu.submit(prompt_tokens=100, max_tokens=40, ignore_eos=True) for _ in range(4)]
    await run_until_finished(gpu, shorts)
    for short in shorts:
        assert short.generated == 40
        assert short.finish_reason == "length"
        assert max(gaps(short.token_times)) == pytest.approx(STEP)


async def decode_beside_a_long_prompt(**overrides):
    """Four short answers decoding when a 32K-token prompt arrives: their token times and
    the long one."""
    gpu, time = engine(**overrides)
    shorts = [gpu.submit(prompt_tokens=100, max_tokens=40, ignore_eos=True) for _ in range(4)]
    longs = []

    def arrive_mid_decode():
        if time.now >= 0.2 and not longs:
            longs.append(gpu.submit(prompt_tokens=32_768, max_tokens=8, ignore_eos=True))

    await run_until_finished(gpu, shorts, on_step=arrive_mid_decode)
    await run_until_finished(gpu, longs)
    return shorts, longs[0]


@pytest.mark.asyncio
async def test_unchunked_a_long_prompt_stalls_the_decode_of_the_whole_batch():
    shorts, _ = await decode_beside_a_long_prompt(chunked_prefill=False)
    prefill = 32_768 / PREFILL_RATE
    for short in shorts:
        worst = max(gaps(short.token_times))
        # The stalled token waited for the whole 2 s prefill plus its own decode step.
        assert worst == pytest.approx(prefill + STEP)
        assert worst / STEP > 50  # TPOT 25 ms → ~2 s, the problem in the brief


@pytest.mark.asyncio
async def test_chunked_a_long_prompt_is_prefilled_beside_the_decode_in_budget_sized_chunks():
    budget = 2048
    shorts, long = await decode_beside_a_long_prompt(max_num_batched_tokens=budget)
    # Each step gives the four decoders a token each and the long prompt the rest.
    chunk = budget - len(shorts)
    for short in shorts:
        assert short.generated == 40
        assert max(gaps(short.token_times)) == pytest.approx(STEP + chunk / PREFILL_RATE)
    # The prompt took ceil(32768 / 2044) = 17 steps; its first token came with the last.
    steps = -(-32_768 // chunk)
    ttft = long.token_times[0] - long.submitted_at
    assert steps * STEP < ttft <= steps * (STEP + chunk / PREFILL_RATE) + STEP
    assert long.generated == 8


@pytest.mark.asyncio
async def test_chunked_prefill_takes_kv_blocks_a_chunk_at_a_time():
    gpu, _ = engine(max_num_batched_tokens=64, kv_cache_tokens=1024, block_size=16)
    sequence = gpu.submit(prompt_tokens=200, max_tokens=3, ignore_eos=True)
    await gpu.step()
    assert (gpu.free_blocks, sequence.generated) == (64 - 4, 0)  # 64 tokens, no token yet
    for _ in range(3):
        await gpu.step()
    # 200 tokens prefilled in four chunks; the last one yields the first token.
    assert (gpu.free_blocks, sequence.generated) == (64 - 13, 1)
    await run_until_finished(gpu, [sequence])
    assert gpu.free_blocks == 64


@pytest.mark.asyncio
async def test_fcfs_accepts_a_priority_and_ignores_it():
    gpu, _ = engine(max_num_seqs=1)
    first = gpu.submit(prompt_tokens=10, max_tokens=3, priority=5, ignore_eos=True)
    jumper = gpu.submit(prompt_tokens=10, max_tokens=3, priority=-100, ignore_eos=True)
    await run_until_finished(gpu, [first, jumper])
    assert first.token_times[-1] < jumper.token_times[0]


@pytest.mark.asyncio
async def test_kv_blocks_are_taken_while_running_and_returned_when_finished():
    gpu, _ = engine(kv_cache_tokens=1024, block_size=16)
    sequence = gpu.submit(prompt_tokens=100, max_tokens=20, ignore_eos=True)
    await gpu.step()  # prefill: room for the prompt and the first token
    assert gpu.free_blocks == 64 - 7
    assert gpu.kv_cache_usage == pytest.approx(7 / 64)
    await run_until_finished(gpu, [sequence])
    assert gpu.free_blocks == 64
    assert gpu.kv_cache_usage == 0.0


@pytest.mark.asyncio
async def test_requests_wait_for_a_seat_when_the_batch_is_full():
    gpu, _ = engine(max_num_seqs=2)
    sequences = [gpu.submit(prompt_tokens=10, max_tokens=5, ignore_eos=True) for _ in range(3)]
    await gpu.step()
    assert len(gpu.running) == 2
    assert gpu.waiting == [sequences[2]]
    await run_until_finished(gpu, sequences)
    assert sequences[2].token_times[0] >= max(sequences[0].token_times)


@pytest.mark.asyncio
async def test_requests_wait_for_kv_blocks_head_of_line():
    gpu, _ = engine(kv_cache_tokens=256, block_size=16)
    big = gpu.submit(prompt_tokens=200, max_tokens=4, ignore_eos=True)
    small = gpu.submit(prompt_tokens=100, max_tokens=4, ignore_eos=True)
    await gpu.step()
    assert gpu.running == [big]
    assert gpu.waiting == [small]
    await run_until_finished(gpu, [big, small])
    assert small.token_times[0] > big.token_times[-1]


@pytest.mark.asyncio
async def test_running_out_of_blocks_preempts_the_newest_sequence():
    gpu, _ = engine(kv_cache_tokens=64, block_size=16)
    old = gpu.submit(prompt_tokens=15, max_tokens=40, ignore_eos=True)
    new = gpu.submit(prompt_tokens=15, max_tokens=40, ignore_eos=True)
    await run_until_finished(gpu, [old, new])
    assert gpu.preemptions >= 1
    assert old.generated == new.generated == 40
    assert old.token_times[-1] < new.token_times[-1]  # the old one was never set back


@pytest.mark.asyncio
async def test_priority_policy_orders_the_queue_and_preempts_the_lowest_priority():
    gpu, _ = engine(kv_cache_tokens=64, block_size=16, scheduling_policy="priority")
    batch = gpu.submit(prompt_tokens=15, max_tokens=40, priority=2, ignore_eos=True)
    realtime = gpu.submit(prompt_tokens=15, max_tokens=40, priority=0, ignore_eos=True)
    await run_until_finished(gpu, [batch, realtime])
    assert gpu.preemptions >= 1
    assert realtime.token_times[-1] < batch.token_times[-1]


@pytest.mark.asyncio
async def test_abort_frees_the_seat_and_blocks_at_once():
    gpu, _ = engine(kv_cache_tokens=1024)
    sequence = gpu.submit(prompt_tokens=100, max_tokens=100, ignore_eos=True)
    await gpu.step()
    gpu.abort(sequence)
    assert gpu.running == [] and gpu.free_blocks == 64
    assert sequence.finish_reason == "abort"


@pytest.mark.asyncio
async def test_without_ignore_eos_an_answer_stops_at_its_natural_length():
    gpu, _ = engine(output_tokens_min=5, output_tokens_max=10)
    sequence = gpu.submit(prompt_tokens=10, max_tokens=100)
    await run_until_finished(gpu, [sequence])
    assert 5 <= sequence.generated <= 10
    assert sequence.finish_reason == "stop"


def test_requests_the_engine_cannot_take_are_rejected():
    gpu, _ = engine(max_model_len=1000)
    # One answer for both, as vLLM 0.33 gives it.
    with pytest.raises(RequestRejected, match="maximum context length is 1000") as long:
        gpu.submit(prompt_tokens=1000, max_tokens=None)
    assert long.value.param == "input_tokens"
    with pytest.raises(RequestRejected, match="requested 900 output tokens") as over:
        gpu.submit(prompt_tokens=200, max_tokens=900, ignore_eos=True)
    assert over.value.param == "input_tokens"


@pytest.mark.asyncio
async def test_the_same_seed_gives_the_same_answers():
    async def answer(seed):
        gpu, _ = engine(seed=seed)
        sequence = gpu.submit(prompt_tokens=10, max_tokens=None)
        await run_until_finished(gpu, [sequence])
        words = []
        while (token := sequence.output.get_nowait()) is not None:
            words.append(token)
        return words

    assert await answer(7) == await answer(7)
    assert await answer(7) != await answer(8)


def test_past_its_queue_limit_a_request_is_refused_and_counted_as_vllm_does():
    gpu, _ = engine(max_num_queued_reqs=3, max_num_seqs=1)
    for _ in range(2):
        gpu.check_admission(1)
        gpu.submit(10, 5)
    gpu.check_admission(1)  # the third fits: running and waiting together are 2
    with pytest.raises(QueueFull):
        gpu.check_admission(2)  # a request of two answers would make 4
    assert gpu.admission_rejections == 1
    unlimited, _ = engine()
    unlimited.check_admission(10_000)
    assert unlimited.admission_rejections == 0
