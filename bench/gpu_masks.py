"""Masks applied to logits on a device, beside xgrammar's kernels; fill, copy and apply per step; batch fill on threads.

Llama-3's vocabulary (128,256 tokens, logits padded to 128,512 like real models), masks of real guide states (a
JSON-like regex along the runtime's encoding of an instance). Three tables, in one run:

1. apply: ``product.apply_bitmask`` (each implementation available on the device, ``auto`` first, and the previous
   implementation, ``before``, for reference) beside xgrammar's ``apply_token_bitmask_inplace`` backends
   (``cuda``, ``triton``, ``torch_native`` on a GPU; ``cpu``, ``torch_native`` on a CPU), for batch 1, 8, 64, 512
   and float32/bfloat16 logits: median time (CUDA events on a GPU, ``perf_counter`` on a CPU); every result is
   checked bit-identical to canonmerge's ``auto`` (xgrammar's on the vocabulary's columns: it leaves a model's
   padded columns alone, canonmerge masks them). On a GPU, batch 1 also gets the host's time per call (back-to-back
   calls, one synchronisation), and ``--configs`` times the Triton kernel's shapes.
2. step: ``Guide.fill_bitmask`` for the batch, the host-to-device copy and the apply (float32), per step; the
   matcher's operations per token, beside ``Guide.advance``.
3. batch fill of 64 matchers (``product.fill_next_token_bitmasks``) on 1 and 2 threads: one shared guide, 8
   guides (cached masks), 8 guides and one guide with masks computed at every fill (cache of one mask per
   guide); and, as a control of what two threads can give on the machine at that moment, a loop that never
   holds the GIL.

xgrammar is optional (``pip install --no-deps xgrammar==0.2.8 apache-tvm-ffi pydantic`` in a separate venv); its
columns are left out when it is not importable. Results in ``bench/results/gpu_masks_<device>.json``.

    python bench/gpu_masks.py [--device cuda|cpu] [--quick] [--configs]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bpe import compile_tokenizer  # noqa: E402
from bpe.assets import reference_runtime, tokenizer_source  # noqa: E402
from product import Matcher, apply_bitmask, compile_regex, fill_next_token_bitmasks  # noqa: E402
from product.runtime.kernels import device as _mask_kernel  # noqa: E402

PATTERN = r'\{"name": "[^"\\\x00-\x1f]*", "age": [0-9]{1,3}, "city": "[^"\\\x00-\x1f]*"\}'
INSTANCE = '{"name": "Renée O\'Neil", "age": 102, "city": "New York City"}'
PAD = 256  # logits wider than the vocabulary, as models pad their embeddings


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _median_us(fn, device: torch.device, *, budget_s: float = 0.4, most: int = 200) -> float:
    """Median of repeated calls (after one warm-up), within a time budget: CUDA events on a GPU."""
    fn()
    _sync(device)
    times, spent = [], 0.0
    while len(times) < most and (spent < budget_s or len(times) < 5):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e6)
        spent += times[-1] * 1e-6
    return float(np.median(times))


def _before(logits: torch.Tensor, bitmask: torch.Tensor) -> torch.Tensor:
    """The previous ``apply_bitmask`` (until this change), for reference: unpack to booleans, then masked_fill."""
    rows, width = logits.shape
    if logits.device.type == "cpu":
        words = bitmask.cpu().contiguous().numpy()
        allowed = torch.from_numpy(np.unpackbits(words.view(np.uint8), axis=1, bitorder="little").view(np.bool_))
    else:
        shifts = torch.arange(32, dtype=torch.int32, device=logits.device)
        allowed = ((bitmask.unsqueeze(-1) >> shifts) & 1).bool().reshape(rows, -1)
    covered = min(width, allowed.shape[1])
    logits[:, :covered].masked_fill_(~allowed[:, :covered], float("-inf"))
    if width > covered:
        logits[:, covered:] = float("-inf")
    return logits


def _implementations(device: torch.device, vocab: int) -> dict:
    """name -> (apply(logits, bitmask), columns compared with canonmerge's result). canonmerge masks columns at or
    past ``vocab`` (a model's padded rows); xgrammar leaves them alone (its engines mask them elsewhere), so it is
    timed on its own operation and compared on the first ``vocab`` columns."""
    out = {"canonmerge auto": (lambda x, m: apply_bitmask(x, m, vocab_size=vocab), None)}
    names = ["triton"] if _mask_kernel.triton_available(device) else []
    names += ["cpu"] if device.type == "cpu" else []
    names += ["torch"]
    for name in names:
        out[f"canonmerge {name}"] = (lambda x, m, name=name: apply_bitmask(x, m, vocab_size=vocab, backend=name),
                                     None)
    out["canonmerge before"] = (_before, None)
    try:
        import xgrammar
    except ImportError as e:
        print(f"xgrammar not importable ({e}): its columns are left out")
        return out
    backends = ["cuda", "triton", "torch_native"] if device.type == "cuda" else ["cpu", "torch_native"]
    for backend in backends:
        def xgr(x, m, backend=backend):
            xgrammar.apply_token_bitmask_inplace(x, m, vocab_size=vocab, backend=backend)
            return x
        out[f"xgrammar {backend}"] = (xgr, vocab)
    return out


GRAPHED = ("canonmerge auto", "canonmerge triton", "xgrammar cuda", "xgrammar triton")  # capturable in a CUDA graph


def _graph_us(fn, copies: int = 20, replays: int = 10) -> float:
    """Device time per call with the host out of the way: ``copies`` calls captured in a CUDA graph, replayed."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(copies):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / (copies * replays)


def _host_us(fn, device: torch.device, calls: int = 500) -> float:
    """Wall time per call over back-to-back calls, one synchronisation at the end: on a GPU, where the kernel is
    short, this is the host's cost of a call (argument checks, the launch)."""
    fn()
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    _sync(device)
    return (time.perf_counter() - t0) / calls * 1e6


def apply_table(device: torch.device, masks: np.ndarray, vocab: int, batches, dtypes) -> list[dict]:
    impls = _implementations(device, vocab)
    rows = []
    print(f"\napply (median µs, {device.type}, {torch.get_num_threads()} torch threads; vocabulary {vocab:,}, "
          f"logits {vocab + PAD:,} wide; ≠: not bit-identical to canonmerge auto)")
    print(f"{'batch':>5} {'dtype':>9} " + " ".join(f"{name:>18}" for name in impls))
    for batch in batches:
        words = torch.from_numpy(masks[np.arange(batch) % len(masks)].view(np.int32)).to(device)
        for dtype in dtypes:
            base = torch.randn(batch, vocab + PAD, generator=torch.Generator().manual_seed(batch)).to(dtype).to(device)
            reference = apply_bitmask(base.clone(), words, vocab_size=vocab).cpu()
            row = {"batch": batch, "dtype": str(dtype).removeprefix("torch."), "us": {}, "identical": {}}
            for name, (fn, columns) in impls.items():
                try:
                    logits = base.clone()
                    fn(logits, words)
                    row["identical"][name] = bool(torch.equal(logits[:, :columns].cpu(), reference[:, :columns]))
                    row["us"][name] = _median_us(lambda: fn(logits, words), device,
                                                 budget_s=0.15 if batch >= 512 and device.type == "cpu" else 0.4)
                except Exception as e:  # a backend that cannot run here (e.g. torch.compile without a compiler)
                    row["us"][name], row["identical"][name] = None, None
                    print(f"  {name}: {type(e).__name__}: {str(e).splitlines()[0][:100]}")
            if device.type == "cuda":
                row["graph_us"] = {}
                for name in GRAPHED:
                    if row["us"].get(name) is not None:
                        fn, logits = impls[name][0], base.clone()
                        row["graph_us"][name] = _graph_us(lambda: fn(logits, words))
            if batch == 1 and device.type == "cuda":
                row["host_us"] = {}
                for name, (fn, _) in impls.items():
                    if row["us"][name] is not None:
                        logits = base.clone()
                        row["host_us"][name] = _host_us(lambda: fn(logits, words), device)
            rows.append(row)
            cells = ["—" if row["us"][n] is None else f"{row['us'][n]:.1f}" + ("" if row["identical"][n] else " ≠")
                     for n in impls]
            print(f"{batch:>5} {row['dtype']:>9} " + " ".join(f"{c:>18}" for c in cells))
            for field, label in (("graph_us", "graph"), ("host_us", "host")):
                if field in row:
                    cells = [f"{row[field][n]:.1f}" if n in row[field] else "—" for n in impls]
                    print(f"{label:>5} {'per call':>9} " + " ".join(f"{c:>18}" for c in cells))
            del base
    return rows


def host_table(device: torch.device, masks: np.ndarray, vocab: int) -> dict:
    """Where the host's time of one batch-1 call goes (µs a call, back-to-back calls), beside a trivial torch op."""
    logits = torch.randn(1, vocab + PAD, device=device)
    words = torch.from_numpy(masks[:1].view(np.int32)).to(device)
    apply_bitmask(logits, words, vocab_size=vocab)
    parts = {
        "apply_bitmask (auto)": lambda: apply_bitmask(logits, words, vocab_size=vocab),
        "argument checks": lambda: _mask_kernel._check(logits, words, None, vocab),
        "launch (after the checks)": lambda: _mask_kernel._apply_triton(logits, words, None, vocab),
        "a torch op (fill_ of one logit)": lambda: logits[:, :1].fill_(0.0),
    }
    out = {name: _host_us(fn, device, calls=2000) for name, fn in parts.items()}
    print("\nhost time of a batch-1 call (µs, 2,000 back-to-back calls)")
    for name, value in out.items():
        print(f"{name:>34}: {value:6.1f}")
    return out


def config_table(device: torch.device, masks: np.ndarray, vocab: int) -> list[dict]:
    """The Triton kernel's shape (16-byte groups per program, warps per program), timed at batch 1, 64, 512: device
    time per call in a CUDA graph (the host's share is the same for every shape)."""
    print("\ntriton kernel configurations (µs a call, CUDA graph replay)")
    saved = _mask_kernel._GROUPS, _mask_kernel._NUM_WARPS
    out = []
    try:
        for dtype in (torch.float32, torch.bfloat16):
            for groups in (64, 128, 256, 512):
                for warps in (4, 8):
                    _mask_kernel._GROUPS, _mask_kernel._NUM_WARPS = groups, warps
                    row = {"dtype": str(dtype).removeprefix("torch."), "groups": groups, "warps": warps}
                    for batch in (1, 64, 512):
                        words = torch.from_numpy(masks[np.arange(batch) % len(masks)].view(np.int32)).to(device)
                        logits = torch.randn(batch, vocab + PAD, device=device).to(dtype)
                        row[f"batch_{batch}"] = _graph_us(
                            lambda: apply_bitmask(logits, words, vocab_size=vocab, backend="triton"))
                    out.append(row)
                    print(f"{row['dtype']:>9} groups {groups:4d} warps {warps}: " +
                          "  ".join(f"b{b} {row[f'batch_{b}']:7.1f}" for b in (1, 64, 512)))
    finally:
        _mask_kernel._GROUPS, _mask_kernel._NUM_WARPS = saved
    return out


def step_table(device: torch.device, guide, states, vocab: int, batches) -> list[dict]:
    print(f"\nper step (mean µs over {len(states) - 1} steps; fill on the CPU, copy to {device.type}, apply float32)")
    rows = []
    for batch in batches:
        host = torch.zeros((batch, guide.num_words), dtype=torch.int32)
        if device.type == "cuda":
            host = host.pin_memory()
        logits = torch.randn(batch, vocab + PAD, device=device)
        fill, copy, apply = [], [], []
        for step, _ in enumerate(states):
            batch_states = [states[(step + i) % len(states)] for i in range(batch)]
            t0 = time.perf_counter()
            guide.fill_bitmask(batch_states, host)
            t1 = time.perf_counter()
            on_device = host.to(device, non_blocking=True)
            _sync(device)
            t2 = time.perf_counter()
            apply_bitmask(logits, on_device, vocab_size=vocab)
            _sync(device)
            t3 = time.perf_counter()
            fill.append(t1 - t0)
            copy.append(t2 - t1)
            apply.append(t3 - t2)
        row = {"batch": batch, "steps": len(states)}
        for name, values in (("fill", fill), ("copy", copy), ("apply", apply)):
            values = np.array(values[1:]) * 1e6  # the first step warms the kernels up
            row[f"{name}_us_mean"], row[f"{name}_us_p99"] = float(values.mean()), float(np.percentile(values, 99))
        rows.append(row)
        print(f"batch {batch:3d}: fill {row['fill_us_mean']:8.1f}  copy {row['copy_us_mean']:7.1f}  apply "
              f"{row['apply_us_mean']:8.1f}  (p99 {row['fill_us_p99']:.0f} / {row['copy_us_p99']:.0f} / "
              f"{row['apply_us_p99']:.0f})")
    return rows


def thread_table(canonical, ids) -> list[dict]:
    """64 matchers at states along the instance, filled by fill_next_token_bitmasks on 1 and 2 threads."""
    print(f"\nbatch fill of 64 matchers (median µs; {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f} when started)")
    one = compile_regex(PATTERN, canonical)
    eight = [compile_regex(PATTERN, canonical) for _ in range(8)]
    cold = [compile_regex(PATTERN, canonical, cache_size=1) for _ in range(8)]
    one_cold = compile_regex(PATTERN, canonical, cache_size=1)

    def matchers_over(guides):
        out = []
        for i in range(64):
            m = Matcher(guides[i % len(guides)])
            m.accept_tokens(ids[: (i * 7) % len(ids)])
            out.append(m)
        return out

    bitmask = torch.zeros((64, one.num_words), dtype=torch.int32)
    rows = []
    for name, guides in (("one guide, cached masks", [one]), ("8 guides, cached masks", eight),
                         ("8 guides, masks computed", cold), ("one guide, masks computed", [one_cold])):
        matchers = matchers_over(guides)
        times = {}
        for threads in (1, 2):
            times[threads] = _median_us(lambda: fill_next_token_bitmasks(matchers, bitmask, threads=threads),
                                        torch.device("cpu"), budget_s=1.0, most=400)
        speedup = times[1] / times[2]
        rows.append({"case": name, "us_1_thread": times[1], "us_2_threads": times[2], "speedup": speedup})
        print(f"{name:>26}: 1 thread {times[1]:8.1f}  2 threads {times[2]:8.1f}  speed-up {speedup:.2f}x")
    # control: what two threads give on this machine now, for work that never holds the GIL (the compiled mask loop
    # on 64 rows, split in halves), through the same pool
    from concurrent.futures import ThreadPoolExecutor
    pool = ThreadPoolExecutor(1)
    logits = torch.randn(64, one.vocab_size + PAD)
    masks = bitmask.clone()
    fill_next_token_bitmasks(matchers_over([one]), masks)

    def halves():
        later = pool.submit(apply_bitmask, logits[32:], masks[32:], backend="cpu")
        apply_bitmask(logits[:32], masks[:32], backend="cpu")
        later.result()

    times = {1: _median_us(lambda: apply_bitmask(logits, masks, backend="cpu"), torch.device("cpu"), budget_s=1.0),
             2: _median_us(halves, torch.device("cpu"), budget_s=1.0)}
    rows.append({"case": "control: GIL-free loop", "us_1_thread": times[1], "us_2_threads": times[2],
                 "speedup": times[1] / times[2]})
    print(f"{'control: GIL-free loop':>26}: 1 thread {times[1]:8.1f}  2 threads {times[2]:8.1f}  speed-up "
          f"{times[1] / times[2]:.2f}x  (the machine's parallelism now)")
    return rows


def matcher_table(guide, ids) -> dict:
    """Per-call cost of the matcher's operations along the instance (mean µs), beside ``Guide.advance``."""
    cpu = torch.device("cpu")
    bitmask = torch.zeros((1, guide.num_words), dtype=torch.int32)
    matcher = Matcher(guide, max_rollback=len(ids))

    def walk_advance():
        s = guide.initial_state
        for t in ids:
            s = guide.advance(s, t)

    def walk_accept():
        matcher.reset()
        for t in ids:
            matcher.accept_token(t)

    def walk_rollback():
        matcher.reset()
        matcher.accept_tokens(ids)
        for _ in ids:
            matcher.rollback(1)

    def walk_fill():
        matcher.reset()
        for t in ids:
            matcher.fill_next_token_bitmask(bitmask)
            matcher.accept_token(t)

    n = len(ids)
    out = {"advance": _median_us(walk_advance, cpu) / n, "accept_token": _median_us(walk_accept, cpu) / n}
    out["accept_tokens + rollback(1)"] = _median_us(walk_rollback, cpu) / n - out["advance"]
    out["validate_tokens (per token)"] = _median_us(lambda: Matcher(guide).validate_tokens(ids), cpu) / n
    out["fill_next_token_bitmask"] = _median_us(walk_fill, cpu) / n - out["accept_token"]
    print(f"\nmatcher operations (mean µs a token along the instance, {n} tokens, cached masks)")
    for name, value in out.items():
        print(f"{name:>30}: {value:6.2f}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--quick", action="store_true", help="batch 1 and 8 only (a smoke test)")
    parser.add_argument("--configs", action="store_true", help="also time the Triton kernel's shapes (CUDA)")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cpu":  # torch's intra-op threads make CPU timings erratic on a shared machine
        torch.set_num_threads(1)
    canonical = compile_tokenizer(tokenizer_source("llama3"))
    guide = compile_regex(PATTERN, canonical)
    ids = reference_runtime("llama3").encode(INSTANCE, add_special_tokens=False).ids
    states = [guide.initial_state]
    for t in ids:
        states.append(guide.advance(states[-1], t))
    masks = np.zeros((len(states), guide.num_words), dtype=np.uint32)
    guide.fill_bitmask(states, masks)
    vocab = canonical.vocab_size
    batches = (1, 8) if args.quick else (1, 8, 64, 512)
    result = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu", "vocab": vocab,
              "padded_width": vocab + PAD, "triton": _mask_kernel.triton is not None}
    result["apply"] = apply_table(device, masks, vocab, batches, (torch.float32, torch.bfloat16))
    if _mask_kernel.triton_available(device) and device.type == "cuda":
        result["host"] = host_table(device, masks, vocab)
    if args.configs and _mask_kernel.triton_available(device):
        result["triton_configs"] = config_table(device, masks, vocab)
    result["step"] = step_table(device, guide, states, vocab, batches[:3])
    result["matcher"] = matcher_table(guide, ids)
    result["batch_fill"] = thread_table(canonical, ids)
    result["load_average_end"] = os.getloadavg()[0]
    if not args.quick:
        out = Path(__file__).parent / "results" / f"gpu_masks_{device.type}.json"
        out.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
