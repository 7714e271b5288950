#!/usr/bin/env python3
"""Time real training and inference steps of the shared models on one GPU.

Builds each architecture of ../shared/models/gen_models.py in PyTorch with
random weights (nothing is downloaded), and for every case (model, mode,
precision, batch) runs warm-up steps, then timed steps, each synchronised,
and records the median wall-clock step, the peak memory PyTorch allocated
during the steady-state steps, and, for the cases marked for it, one
profiled step's Chrome trace (Kineto's format, the input of
`opplace profile --import`).  It also measures the two ceilings of the
card (large GEMMs per precision; a device-to-device copy) and reads its
clocks and power before and after.

    python3 scripts/gpu_runs.py --models ../shared/models/gen_models.py --out runs

writes

    runs/results.json   one record per case, plus the card, software and ceilings
    runs/traces-N.tar   the profiled steps' traces, gzipped, in tars of at most
                        --bundle-mib each

The step is what a user runs in eager PyTorch: zero_grad(set_to_none),
forward and loss (under torch.autocast(bfloat16) for amp-bf16), backward,
Adam step (torch.optim.Adam's default foreach implementation); inference is
the forward under torch.no_grad.  The loss is a real one (cross-entropy
over the classes or the vocabulary; mean squared error for
nn.Transformer), which opplace's training graph does not have: its kernels
are in the measured step and not in the prediction.  fp32 runs with TF32
off for matmuls and cuDNN; tf32 with it on; amp-bf16 with TF32 off for the
ops autocast leaves in float32.

A case that runs out of memory is recorded as such ("oom": true): that is
a measurement too, of where one device stops holding the model.

Not run by opplace's tests.  docs/measured-h100.md says what was run,
on what, and how the predictions compare.
"""
import argparse
import gzip
import importlib.util
import io
import json
import os
import platform
import statistics
import subprocess
import sys
import tarfile
import time

import torch
import torch.nn.functional as F

# (model, mode, precision, batch, trace?).  Batch None: the model file's own.
# The fitting set of docs/measured-h100.md is resnet50 and gpt2_small,
# training, fp32 and amp-bf16 (traced first, so they survive a short run);
# every other model is held out.  Fixed before any run.
FIT_MODELS = ("resnet50", "gpt2_small")
OWN_BATCH = {"resnet50": 32, "inception_v3": 32, "vgg16": 32, "mobilenet_v2": 64,
             "bert_base": 16, "gpt2_small": 8, "gpt2_xl": 4}
# nn.Transformer's inputs are (seq 64, batch 32, 512); gnmt's (batch 64, 40 steps).
FIXED_BATCH = {"transformer": 32, "gnmt": 64}


def default_cases():
    cases = []
    for m in FIT_MODELS:
        for p in ("fp32", "amp-bf16"):
            cases.append(dict(model=m, mode="train", precision=p, batch=None, trace=True))
    order = ["resnet50", "gpt2_small", "bert_base", "inception_v3", "vgg16", "mobilenet_v2",
             "transformer", "gnmt"]
    for m in order:
        for mode in ("train", "infer"):
            for p in ("fp32", "amp-bf16"):
                if m in FIT_MODELS and mode == "train":
                    continue
                cases.append(dict(model=m, mode=mode, precision=p, batch=None, trace=True))
    # TF32, held out everywhere: the precision the A100 case of
    # docs/model.md misses by 36%.
    for m in ("resnet50", "bert_base"):
        cases.append(dict(model=m, mode="train", precision="tf32", batch=None, trace=True))
    # The large model last: its own batch does not fit one GPU for
    # training (facts.json), so batch 4 is tried (an OOM is recorded) and
    # batch 1 timed.
    for p in ("fp32", "amp-bf16"):
        cases.append(dict(model="gpt2_xl", mode="infer", precision=p, batch=None, trace=True))
        cases.append(dict(model="gpt2_xl", mode="train", precision=p, batch=4, trace=False))
        cases.append(dict(model="gpt2_xl", mode="train", precision=p, batch=1, trace=True))
    return cases


def load_gen_models(path):
    spec = importlib.util.spec_from_file_location("gen_models", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.MODELS


def inputs_and_loss(name, model, example, batch, dev):
    """Inputs at the case's batch and a loss over the model's output:
    cross-entropy against random labels (classes or vocabulary), mean
    squared error against a random target for nn.Transformer."""
    xs = []
    for x in example:
        shape = list(x.shape)
        if x.dtype == torch.long:
            if shape[0] == 1:  # language models were exported at batch 1
                shape[0] = batch
            emb = model.tok if hasattr(model, "tok") else model.emb
            xs.append(torch.randint(0, emb.num_embeddings, shape, device=dev))
        else:
            if name != "transformer":  # nn.Transformer's inputs are (seq, batch, d): kept
                shape[0] = batch
            xs.append(torch.randn(shape, device=dev))
    if name == "transformer":
        y = torch.randn(list(example[0].shape), device=dev)
        return xs, lambda out: F.mse_loss(out.float(), y)
    if hasattr(model, "head"):  # LM: (batch, seq, vocab)
        y = torch.randint(0, model.head.out_features, list(xs[0].shape), device=dev)
    elif hasattr(model, "out"):  # gnmt: (batch, steps, vocab)
        y = torch.randint(0, model.out.out_features, list(xs[0].shape), device=dev)
    else:  # torchvision classifiers: (batch, 1000)
        y = torch.randint(0, 1000, [xs[0].shape[0]], device=dev)
    return xs, lambda out: F.cross_entropy(out.reshape(-1, out.shape[-1]).float(), y.reshape(-1))


def on(dev):
    """Factory functions default to dev inside (torch >= 2.0 on a GPU)."""
    import contextlib
    return dev if dev.type == "cuda" else contextlib.nullcontext()


def set_precision(p):
    tf32 = p == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def time_steps(step, dev, warmup, iters, budget_s):
    for _ in range(warmup):
        step()
    sync(dev)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times = []
    end = time.perf_counter() + budget_s
    for _ in range(iters):
        t0 = time.perf_counter()
        step()
        sync(dev)
        times.append(time.perf_counter() - t0)
        if time.perf_counter() > end and len(times) >= 3:
            break
    times.sort()
    q = lambda f: times[min(len(times) - 1, int(f * len(times)))]
    return dict(step_ms=1e3 * statistics.median(times), p10_ms=1e3 * q(0.1), p90_ms=1e3 * q(0.9),
                runs=len(times), warmup=warmup)


def kernel_stats(trace_path):
    """GPU kernel time of the profiled step: the sum of kernel durations,
    their union (time the GPU was busy) and the step's span."""
    with open(trace_path) as f:
        ev = json.load(f)
    if isinstance(ev, dict):  # Kineto writes an object; the legacy CPU profiler a list
        ev = ev.get("traceEvents", [])
    spans = sorted((e["ts"], e["ts"] + e.get("dur", 0)) for e in ev
                   if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "ts" in e)
    busy, cur_s, cur_e = 0.0, None, None
    for s, e in spans:
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                busy += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        busy += cur_e - cur_s
    step = [e for e in ev if str(e.get("name", "")).startswith("ProfilerStep#")]
    out = dict(kernels=len(spans), kernel_sum_ms=sum(e - s for s, e in spans) / 1e3, gpu_busy_ms=busy / 1e3,
               profiled_step_ms=max((e.get("dur", 0) for e in step), default=0) / 1e3)
    if step:
        # The host's side: the framework ops the step dispatched (top-level
        # aten ops, not nested in another on their thread) and their CPU
        # time, and the kernel launches; what a host-dispatch model counts.
        t0, t1 = step[0]["ts"], step[0]["ts"] + step[0]["dur"]
        cpu = sorted((e for e in ev if e.get("cat") == "cpu_op" and t0 <= e.get("ts", 0) <= t1),
                     key=lambda e: (e["tid"], e["ts"], -e.get("dur", 0)))
        top, end = [], {}
        for e in cpu:
            if e["ts"] >= end.get(e["tid"], -1):
                top.append(e)
                end[e["tid"]] = e["ts"] + e.get("dur", 0)
        out.update(cpu_ops=len(cpu), top_level_cpu_ops=len(top),
                   top_level_cpu_ms=sum(e.get("dur", 0) for e in top) / 1e3,
                   kernel_launches=sum(1 for e in ev if e.get("cat") == "cuda_runtime" and "Launch" in e.get("name", "")
                                       and t0 <= e.get("ts", 0) <= t1))
    return out


def profile_step(step, dev, path):
    from torch.profiler import ProfilerActivity, profile, schedule
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    with profile(activities=acts, record_shapes=True, schedule=schedule(wait=0, warmup=1, active=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(path)) as prof:
        for _ in range(2):
            step()
            sync(dev)
            prof.step()


def ceilings(dev):
    """The card's two ceilings, measured: GEMM rate per precision (8192^3,
    random data, median of 10 after 3 warm-ups) and device-to-device copy
    bandwidth (bytes read plus written)."""
    out = {}
    n = 8192
    for name, dt, tf32 in (("fp32", torch.float32, False), ("tf32", torch.float32, True), ("bf16", torch.bfloat16, False)):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        a = torch.randn(n, n, device=dev, dtype=dt)
        b = torch.randn(n, n, device=dev, dtype=dt)
        for _ in range(3):
            a @ b
        torch.cuda.synchronize()
        ts = []
        for _ in range(10):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            a @ b
            e.record()
            e.synchronize()
            ts.append(s.elapsed_time(e) / 1e3)
        out[f"gemm_{name}_tflops"] = 2 * n ** 3 / statistics.median(ts) / 1e12
        del a, b
    torch.backends.cuda.matmul.allow_tf32 = False
    x = torch.empty(1 << 30, dtype=torch.uint8, device=dev).random_()
    y = torch.empty_like(x)
    for _ in range(3):
        y.copy_(x)
    torch.cuda.synchronize()
    ts = []
    for _ in range(10):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        y.copy_(x)
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e) / 1e3)
    out["copy_gbs"] = 2 * x.numel() / statistics.median(ts) / 1e9
    del x, y
    torch.cuda.empty_cache()
    return out


def smi():
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,"
                               "power.draw,power.limit,temperature.gpu,memory.total", "--format=csv"],
                              capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception as e:  # noqa: BLE001 - a missing nvidia-smi is recorded, not fatal
        return f"nvidia-smi: {e}"


class Bundler:
    """Gzipped traces packed into tars of at most limit bytes each."""

    def __init__(self, out, limit, max_files):
        self.out, self.limit, self.max_files = out, limit, max_files
        self.n, self.size, self.tar = 0, 0, None
        self.dropped = []

    def add(self, name, path):
        with open(path, "rb") as f:
            data = gzip.compress(f.read(), 6)
        os.remove(path)
        if len(data) + 1024 > self.limit:
            self.dropped.append(name)
            return None
        if self.tar is None or self.size + len(data) + 1024 > self.limit:
            if self.tar is not None:
                self.tar.close()
            if self.n >= self.max_files:
                self.tar = None
                self.dropped.append(name)
                return None
            self.n += 1
            self.tar = tarfile.open(os.path.join(self.out, f"traces-{self.n}.tar"), "w")
            self.size = 0
        info = tarfile.TarInfo(name + ".json.gz")
        info.size = len(data)
        self.tar.addfile(info, io.BytesIO(data))
        self.tar.fileobj.flush()
        self.size += len(data) + 1024
        return f"traces-{self.n}.tar:{name}.json.gz"

    def close(self):
        if self.tar is not None:
            self.tar.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", required=True, help="path of ../shared/models/gen_models.py")
    ap.add_argument("--out", default="gpu_runs")
    ap.add_argument("--only", default="", help="comma-separated model names (default: all)")
    ap.add_argument("--device", default="cuda", help="cuda, or cpu for a dry run")
    ap.add_argument("--batch-scale", type=float, default=1.0, help="scale every batch (a dry run on cpu uses a small one)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--case-budget", type=float, default=8.0, help="seconds of timed steps per case (at least 3 steps)")
    ap.add_argument("--deadline", type=float, default=520.0, help="seconds after which no new case starts")
    ap.add_argument("--bundle-mib", type=float, default=15.5)
    ap.add_argument("--max-bundles", type=int, default=6)
    args = ap.parse_args()
    start = time.perf_counter()
    os.makedirs(args.out, exist_ok=True)
    dev = torch.device(args.device)
    torch.manual_seed(0)
    MODELS = load_gen_models(args.models)
    only = set(filter(None, args.only.split(",")))
    cases = [c for c in default_cases() if not only or c["model"] in only]

    res = dict(torch=torch.__version__, python=platform.python_version(), device=str(dev), cases=[])
    if dev.type == "cuda":
        torch.backends.cudnn.benchmark = True
        p = torch.cuda.get_device_properties(0)
        res.update(gpu=p.name, sms=p.multi_processor_count, memory_bytes=p.total_memory,
                   cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version(), smi_before=smi())
        res["ceilings"] = ceilings(dev)
        print(json.dumps(res["ceilings"]), flush=True)

    def save():
        res["elapsed_s"] = time.perf_counter() - start
        with open(os.path.join(args.out, "results.json"), "w") as f:
            json.dump(res, f, indent=1)

    bund = Bundler(args.out, int(args.bundle_mib * (1 << 20)), args.max_bundles)
    built = {}
    for c in cases:
        if time.perf_counter() - start > args.deadline:
            c["skipped"] = "deadline"
            res["cases"].append(c)
            continue
        name = c["model"]
        if name not in built:
            built.clear()
            if dev.type == "cuda":
                torch.cuda.empty_cache()
            make, example = MODELS[name]
            t0 = time.perf_counter()
            with on(dev):  # initialised on the device: GPT-2 XL's 1.6e9 weights on a CPU take long
                model = make().to(dev)
            built[name] = (model, example())
            print(f"built {name} in {time.perf_counter() - t0:.1f} s", flush=True)
        model, example = built[name]
        if name in FIXED_BATCH:  # the model file's inputs fix the batch
            batch = FIXED_BATCH[name]
        else:
            batch = max(1, int(round((c["batch"] or OWN_BATCH[name]) * args.batch_scale)))
        c["batch"] = batch
        c["set"] = "fit" if name in FIT_MODELS and c["mode"] == "train" and c["precision"] in ("fp32", "amp-bf16") else "held-out"
        set_precision(c["precision"])
        bf16 = c["precision"] == "amp-bf16"
        tag = f"{name}-{c['mode']}-{c['precision']}-b{batch}"
        c["name"] = tag
        opt = None
        try:
            xs, loss_fn = inputs_and_loss(name, model, example, batch, dev)
            if c["mode"] == "train":
                model.train()
                opt = torch.optim.Adam(model.parameters(), lr=1e-4)

                def step():
                    opt.zero_grad(set_to_none=True)
                    with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=bf16):
                        loss = loss_fn(model(*xs))
                    loss.backward()
                    opt.step()
            else:
                model.eval()

                def step():
                    with torch.no_grad(), torch.autocast(dev.type, dtype=torch.bfloat16, enabled=bf16):
                        model(*xs)
            with on(dev):  # gen_models builds its causal mask in forward with torch.full
                c.update(time_steps(step, dev, args.warmup, args.iters, args.case_budget))
            if dev.type == "cuda":
                c["peak_allocated_bytes"] = torch.cuda.max_memory_allocated()
                c["peak_reserved_bytes"] = torch.cuda.max_memory_reserved()
            if c["trace"]:
                path = os.path.join(args.out, tag + ".json")
                with on(dev):
                    profile_step(step, dev, path)
                c.update(kernel_stats(path))
                c["trace_file"] = bund.add(tag, path)
        except torch.cuda.OutOfMemoryError as e:
            c["oom"] = True
            c["error"] = str(e).split("\n")[0][:300]
        except Exception as e:  # noqa: BLE001 - one failed case must not lose the others
            c["error"] = f"{type(e).__name__}: {e}"[:500]
        finally:
            model.zero_grad(set_to_none=True)
            del opt
            if dev.type == "cuda":
                torch.cuda.empty_cache()
        res["cases"].append(c)
        print(f"{tag:40s} {c.get('step_ms', float('nan')):9.2f} ms  peak {c.get('peak_allocated_bytes', 0) / 2**30:6.2f} GiB"
              f"  busy {c.get('gpu_busy_ms', float('nan')):8.2f} ms  {'OOM' if c.get('oom') else c.get('error', '')}", flush=True)
        save()
    bund.close()
    res["traces_dropped"] = bund.dropped
    if dev.type == "cuda":
        res["smi_after"] = smi()
    save()
    print(f"done in {time.perf_counter() - start:.0f} s; traces dropped: {bund.dropped}")


if __name__ == "__main__":
    main()
