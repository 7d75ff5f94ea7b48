"""``skdp-label keygen`` and ``skdp-label privatize``: the labels party's tool.

``privatize`` streams a CSV or Parquet file in batches (pyarrow), so memory is
bounded by the batch size (and the input's row-group size), not by the number
of rows, and releases one label column with keyed, idempotent noise
(:mod:`skdp_label.release`):

* pass 1 reads the label (and id) column only: every input error (missing
  column, non-numeric or missing labels, labels outside the bounds or classes,
  duplicate ids) is found here, *before* anything is charged; prior-based
  mechanisms also sum their exact per-batch counts here;
* the release is charged to the ledger (once per release id: a rerun is free)
  and the mechanism is fitted, its private prior noised once;
* pass 2 randomizes and writes the id and the noisy label (other columns only
  with ``--columns``) to a temporary file beside the output, renamed into
  place when complete, so a failure leaves no partial output;
* the manifest (``OUTPUT.manifest.json``) records the release and the SHA-256
  of the output. It is what the platform receives.

Rerunning the same command (same key, release id, mechanism and input)
reproduces the same output byte for byte and charges nothing.
"""

import argparse
import hashlib
import json
import os
import sys
import tempfile
import textwrap
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack

import numpy as np

FAMILY_EXAMPLES = """\
examples, one per mechanism family (the key file comes from `skdp-label keygen label.key`):

  binned RR with a private prior (two passes):
    skdp-label privatize conversions.parquet --label value --id user_id \\
      --mechanism rr-on-bins --epsilon 1 --bounds 0 400 --grid-step 1 \\
      --key-file label.key --release-id 2026-q4-value \\
      --ledger budget.jsonl --budget 8 --output released.parquet
  unbiased randomizers:
    skdp-label privatize sales.csv --label amount --mechanism unbiased --epsilon 2 \\
      --bounds 0 100 --key-file label.key --release-id amt-1 \\
      --ledger budget.jsonl --budget 8 --output released.csv
  additive noise (laplace, gaussian, staircase, discrete-laplace, ...):
    skdp-label privatize sales.parquet --label amount --id user_id --mechanism gaussian \\
      --epsilon 1 --param delta=1e-6 --bounds 0 100 --key-file label.key \\
      --release-id amt-2 --ledger budget.jsonl --budget 8 --output released.parquet
  randomized quantization (rqm, erm, optm, mvu, quantization):
    skdp-label privatize sales.parquet --label amount --mechanism mvu --epsilon 1 \\
      --bounds 0 100 --param grid_size=11 --key-file label.key --release-id amt-3 \\
      --ledger budget.jsonl --budget 8 --output released.parquet
  RP / RR with prior for regression:
    skdp-label privatize sales.parquet --label amount --mechanism rp-with-prior --epsilon 1 \\
      --bounds 0 100 --grid-step 1 --param loss=absolute --key-file label.key \\
      --release-id amt-4 --ledger budget.jsonl --budget 8 --output released.parquet
  classification (rr, rr-top-k, rr-with-prior):
    skdp-label privatize users.csv --label segment --id user_id --mechanism rr-top-k \\
      --epsilon 1 --classes gold silver bronze none --param k=2 --key-file label.key \\
      --release-id seg-1 --ledger budget.jsonl --budget 8 --output released.csv

The manifest is written to OUTPUT.manifest.json (see docs/labels_party.md and docs/cli.md).
"""

# Parameters with options of their own; --param cannot set them.
_DEDICATED = {
    "epsilon": "--epsilon",
    "bounds": "--bounds",
    "classes": "--classes",
    "resolution": "--grid-step",
    "accountant": "--ledger",
    "random_state": "--key-file (keyed noise)",
}
DEFAULT_BATCH_SIZE = 1 << 20


class CLIError(ValueError):
    """An input error of the labels party's command (nothing was charged)."""


# -- mechanism -----------------------------------------------------------------------
def _parse_value(text):
    """A ``--param`` value: JSON if it parses (numbers, true, lists), else the string."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _parse_classes(values):
    for convert in (int, float):
        try:
            return [convert(v) for v in values]
        except ValueError:
            continue
    return list(values)


def build_mechanism(name, *, epsilon, bounds=None, grid_step=None, classes=None, params=()):
    """The unfitted mechanism a ``privatize`` command describes.

    Unlike :func:`~skdp_label.mechanisms.make_mechanism`, an option the
    mechanism does not take is an error, not silently dropped.
    """
    import inspect

    from .mechanisms._registry import _REGISTRY, get_mechanism_class

    cls = get_mechanism_class(name)
    task = _REGISTRY[name][1]
    accepted = set(inspect.signature(cls.__init__).parameters) - {"self"}
    kwargs = {"epsilon": epsilon}
    given = {"bounds": bounds, "resolution": grid_step, "classes": classes}
    for param, value in given.items():
        if value is None:
            continue
        if param not in accepted:
            raise CLIError(f"mechanism {name!r} takes no {_DEDICATED[param]}.")
        kwargs[param] = tuple(value) if param == "bounds" else value
    for item in params:
        if "=" not in item:
            raise CLIError(f"--param expects KEY=VALUE, got {item!r}.")
        k, v = item.split("=", 1)
        k = k.strip().replace("-", "_")
        if k in _DEDICATED:
            raise CLIError(f"set {k} with {_DEDICATED[k]}, not --param.")
        if k not in accepted:
            raise CLIError(
                f"mechanism {name!r} has no parameter {k!r}; it takes "
                f"{sorted(accepted - set(_DEDICATED))}."
            )
        kwargs[k] = _parse_value(v)
    if task == "classification" and "classes" not in kwargs:
        raise CLIError(f"mechanism {name!r} needs --classes (the public label classes).")
    try:
        return cls(**kwargs), task
    except TypeError as exc:
        raise CLIError(f"bad parameters for {name!r}: {exc}") from None


# -- tables --------------------------------------------------------------------------
def _format_of(path, given=None):
    if given:
        return given
    lower = os.fspath(path).lower()
    if lower.endswith((".parquet", ".pq")):
        return "parquet"
    if lower.endswith((".csv", ".csv.gz", ".tsv")):
        return "csv"
    raise CLIError(f"cannot tell the format of {path}; pass --input-format/--output-format.")


class _Table:
    """A CSV or Parquet file read in record batches of some columns."""

    def __init__(self, path, fmt, batch_size):
        self.path = os.fspath(path)
        if not os.path.isfile(self.path):
            raise CLIError(f"input file {self.path} does not exist.")
        self.format = fmt
        self.batch_size = batch_size
        try:
            if fmt == "parquet":
                import pyarrow.parquet as pq

                # pre_buffer=False: otherwise pyarrow keeps every row group read so far
                # (RSS grows with the file); measured flat at ~150 MB without it.
                self._file = pq.ParquetFile(self.path, pre_buffer=False)
                self.schema = self._file.schema_arrow
                self.num_rows = self._file.metadata.num_rows
            else:
                self.schema = self._open_csv(None, {}).schema
                self.num_rows = None
        except _arrow_errors() as exc:
            raise CLIError(f"cannot read {self.path} as {fmt}: {type(exc).__name__}.") from None

    def _open_csv(self, columns, types):
        import pyarrow.csv as pacsv

        # block_size bounds the rows per batch (about 32 bytes per row are assumed).
        read = pacsv.ReadOptions(block_size=max(1 << 16, min(self.batch_size * 32, 1 << 30)))
        convert = pacsv.ConvertOptions(include_columns=columns, column_types=types)
        delimiter = "\t" if self.path.lower().endswith(".tsv") else ","
        return pacsv.open_csv(self.path, read_options=read, convert_options=convert,
                              parse_options=pacsv.ParseOptions(delimiter=delimiter))

    def batches(self, columns, types):
        """Record batches of ``columns``; arrow errors lose their text (it may quote labels)."""
        try:
            if self.format == "parquet":
                it = self._file.iter_batches(batch_size=self.batch_size, columns=columns)
            else:
                it = self._open_csv(columns, types)
            for batch in it:
                yield batch.select(columns) if self.format == "csv" else batch
        except _arrow_errors() as exc:
            # The arrow message can quote a row, labels included: only its type is kept.
            raise CLIError(
                f"cannot parse {self.path} ({type(exc).__name__}); check that the label "
                "column is numeric (or one of --classes) and that every row is well formed."
            ) from None


def _arrow_errors():
    import pyarrow as pa

    return (pa.ArrowException,)


def _label_type(task, classes):
    import pyarrow as pa

    if task == "regression":
        return pa.float64()
    if all(isinstance(c, int) for c in classes):
        return pa.int64()
    if all(isinstance(c, (int, float)) for c in classes):
        return pa.float64()
    return pa.string()


def _labels(batch, name, task, classes, offset):
    """A batch's labels as numpy, or a CLIError that quotes no label."""
    import pyarrow as pa

    col = batch.column(name)
    if col.null_count:
        raise CLIError(
            f"label column {name!r} has {col.null_count} missing values (rows {offset} to "
            f"{offset + len(col) - 1})."
        )
    numeric = pa.types.is_integer(col.type) or pa.types.is_floating(col.type)
    wanted = _label_type(task, classes)
    if pa.types.is_string(wanted):
        if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
            col = col.cast(pa.string())
        return col.to_numpy(zero_copy_only=False).astype(object)
    if not numeric:
        raise CLIError(f"label column {name!r} is not numeric (arrow type {col.type}).")
    values = col.to_numpy(zero_copy_only=False)
    if task == "regression":
        return values.astype(np.float64, copy=False)
    return values


def _ids(batch, name, offset):
    col = batch.column(name)
    if col.null_count:
        raise CLIError(
            f"id column {name!r} has {col.null_count} missing values (rows {offset} to "
            f"{offset + len(col) - 1}); every row needs an id."
        )
    return col.to_numpy(zero_copy_only=False)


class _Increasing:
    """Whether integer ids are strictly increasing over the whole stream (sorted
    unique ids, the common case, need no duplicate check)."""

    def __init__(self):
        self._last = None
        self.holds = True

    def add(self, ids):
        if not self.holds or not ids.size:
            return
        if ids.dtype.kind not in "iu":
            self.holds = False
            return
        self.holds = bool(np.all(ids[1:] > ids[:-1])) and (self._last is None or ids[0] > self._last)
        self._last = ids[-1]


def _count_duplicate_keys(key_batches, directory):
    """Exact number of repeated 128-bit row keys (rows that would share noise).

    The keys are spilled to 256 bucket files by their top bits, so memory
    stays bounded (each bucket holds about 1/256 of the keys).
    """
    dtype = [("lo", "<u8"), ("hi", "<u8")]
    files = {}
    try:
        for lo, hi in key_batches:
            keys = np.empty(lo.size, dtype=dtype)
            keys["lo"], keys["hi"] = lo, hi
            bucket = (lo >> np.uint64(56)).astype(np.uint8)
            keys = keys[np.argsort(bucket, kind="stable")]  # a radix sort for uint8
            bounds = np.concatenate([[0], np.cumsum(np.bincount(bucket, minlength=256))])
            for b in np.flatnonzero(np.diff(bounds)):
                if b not in files:
                    # Kept open across batches; closed below.
                    files[b] = open(os.path.join(directory, f"{b:03d}"), "wb")  # noqa: SIM115
                keys[bounds[b]:bounds[b + 1]].tofile(files[b])
    finally:
        for f in files.values():
            f.close()
    duplicates = 0
    for b in files:
        keys = np.fromfile(os.path.join(directory, f"{b:03d}"), dtype=dtype)
        keys.sort(order=("lo", "hi"))
        duplicates += int(np.count_nonzero(keys[1:] == keys[:-1]))
    return duplicates


def _ordered_map(func, items, threads):
    """``map`` over ``items`` on ``threads`` threads, in order, with at most
    ``threads + 1`` items in flight (memory stays bounded)."""
    if threads <= 1:
        yield from map(func, items)
        return
    with ThreadPoolExecutor(threads) as pool:
        window = deque()
        for item in items:
            window.append(pool.submit(func, item))
            if len(window) > threads:
                yield window.popleft().result()
        while window:
            yield window.popleft().result()


def _progress(total, desc, enabled):
    from .utils._progress import progress_bar

    return progress_bar(total=total, desc=desc, enabled=enabled, unit="rows", unit_scale=True)


def _sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def _json_default(value):
    # KeyedRelease.manifest() leaves arrays inside dict-valued params (a prior).
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{type(value).__name__} in a manifest")


def _open_accountant(ledger, budget):
    from ._accountant import BudgetAccountant, _decode_number

    if budget is None:
        if not os.path.exists(ledger):
            raise CLIError(f"ledger {ledger} does not exist: pass --budget EPSILON [DELTA] to create it.")
        # An existing ledger records its budget in its header line.
        try:
            with open(ledger, "rb") as f:
                header = json.loads(f.readline())
            budget = (_decode_number(header["epsilon"]), _decode_number(header["delta"]))
        except (OSError, ValueError, KeyError, TypeError):
            raise CLIError(f"{ledger} is not a skdp_label ledger.") from None
    return BudgetAccountant(budget[0], budget[1] if len(budget) > 1 else 0.0, ledger=ledger)


# -- privatize ------------------------------------------------------------------------
def privatize_file(
    input, output, *, label, mechanism, key_file, release_id, id=None, columns=(),
    ledger=None, budget=None, no_ledger=False, input_format=None, output_format=None,
    manifest=None, batch_size=DEFAULT_BATCH_SIZE, threads=None, progress=None, overwrite=False,
    clip=False, log=None,
):
    """Release ``label`` of ``input`` to ``output`` (see the module docstring).

    Returns the manifest (a dict). Raises :class:`CLIError` (a
    ``ValueError``) for bad input, before anything is charged.
    """
    try:
        import pyarrow as pa
    except ImportError:
        raise CLIError("skdp-label privatize needs pyarrow: pip install 'skdp_label[cli]'.") from None

    from .mechanisms._validation import check_labels_in_bounds
    from .release import KeyedRelease, id_row_keys, load_key

    log = log or (lambda msg: print(msg, file=sys.stderr))
    threads = threads or 1
    if progress is None:
        progress = sys.stderr.isatty()
    if not release_id or not release_id.strip():
        raise CLIError("--release-id must be a non-empty string naming this release.")
    if batch_size < 1:
        raise CLIError("--batch-size must be positive.")
    output = os.fspath(output)
    manifest_path = manifest or output + ".manifest.json"
    if os.path.abspath(output) == os.path.abspath(os.fspath(input)):
        raise CLIError("--output must differ from the input file.")
    for path in (output, manifest_path):
        if os.path.exists(path) and not overwrite:
            raise CLIError(f"{path} exists; pass --overwrite to replace it.")
    out_dir = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(out_dir):
        raise CLIError(f"output directory {out_dir} does not exist.")
    in_fmt, out_fmt = _format_of(input, input_format), _format_of(output, output_format)

    key = load_key(key_file)  # ValueError: missing, short or readable by others
    if ledger is None and not no_ledger:
        raise CLIError("pass --ledger PATH (the persistent budget ledger), or --no-ledger.")
    accountant = None if ledger is None else _open_accountant(ledger, budget)

    mech, task = mechanism
    classes = getattr(mech, "classes", None)
    table = _Table(input, in_fmt, batch_size)
    names = table.schema.names
    columns = [c for c in columns if c not in (label, id)]
    for col, what in [(label, "label"), (id, "id")] + [(c, "--columns") for c in columns]:
        if col is not None and col not in names:
            raise CLIError(f"{what} column {col!r} is not in {input} (columns: {names}).")
    release = KeyedRelease(mech, key, release_id, accountant=accountant)
    bounds = getattr(mech, "bounds", None) if task == "regression" else None

    def labels_of(batch, offset):
        y = _labels(batch, label, task, classes, offset)
        if bounds is not None:
            # The CLI refuses labels outside --bounds for every family (some
            # mechanisms would clip them silently); --clip clips on purpose.
            if clip:
                return np.clip(y, *bounds)
            try:
                check_labels_in_bounds(y, bounds)
            except ValueError as exc:
                raise CLIError(f"rows {offset} to {offset + len(y) - 1}: {exc} (or pass --clip)") from None
        return y

    keyed_cols = [label] + ([id] if id else [])
    types = {label: _label_type(task, classes)}

    def row_keys(batch, offset):
        if id is None:
            return np.arange(offset, offset + batch.num_rows, dtype=np.int64)
        return id_row_keys(key, _ids(batch, id, offset))

    # Pass 1: validate every label and id (and count, for a private prior) before any charge.
    n = 0
    bar = _progress(table.num_rows, "pass 1: check" + (" and count" if release.needs_counts else ""),
                    progress)
    increasing = _Increasing()
    for batch in table.batches(keyed_cols, types):
        y = labels_of(batch, n)
        if id is not None:
            increasing.add(_ids(batch, id, n))
        try:
            if release.needs_counts:
                release.add_counts(y, row_keys(batch, n))
            else:
                release.check_batch(y)
        except ValueError as exc:
            raise CLIError(f"rows {n} to {n + len(y) - 1}: {exc}") from None
        n += len(y)
        if bar is not None:
            bar.update(len(y))
    if bar is not None:
        bar.close()
    if id is not None and not increasing.holds:
        # Unsorted ids: one more read of the id column, to check that they are unique.
        with tempfile.TemporaryDirectory(prefix=".skdp_ids_", dir=out_dir) as spill:
            key_batches = (row_keys(b, 0) for b in table.batches([id], {}))
            duplicates = _count_duplicate_keys(key_batches, spill)
        if duplicates:
            raise CLIError(
                f"id column {id!r} has {duplicates} duplicate ids: rows sharing an id would "
                "share their noise. Ids must be unique (or omit --id to key rows by position)."
            )
    if n == 0:
        raise CLIError(f"{input} has no rows.")

    # The charge (once per release id) and the fit, before any noisy label exists.
    release.fit(n)
    if accountant is not None:
        log(f"release {release_id!r}: " + (
            f"charged epsilon={release.epsilon_:g} to {ledger}" if release.charged_
            else f"already in {ledger}, rerun charged nothing (its law digest "
            f"{release.law_digest_[:12]}... is the ledger's)"))

    # Pass 2: randomize and write to a temporary file, renamed into place at the end.
    read_cols = keyed_cols + columns
    out_cols = ([id] if id else []) + [label] + columns
    tmp_out = tmp_manifest = None
    try:
        fd, tmp_out = tempfile.mkstemp(prefix="." + os.path.basename(output) + ".", suffix=".part",
                                       dir=out_dir)
        os.close(fd)
        with ExitStack() as stack:
            writer = None
            bar = _progress(n, "pass 2: randomize", progress)

            def work(item):
                batch, offset = item
                y = labels_of(batch, offset)
                noisy = release.randomize(y, row_keys(batch, offset))
                arrays = [batch.column(c) if c != label else pa.array(noisy) for c in out_cols]
                return pa.RecordBatch.from_arrays(arrays, names=out_cols)

            def numbered():
                offset = 0
                for batch in table.batches(read_cols, types):
                    yield batch, offset
                    offset += batch.num_rows

            written = 0
            for out in _ordered_map(work, numbered(), threads):
                if writer is None:
                    writer = stack.enter_context(_writer(tmp_out, out_fmt, out.schema))
                writer.write_batch(out)
                written += out.num_rows
                if bar is not None:
                    bar.update(out.num_rows)
            if bar is not None:
                bar.close()
        if written != n:
            raise CLIError(f"{input} changed during the release ({n} rows, then {written}).")
        doc = release.manifest()
        doc["label_column"] = label
        doc["row_keys"] = {"id_column": id} if id else "positions"
        doc["output"] = {
            "file": os.path.basename(output),
            "format": out_fmt,
            "columns": out_cols,
            "sha256": _sha256(tmp_out),
        }
        fd, tmp_manifest = tempfile.mkstemp(prefix="." + os.path.basename(manifest_path) + ".",
                                            suffix=".part", dir=os.path.dirname(os.path.abspath(manifest_path)))
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f, indent=2, sort_keys=True, default=_json_default)
            f.write("\n")
        os.chmod(tmp_out, 0o644)
        os.chmod(tmp_manifest, 0o644)
        os.replace(tmp_out, output)
        tmp_out = None
        os.replace(tmp_manifest, manifest_path)
        tmp_manifest = None
    finally:
        for path in (tmp_out, tmp_manifest):
            if path is not None and os.path.exists(path):
                os.unlink(path)
    log(f"wrote {n} noisy labels to {output} and the manifest to {manifest_path}")
    return doc


class _writer:
    """A Parquet or CSV batch writer as a context manager."""

    def __init__(self, path, fmt, schema):
        if fmt == "parquet":
            import pyarrow.parquet as pq

            self._w = pq.ParquetWriter(path, schema)
        else:
            import pyarrow.csv as pacsv

            self._w = pacsv.CSVWriter(path, schema)

    def __enter__(self):
        return self._w

    def __exit__(self, *exc):
        self._w.close()


# -- argument parsing ---------------------------------------------------------------------
def add_subcommands(sub):
    """Add ``keygen`` and ``privatize`` to an argparse subparsers object."""
    from .mechanisms import mechanism_names

    keygen = sub.add_parser(
        "keygen", help="create a release key file (32 bytes of OS entropy, mode 0600)",
        description="Create a key file for keyed releases. It never leaves the labels party; "
                    "an existing file is never overwritten.",
    )
    keygen.add_argument("path", help="where to write the key")

    p = sub.add_parser(
        "privatize", help="release one label column of a CSV/Parquet file with keyed label-DP noise",
        description=__doc__, epilog=FAMILY_EXAMPLES + "\nmechanisms:\n" + textwrap.fill(
            ", ".join(mechanism_names()), 90, initial_indent="  ", subsequent_indent="  ",
            break_on_hyphens=False) + "\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("input", help="CSV (.csv, .tsv) or Parquet (.parquet) file")
    p.add_argument("--label", required=True, help="the label column to privatize")
    p.add_argument("--id", help="id column keying each row's noise (unique ids; default: row positions)")
    p.add_argument("--mechanism", required=True, choices=mechanism_names(aliases=True), metavar="NAME",
                   help="mechanism name (list below)")
    p.add_argument("--epsilon", required=True, type=float, help="total epsilon of the release")
    p.add_argument("--bounds", nargs=2, type=float, metavar=("LOW", "HIGH"), help="public label bounds")
    p.add_argument("--clip", action="store_true",
                   help="clip labels to --bounds (default: labels outside the bounds are an error)")
    p.add_argument("--grid-step", "--resolution", dest="grid_step", type=float,
                   help="grid step of the label domain (mechanisms with `resolution`); "
                        "default: sized from epsilon and the row count (docs/grid.md)")
    p.add_argument("--classes", nargs="+", help="public classes (classification mechanisms)")
    p.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                   help="another mechanism parameter (JSON value, or a string); repeatable")
    p.add_argument("--key-file", required=True, help="key file from `skdp-label keygen`")
    p.add_argument("--release-id", required=True,
                   help="names this release: rerunning with the same id is free and reproduces "
                        "it; a new release (another column, new data) needs a new id")
    p.add_argument("--ledger", help="persistent privacy ledger (JSON lines), charged once per release id")
    p.add_argument("--budget", nargs="+", type=float, metavar="EPSILON [DELTA]",
                   help="budget of a new ledger (an existing one keeps its recorded budget)")
    p.add_argument("--no-ledger", action="store_true", help="release without recording it (not advised)")
    p.add_argument("--output", "-o", required=True, help="output .csv or .parquet (id + noisy label)")
    p.add_argument("--columns", nargs="+", default=[], help="other columns to copy to the output")
    p.add_argument("--manifest", help="manifest path (default OUTPUT.manifest.json)")
    p.add_argument("--input-format", choices=["csv", "parquet"])
    p.add_argument("--output-format", choices=["csv", "parquet"])
    p.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, help="rows per batch")
    p.add_argument("--threads", type=int, help="randomizing threads (default 1: the sampling kernels hold the GIL, so more threads only overlap I/O)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output and manifest")
    bar = p.add_mutually_exclusive_group()
    bar.add_argument("--progress", dest="progress", action="store_true", default=None,
                     help="show a progress bar (default: only on a terminal)")
    bar.add_argument("--no-progress", dest="progress", action="store_false")


def run(args):
    """Run a parsed ``keygen`` or ``privatize`` command; returns the exit code."""
    from .release import generate_key_file

    try:
        if args.command == "keygen":
            generate_key_file(args.path)
            print(f"wrote a new key to {args.path} (mode 0600); keep it with the labels party.",
                  file=sys.stderr)
            return 0
        if args.budget is not None and not 1 <= len(args.budget) <= 2:
            raise CLIError("--budget takes EPSILON and optionally DELTA.")
        mechanism = build_mechanism(
            args.mechanism, epsilon=args.epsilon, bounds=args.bounds, grid_step=args.grid_step,
            classes=None if args.classes is None else _parse_classes(args.classes),
            params=args.param,
        )
        privatize_file(
            args.input, args.output, label=args.label, id=args.id, mechanism=mechanism,
            key_file=args.key_file, release_id=args.release_id, columns=args.columns,
            ledger=args.ledger, budget=args.budget, no_ledger=args.no_ledger,
            input_format=args.input_format, output_format=args.output_format,
            manifest=args.manifest, batch_size=args.batch_size, threads=args.threads,
            progress=args.progress, overwrite=args.overwrite, clip=args.clip,
        )
        return 0
    except (ValueError, FileExistsError, RuntimeError) as exc:
        # ValueError: bad input; BudgetExceededError (a RuntimeError): refused by the ledger.
        print(f"skdp-label {args.command}: error: {exc}", file=sys.stderr)
        return 2
