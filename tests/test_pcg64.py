"""The inlined PCG64 (``_kernels._pcg64``): numpy's draws and states, bit for
bit; spent digits never replayed (a raising kernel, two threads); streams
never kept; other bit generators untouched."""

import gc
import pickle
import threading

import numba
import numpy as np
import pytest

from skdp_label._kernels import _pcg64
from skdp_label._kernels._pcg64 import (
    PCG64Stream,
    call_with_stream,
    held_digit,
    held_int_digit,
    hold,
    inlinable,
    release,
)
from skdp_label.mechanisms import get_mechanism_class


@numba.njit(nogil=True)
def _fill(rng, out):
    for i in range(out.shape[0]):
        out[i] = rng.random()


@numba.njit(nogil=True)
def _fill_then_raise(rng, out, stop):
    for i in range(out.shape[0]):
        if i == stop:
            raise ValueError("stopped")
        out[i] = rng.random()


@pytest.mark.parametrize("seed", [0, 1, 2**63 + 5, 12345678901234567890])
def test_the_stream_draws_numpys_doubles_and_ends_in_its_state(seed):
    mine, reference = np.random.default_rng(seed), np.random.default_rng(seed)
    out = np.empty(10_001)
    call_with_stream(_fill, mine, mine, out)
    assert np.array_equal(out, reference.random(10_001))
    assert mine.bit_generator.state == reference.bit_generator.state
    assert mine.random(3).tolist() == reference.random(3).tolist()


@numba.njit(nogil=True)
def _new_then_draw(words, out):
    # The stream's fields are written and then drawn from in one compiled function, where
    # LLVM may inline the constructor next to random()'s invariant loads of the increment.
    stream = _pcg64._new_stream(words[0], words[1], words[2], words[3])
    for i in range(out.shape[0]):
        out[i] = stream.random()


def test_a_stream_made_and_drawn_in_one_compiled_function_draws_numpys_doubles():
    reference = np.random.default_rng(11)
    state = reference.bit_generator.state["state"]
    mask = (1 << 64) - 1
    words = np.array([state["state"] >> 64, state["state"] & mask, state["inc"] >> 64,
                      state["inc"] & mask], dtype=np.uint64)
    out = np.empty(257)
    _new_then_draw(words, out)
    assert np.array_equal(out, reference.random(257))


def test_the_stream_continues_after_numpys_own_draws_and_keeps_its_buffer():
    # A buffered 32-bit half (has_uint32) must survive the round trip.
    mine, reference = np.random.default_rng(7), np.random.default_rng(7)
    for g in (mine, reference):
        g.integers(0, 2**32, dtype=np.uint32)
        g.random(5)
    assert mine.bit_generator.state["has_uint32"] == 1
    out = np.empty(100)
    call_with_stream(_fill, mine, mine, out)
    assert np.array_equal(out, reference.random(100))
    assert mine.bit_generator.state == reference.bit_generator.state
    assert mine.integers(0, 2**32, dtype=np.uint32) == reference.integers(0, 2**32, dtype=np.uint32)


def test_a_raising_kernel_spends_the_digits_it_read():
    # The digits drawn before the error are spent: the next release must not
    # read them again (the Generator jumps past them).
    mine, reference = np.random.default_rng(3), np.random.default_rng(3)
    out = np.zeros(50)
    with pytest.raises(ValueError, match="stopped"):
        call_with_stream(_fill_then_raise, mine, mine, out, 20)
    assert np.array_equal(out[:20], reference.random(20))
    reference.bit_generator.advance(_pcg64._JUMP_ON_ERROR)
    assert mine.bit_generator.state == reference.bit_generator.state


@numba.njit(nogil=True)
def _held_fill_then_raise(rng, out, stop):
    # Raises with digits drawn from a held state that was never released.
    state = _pcg64.hold(rng)
    for i in range(out.shape[0]):
        if i == stop:
            raise ValueError("stopped")
        d, state = _pcg64.held_digit(rng, state)
        out[i] = d
    _pcg64.release(rng, state)


def test_a_kernel_raising_inside_a_hold_never_lets_its_digits_be_read_again():
    rng = np.random.default_rng(5)
    out = np.zeros(64)
    with pytest.raises(ValueError, match="stopped"):
        call_with_stream(_held_fill_then_raise, rng, rng, out, 40)
    read = out[:40] / 2.0**53
    assert np.array_equal(read, np.random.default_rng(5).random(40))
    # The stream was never written, yet the next release does not start at those digits.
    after = rng.random(10_000)
    assert not np.isin(read, after).any()
    # Mutation: without the jump, the next draws are exactly the digits already read.
    replay = np.random.default_rng(5)
    with pytest.raises(ValueError, match="stopped"):
        call_with_stream(_held_fill_then_raise, replay, replay, out, 40)
    replay.bit_generator.advance(-_pcg64._JUMP_ON_ERROR % (1 << 128))
    assert np.array_equal(replay.random(40), read)


def test_two_threads_on_one_generator_never_share_digits():
    rng = np.random.default_rng(11)
    outs = [np.empty(200_000) for _ in range(4)]
    threads = [threading.Thread(target=call_with_stream, args=(_fill, rng, rng, o)) for o in outs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    drawn = np.concatenate(outs)
    expected = np.random.default_rng(11).random(drawn.shape[0])
    # Each call read a consecutive block of the one stream, none twice.
    assert np.unique(drawn).shape[0] == drawn.shape[0]
    assert np.array_equal(np.sort(drawn), np.sort(expected))


@pytest.mark.parametrize("bit_generator", [np.random.MT19937, np.random.Philox, np.random.PCG64DXSM])
def test_other_bit_generators_draw_through_numpy(bit_generator):
    mine, reference = (np.random.Generator(bit_generator(5)) for _ in range(2))
    assert not inlinable(mine)
    out = np.empty(1000)
    call_with_stream(_fill, mine, mine, out)
    assert np.array_equal(out, reference.random(1000))
    assert mine.random() == reference.random()  # the same state


def test_the_wrapper_is_the_exact_type():
    class Derived(np.random.PCG64):
        pass

    assert inlinable(np.random.default_rng(0))
    assert not inlinable(np.random.Generator(Derived(0)))
    assert not inlinable(np.random.RandomState(0)) and not inlinable(None)


def test_streams_are_not_kept_after_a_release():
    y = np.random.default_rng(0).uniform(0, 400, 50_000)
    mechanism = get_mechanism_class("laplace")(epsilon=1.0, bounds=(0, 400), random_state=4)
    mechanism.fit_transform(y)
    gc.collect()
    # type(), not isinstance(): gc also lists dead weak proxies, which raise.
    assert not [o for o in gc.get_objects() if type(o) is PCG64Stream]
    assert b"PCG64Stream" not in pickle.dumps(mechanism)
    assert not [v for v in vars(_pcg64).values() if isinstance(v, PCG64Stream)]


def test_a_wrong_increment_gives_other_draws():
    # The draw tests above can fail: a stream one bit away from the
    # generator's state draws other numbers.
    rng = np.random.default_rng(0)
    words = rng.bit_generator.state["state"]
    stream = PCG64Stream(words["state"], words["inc"] ^ 2)
    assert stream.random() != rng.random()


@numba.njit(nogil=True)
def _out_of_line_draw(rng):
    return rng.random()


def _held_kernel(released):
    """A kernel drawing from a held state (``_pcg64.hold``): per row a float
    digit and an int digit, and every 7th row a draw by an out-of-line call
    on ``rng`` itself, around which the state is released and held again
    (``released=False``: the mutant that forgets, and replays digits)."""

    @numba.njit(nogil=True)
    def kernel(rng, out):
        state = hold(rng)
        for i in range(out.shape[0]):
            d, state = held_digit(rng, state)
            e, state = held_int_digit(rng, state)
            extra = 0.0
            if i % 7 == 3:
                if released:
                    release(rng, state)
                extra = _out_of_line_draw(rng)
                state = hold(rng)
            out[i, 0], out[i, 1], out[i, 2] = d, float(e), extra
        release(rng, state)

    return kernel


def _held_reference(rng, n):
    out = np.zeros((n, 3))
    for i in range(n):
        out[i, 0] = rng.random() * 2.0**53
        out[i, 1] = float(int(rng.random() * 2.0**53))
        if i % 7 == 3:
            out[i, 2] = rng.random()
    return out


@pytest.mark.parametrize("source", ["stream", "mt19937", "twin"])
def test_a_held_state_draws_numpys_digits_and_is_released(source):
    # The held state (a kernel's registers) reads the digits rng.random()
    # would, in order, around out-of-line draws, and the Generator ends in
    # numpy's state: through the stream, for another bit generator (drawn
    # through numpy) and in the Python twin.
    from skdp_label._kernels import _twin

    make = (lambda: np.random.Generator(np.random.MT19937(9))) if source == "mt19937" else (
        lambda: np.random.default_rng(9))
    mine, reference = make(), make()
    out = np.empty((500, 3))
    kernel = _held_kernel(True)
    if source == "twin":
        _twin.twin(kernel)(mine, out)
    else:
        call_with_stream(kernel, mine, mine, out)
    assert np.array_equal(out, _held_reference(reference, 500))
    assert mine.random(3).tolist() == reference.random(3).tolist()  # the same state


def test_a_state_not_released_before_an_out_of_line_draw_is_caught():
    # The mutant replays the digits drawn since the last hold: other outputs.
    mine, reference = np.random.default_rng(9), np.random.default_rng(9)
    out = np.empty((50, 3))
    call_with_stream(_held_kernel(False), mine, mine, out)
    assert not np.array_equal(out, _held_reference(reference, 50))
