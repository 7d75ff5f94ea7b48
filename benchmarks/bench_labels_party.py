"""The labels party at scale: `skdp-label privatize` and skdp_label.dask on large Parquet files.

For each size (default 10^7 rows; add 1e8 for the issue's figure, 1.6 GB of input):

* writes a Parquet file (int64 ``user_id``, float64 ``value`` in [0, 400]);
* times pyarrow merely reading and writing the same two columns in batches (the baseline);
* times ``skdp-label privatize`` (``rr-on-bins`` and ``unbiased``, epsilon 1, grid step 1,
  keyed by ``user_id``) in a fresh process, with its peak RSS;
* optionally (``--dask``) times skdp_label.dask on a LocalCluster of 1 and of 2 workers
  (read_parquet -> privatize -> to_parquet).

Every process is timed from its start, imports and numba compilation included (about
8 s of the CLI's time at every size). Peak RSS is the maximum resident set of the
process (``/usr/bin/time``-style, from ``getrusage(RUSAGE_CHILDREN)`` of a wrapper).

    PYTHONPATH=. python benchmarks/bench_labels_party.py --rows 1e7 1e8 --dask --dir /work/bench
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
ROW_GROUP = 1 << 20


def generate(path, n):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    schema = pa.schema([("user_id", pa.int64()), ("value", pa.float64())])
    with pq.ParquetWriter(path, schema) as w:
        for start in range(0, n, ROW_GROUP):
            m = min(ROW_GROUP, n - start)
            value = np.round(rng.gamma(2.0, 40.0, m).clip(0, 400), 2)
            w.write_table(pa.table({"user_id": np.arange(start, start + m, dtype=np.int64),
                                    "value": value}, schema=schema), row_group_size=ROW_GROUP)


BASELINE = """
import sys, pyarrow.parquet as pq
src, dst = sys.argv[1], sys.argv[2]
f = pq.ParquetFile(src, pre_buffer=False)  # as the CLI: memory flat in the rows
with pq.ParquetWriter(dst, f.schema_arrow) as w:
    for b in f.iter_batches(batch_size=1 << 20, columns=["user_id", "value"]):
        w.write_batch(b)
"""

MEASURE = """
import resource, subprocess, sys, time
t = time.perf_counter()
subprocess.run(sys.argv[1:], check=True)
print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)
"""


def measure(cmd, env):
    """(seconds, peak RSS in bytes) of a command in a fresh process."""
    out = subprocess.run([sys.executable, "-c", MEASURE, *cmd], env=env, check=True,
                         capture_output=True, text=True).stdout.split()
    return float(out[-2]), int(out[-1])


def bench_dask(path, out_dir, key_file, n_workers, mechanism):
    import dask.dataframe as dd
    from distributed import Client, LocalCluster

    from skdp_label.dask import privatize
    from skdp_label.mechanisms import make_mechanism

    with LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster):
        t = time.perf_counter()
        ddf = dd.read_parquet(path, split_row_groups=True)  # one partition per row group
        mech = make_mechanism(mechanism, epsilon=1.0, bounds=(0.0, 400.0), resolution=1.0)
        # check_unique_ids=False: the shuffle of the duplicate check is timed separately below.
        noisy, _ = privatize(ddf, mech, key_file=key_file, release_id=f"dask-{n_workers}",
                             label="value", id="user_id", check_unique_ids=False)
        ddf[["user_id"]].assign(value=noisy).to_parquet(out_dir, write_index=False)
        seconds = time.perf_counter() - t
        t = time.perf_counter()
        ddf["user_id"].nunique().compute()
        return seconds, time.perf_counter() - t


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", nargs="+", type=float, default=[1e7])
    parser.add_argument("--mechanisms", nargs="+", default=["rr-on-bins", "unbiased"])
    parser.add_argument("--dask", action="store_true", help="also Dask on 1 and 2 local workers")
    parser.add_argument("--dir", default=None, help="working directory (default: a temp dir)")
    args = parser.parse_args()
    workdir = args.dir or tempfile.mkdtemp(prefix="bench_labels_party_")
    os.makedirs(workdir, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    key_file = os.path.join(workdir, "bench.key")
    if not os.path.exists(key_file):
        from skdp_label.release import generate_key_file

        generate_key_file(key_file)
    results = []
    for rows in args.rows:
        n = int(rows)
        src = os.path.join(workdir, f"in_{n}.parquet")
        if not os.path.exists(src):
            generate(src, n)
        dst = os.path.join(workdir, "baseline.parquet")
        base_s, base_rss = measure([sys.executable, "-c", BASELINE, src, dst], env)
        os.unlink(dst)
        row = {"rows": n, "input_bytes": os.path.getsize(src), "pyarrow_read_write_s": base_s,
               "pyarrow_peak_rss_bytes": base_rss}
        print(f"{n:.0e} rows: pyarrow read+write {base_s:.1f} s ({n / base_s:,.0f} rows/s), "
              f"peak RSS {base_rss:,} bytes", flush=True)
        for mech in args.mechanisms:
            out = os.path.join(workdir, f"out_{mech}.parquet")
            for f in (out, out + ".manifest.json"):
                if os.path.exists(f):
                    os.unlink(f)
            cmd = [sys.executable, "-m", "skdp_label", "privatize", src, "--label", "value",
                   "--id", "user_id", "--mechanism", mech, "--epsilon", "1", "--bounds", "0", "400",
                   "--grid-step", "1", "--key-file", key_file, "--release-id", f"bench-{mech}",
                   "--no-ledger", "--no-progress", "--output", out]
            s, rss = measure(cmd, env)
            row[mech] = {"seconds": s, "rows_per_s": n / s, "ratio_to_pyarrow": s / base_s,
                         "peak_rss_bytes": rss}
            print(f"  {mech}: {s:.1f} s, {n / s:,.0f} rows/s, {s / base_s:.2f}x pyarrow, "
                  f"peak RSS {rss:,} bytes", flush=True)
            os.unlink(out)
        if args.dask:
            for mech in args.mechanisms[:1]:
                times = {}
                for workers in (1, 2):
                    out_dir = os.path.join(workdir, f"dask_out_{workers}")
                    times[workers], dup_s = bench_dask(src, out_dir, key_file, workers, mech)
                    print(f"  dask {mech}, {workers} worker(s): {times[workers]:.1f} s "
                          f"(+ duplicate-id check {dup_s:.1f} s)", flush=True)
                row[f"dask_{mech}"] = {"1_worker_s": times[1], "2_workers_s": times[2],
                                       "speedup": times[1] / times[2]}
                print(f"  dask speed-up 2 vs 1 workers: {times[1] / times[2]:.2f}x", flush=True)
        results.append(row)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
