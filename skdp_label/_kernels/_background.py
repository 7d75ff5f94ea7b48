"""Compile a kernel in another process while its Python twin runs here.

A large first call of a kernel that numba's cache does not hold used to
compile it at once (2-5 s of typing and lowering before the first label).
Instead, :func:`run_while_compiling` starts a *compiler*: a fresh Python
process (``subprocess``: fork and exec, no copy of this process's memory)
that imports the kernel's module and compiles the kernel for the call's
argument *types* into numba's on-disk cache. Meanwhile this process runs the
kernel's twin (:mod:`._twin`, the same digits and the same bits) on
consecutive chunks of rows; when the compiler exits, the rest of the rows run
compiled (loaded from the cache, or compiled here if the compiler failed).
A call that the twin finishes first returns at once; the compiler goes on
filling the cache for the next calls and processes.

What the compiler receives (:func:`compile_request`) is public by
construction: the package's directory, the kernel's module and name, and the
numba type of each argument (dtype, number of dimensions, layout, a tuple's
member types, "a numpy Generator", "a PCG64 stream", "None"). Never an
array's contents, a scalar's value, the generator or its state: two calls on
different labels or from different generators send the same request (tests/test_background.py).

Chunking relies on a convention of the kernels run through
:func:`~._twin.kernel_for`: their per-row arrays are the parameters named
``y``, ``codes``, ``out`` or ``rows`` (row i read or written at index i
only), and on a numpy ``Generator`` they read the random digits row after
row, so chunks of consecutive rows read the same digits as one call.
"""

import inspect
import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
from numba import from_dtype, types

from ._pcg64 import call_with_stream, inlinable, stream_type
from ._twin import twin, would_compile

__all__ = ["run_while_compiling", "compile_request", "compiles_here", "compiling_elsewhere",
           "wait_for_compilers"]

ENABLED = os.environ.get("SKDP_LABEL_BACKGROUND_COMPILE", "1") != "0"
ROW_PARAMETERS = ("y", "codes", "out", "rows")
CHUNK = 16 * 256  # rows per interpreted chunk (whole blocks of the two-pass kernels)
# What a compiler takes (CPU seconds: python, numba and the kernel's module
# imported, the kernel typed and lowered; 1.5-4 s for the samplers' kernels
# on a shared machine), and what the twin takes a row (CPU seconds: 1.6-8.3 us
# a label on the samplers' bulk paths in benchmarks/bench_twins.py, more with
# many exact-tail draws). A call whose rows project more interpreting than a
# compile (n * TWIN_SECONDS_PER_ROW > EXPECTED_COMPILE: from 500,000 rows on)
# compiles here at once. The rule reads only the number of rows, never a
# measured time: the twin's time depends on the labels (exact tails read more
# digits), and a decision on it would show them to whoever sees the process
# (a compiler in ps, the call's time).
EXPECTED_COMPILE = 2.0
TWIN_SECONDS_PER_ROW = 4e-6
# Longest the twin runs waiting for a compiler, then the rest compiles here;
# a compiler still running after TIMEOUT is killed.
PATIENCE = 30.0
TIMEOUT = 300.0

_COMPILERS = {}  # (kernel, request) -> _Compiler: one per kernel and signature
if hasattr(os, "register_at_fork"):
    # A forked child inherits the compilers but not their watcher threads:
    # a running one would never look done there (the twin for PATIENCE
    # seconds, then a kill of a process that is not its child, maybe of a
    # reused pid). The child starts its own.
    os.register_at_fork(after_in_child=_COMPILERS.clear)


def _encode_type(t):
    """A JSON description of the numba type ``t`` (None if not supported)."""
    if isinstance(t, types.Array):
        dtype = _encode_type(t.dtype)
        if dtype is None:
            return None
        return {"array": dtype["scalar"], "ndim": t.ndim, "layout": t.layout,
                "readonly": not t.mutable, "aligned": t.aligned}
    if isinstance(t, (types.Boolean, types.Integer, types.Float)):
        return {"scalar": str(np.dtype(str(t)))}
    if isinstance(t, types.BaseTuple):
        members = [_encode_type(m) for m in t.types]
        return None if None in members else {"tuple": members}
    if isinstance(t, types.NumPyRandomGeneratorType):
        return {"generator": True}
    if t == stream_type:
        return {"pcg64_stream": True}
    if isinstance(t, types.NoneType):
        return {"none": True}
    return None


def _decode_type(d):
    if "array" in d:
        return types.Array(from_dtype(np.dtype(d["array"])), d["ndim"], d["layout"],
                           readonly=d["readonly"], aligned=d["aligned"])
    if "scalar" in d:
        return from_dtype(np.dtype(d["scalar"]))
    if "tuple" in d:
        return types.BaseTuple.from_types([_decode_type(m) for m in d["tuple"]])
    if "none" in d:
        return types.none
    if "pcg64_stream" in d:
        return stream_type
    from numba import typeof

    return typeof(np.random.default_rng(0))  # a dummy: only its type is used


def _locate(kernel):
    """(attribute, key) naming ``kernel`` in its module: a module attribute,
    or an entry of a dict attribute with a tuple key (closures built at
    import, like ``_DISCRETE_ROWS``); None if not found."""
    module = sys.modules.get(kernel.py_func.__module__)
    for name, value in vars(module or {}).items():
        if value is kernel:
            return name, None
        if isinstance(value, dict):
            for key, entry in value.items():
                if entry is kernel and isinstance(key, tuple) and all(
                    isinstance(k, (bool, int, str)) for k in key
                ):
                    return name, list(key)
    return None


def compile_request(kernel, args):
    """The JSON text a compiler receives for ``kernel(*args)`` (None if the
    call's types or the kernel's place cannot be described): types only."""
    place = _locate(kernel)
    # A Generator on PCG64 reaches the compiled kernel as a PCG64Stream.
    signature = [_encode_type(stream_type if inlinable(a) else kernel.typeof_pyval(a))
                 for a in args]
    if place is None or None in signature:
        return None
    package = sys.modules[__name__.split(".")[0]]
    return json.dumps({
        "root": os.path.dirname(os.path.dirname(os.path.abspath(package.__file__))),
        "module": kernel.py_func.__module__, "attribute": place[0], "key": place[1],
        "signature": signature,
    }, sort_keys=True)


# The compiler's program. The kernel's parent packages are empty stubs:
# skdp_label's __init__ imports the estimators and scikit-learn, which take
# longer than most compilations; the module itself and its imports are real.
_PROGRAM = """
import importlib, json, os, sys, types
request = json.loads(sys.stdin.read())
parts = request["module"].split(".")
for i in range(1, len(parts)):
    name = ".".join(parts[:i])
    stub = types.ModuleType(name)
    stub.__path__ = [os.path.join(request["root"], *parts[:i])]
    sys.modules[name] = stub
importlib.import_module(request["module"])
from skdp_label._kernels._background import compile_requested
compile_requested(request)
"""


def compile_requested(request):
    """In the compiler: compile the requested kernel for the requested types
    (numba saves the machine code in its cache)."""
    module = sys.modules[request["module"]]
    kernel = getattr(module, request["attribute"])
    if request["key"] is not None:
        kernel = kernel[tuple(request["key"])]
    kernel.compile(tuple(_decode_type(d) for d in request["signature"]))


class _Compiler:
    """A compiler process and the thread that waits for it (so it never
    lingers as a zombie), killing it after ``TIMEOUT`` seconds."""

    def __init__(self, request):
        self.request = request
        self.returncode = None
        self.done = threading.Event()
        # -P: not the working directory first on sys.path (``-c`` puts it
        # there: a json.py or numba.py in it would run in the compiler).
        self.process = subprocess.Popen(
            [sys.executable, "-P", "-c", _PROGRAM], stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        try:
            self.process.stdin.write(request.encode())
            self.process.stdin.close()
        except OSError:  # it died already: the watcher reaps it
            pass
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _watch(self):
        try:
            self.returncode = self.process.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            self.cancel()
            self.returncode = self.process.wait()
        finally:
            self.done.set()

    def cancel(self):
        try:
            self.process.kill()
        except OSError:
            pass


def _cache_writable(kernel):
    path = getattr(getattr(kernel, "_cache", None), "_cache_path", None)
    return path is not None and os.access(path, os.W_OK)


def _request(kernel, args):
    """The request of a compiler for this call, or None when none can be
    used (turned off, no writable numba cache, types not described)."""
    if not ENABLED or not _cache_writable(kernel):
        return None
    return compile_request(kernel, args)


def _launch(kernel, request):
    """The compiler of ``kernel`` for ``request`` (started now, or already
    running or done), or None if no process can start."""
    compiler = _COMPILERS.get((kernel, request))
    if compiler is None:
        try:
            compiler = _Compiler(request)
        except OSError:  # no processes left, no executable
            return None
        _COMPILERS[kernel, request] = compiler
    return compiler


def _start(kernel, args):
    request = _request(kernel, args)
    return None if request is None else _launch(kernel, request)


def _row_count(kernel, args):
    """The call's number of rows (its ``out`` or ``rows`` argument's length)
    and the positions of the per-row arguments; None if it has no such output."""
    names = list(inspect.signature(kernel.py_func).parameters)
    rows = [i for i, name in enumerate(names) if name in ROW_PARAMETERS]
    outputs = [i for i in rows if names[i] in ("out", "rows")]
    if len(names) != len(args) or not outputs:
        return None
    n = args[outputs[0]].shape[0]
    arrays = [i for i, a in enumerate(args) if isinstance(a, np.ndarray) and a.ndim and
              a.shape[0] == n]
    if any(i not in rows for i in arrays):
        # Maybe a per-row array under another name: sliced wrongly, it would
        # misalign rows. Not chunked (compiled at once), whatever the reason.
        return None
    # Per-row arrays of another length are empty ones (a path not taken).
    return n, [i for i in rows if i in arrays]


def _rows(args, positions, start, stop):
    return [a[start:stop] if i in positions else a for i, a in enumerate(args)]


def _run_compiled(kernel, args):
    """The compiled ``kernel(*args)``, drawing through a PCG64Stream."""
    generators = [a for a in args if inlinable(a)]
    if generators:
        call_with_stream(kernel, generators[0], *args)
    else:
        kernel(*args)


def compiles_here(n):
    """Whether a call of ``n`` rows compiles its kernel here at once (no
    compiler, no twin): its interpreting would be projected to outlast a
    compile. A function of the public number of rows only."""
    return n * TWIN_SECONDS_PER_ROW > EXPECTED_COMPILE


def run_while_compiling(kernel, *args):
    """``kernel(*args)``: the twin on chunks of rows while a compiler
    compiles the kernel, then the compiled kernel on the rest. Compiled
    here at once when the number of rows projects more than
    ``EXPECTED_COMPILE`` seconds of interpreting (:func:`compiles_here`),
    when no compiler can be used, or when the call has no per-row arguments.
    Returns None (the kernels write into ``out``)."""
    shape = _row_count(kernel, args)
    request = _request(kernel, args) if shape is not None else None
    compiler = None
    if request is not None and not compiles_here(shape[0]):
        compiler = _launch(kernel, request)
    if compiler is None:
        _run_compiled(kernel, args)
        return None
    n, positions = shape
    interpreted = twin(kernel)
    start = 0
    deadline = time.monotonic() + PATIENCE
    while start < n and not compiler.done.is_set():
        if time.monotonic() > deadline:
            compiler.cancel()  # stuck: compile here instead
            break
        stop = min(start + CHUNK, n)
        interpreted(*_rows(args, positions, start, stop))
        start = stop
    if start < n:
        # Loads what the compiler cached; compiles here if it failed.
        _run_compiled(kernel, _rows(args, positions, start, n))
    return None


def compiling_elsewhere(kernel, *args):
    """Whether ``kernel(*args)`` would compile in this process now (not
    loaded, not in numba's cache, and no compiler of this process has put it
    there since), for a caller with an exact alternative (numpy: the same
    digits, slower than the kernel but far quicker than its compile). Then
    a compiler starts for the call's types (``args`` may be empty arrays of
    the call's dtypes; nothing of their values is sent), so that later calls
    and processes load the kernel. False once that compiler has exited (the
    kernel loads from the cache, or compiles here if it failed), and, as
    before, when no compiler can be used (turned off, no writable cache, a
    keyed source): the caller compiles the kernel, once. A function of the
    numba cache and the compilers' states only."""
    if not would_compile(kernel):
        return False
    request = _request(kernel, args)
    compiler = None if request is None else _launch(kernel, request)
    return compiler is not None and not compiler.done.is_set()


def wait_for_compilers(timeout=None):
    """Wait until every compiler started by this process has exited."""
    for compiler in list(_COMPILERS.values()):
        compiler.done.wait(timeout)
