#!/usr/bin/env python3
"""Record one training step of a model on a GPU for opplace's calibration.

Builds a torchvision model (or, with --hf, a Hugging Face one) from its
config with random weights (nothing is downloaded), runs --warmup untimed
training steps, then one training step under torch.profiler (CPU and CUDA
activities, record_shapes) and writes:

    OUT/trace.json   the profiler's Chrome trace (Kineto's format)
    OUT/model.onnx   the same model exported to ONNX at the traced shapes
                     (opset 17, no constant folding, weights stripped: the
                     method of scripts/export_heldout.py and
                     ../shared/models/gen_models.py)

Then, on any machine with opplace:

    opplace profile OUT/model.onnx --import OUT/trace.json \\
        --device-type A100-80GB --out gpu.json
    opplace plan OUT/model.onnx --cluster CLUSTER.yaml --profile gpu.json

docs/profiling-and-fusion.md ("Calibrating a GPU from a training step")
says what is fitted and what is not.  Not run by opplace's tests.  Tried
only with --device cpu on PyTorch 1.13 (no GPU and no transformers were at
hand): the CUDA and --hf paths have not been run.

Examples:

    python3 scripts/gpu_calibrate.py resnet50 --batch 32 --out r50
    python3 scripts/gpu_calibrate.py --hf gpt2 --set n_layer=6 --batch 8 --seq 512 --out gpt
    python3 scripts/gpu_calibrate.py resnet18 --device cpu --batch 2 --out dry   # no GPU: a dry run

The step is eager PyTorch: torch.compile's fused Triton kernels do not map
back to aten ops, so do not compile.  The default is float32 with TF32 off
(PyTorch's default for matmuls since 1.12; for convolutions the script
turns cuDNN's TF32 off too), which is what opplace plans without
--precision.  --bf16 wraps the forward in torch.autocast(bfloat16); import
that trace with `opplace profile ... --precision amp-bf16`.
"""
import argparse
import inspect
import os
import sys

import torch


def build(args):
    """The model, a batch of inputs and a loss function for it."""
    if args.hf:
        import transformers  # only for --hf
        cfg = transformers.AutoConfig.for_model(args.hf)  # the class defaults: no download
        for kv in args.set:
            k, v = kv.split("=", 1)
            old = getattr(cfg, k)
            setattr(cfg, k, type(old)(v) if old is not None else v)
        lm = transformers.AutoModelForCausalLM if args.hf in ("gpt2", "gpt_neo", "llama", "opt") else transformers.AutoModelForMaskedLM
        inner = lm.from_config(cfg)

        class Logits(torch.nn.Module):
            """The model's logits alone: ONNX export wants tensors out."""

            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, ids):
                return self.m(input_ids=ids, return_dict=False)[0]

        model = Logits(inner)
        vocab = cfg.vocab_size
        x = torch.randint(0, vocab, (args.batch, args.seq))
        y = torch.randint(0, vocab, (args.batch, args.seq))

        def loss(out, y):
            return torch.nn.functional.cross_entropy(out.reshape(-1, vocab), y.reshape(-1))

        return model, x, y, loss, "ids"
    import torchvision
    if not hasattr(torchvision.models, args.model):
        sys.exit(f"torchvision.models has no {args.model}")
    model = getattr(torchvision.models, args.model)(weights=None)  # torchvision >= 0.13
    x = torch.randn(args.batch, 3, args.image, args.image)
    y = torch.randint(0, 1000, (args.batch,))
    return model, x, y, torch.nn.functional.cross_entropy, "input"


def export(model, x, in_name, out):
    """Same method as gen_models.export: opset 17, no constant folding, eval
    mode, weights as external data and then deleted (opplace reads shapes)."""
    import onnx
    path = os.path.join(out, "model.onnx")
    tmp = path + ".full"
    model = model.eval()
    kw = {}
    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        # The TorchScript exporter, as gen_models used: it traces the aten
        # ops in the order eager PyTorch runs them (newer PyTorch defaults
        # to the dynamo exporter, whose graph is decomposed differently).
        kw["dynamo"] = False
    with torch.no_grad():
        torch.onnx.export(model, (x,), tmp, opset_version=17, do_constant_folding=False,
                          training=torch.onnx.TrainingMode.EVAL, input_names=[in_name], **kw)
    m = onnx.load(tmp)
    os.remove(tmp)
    onnx.save_model(m, path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location="model.weights", size_threshold=0)
    os.remove(os.path.join(out, "model.weights"))  # keep shapes, drop the numbers
    g = onnx.load(path, load_external_data=False).graph
    print(f"{path}: {len(g.node)} nodes, input {in_name} {list(x.shape)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", nargs="?", default="resnet50", help="a torchvision.models name (default resnet50)")
    ap.add_argument("--hf", metavar="TYPE", help="a Hugging Face model type (gpt2, bert, ...) built from its default config instead")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="with --hf, override a config field (n_layer=6)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--image", type=int, default=224, help="image side for torchvision models")
    ap.add_argument("--seq", type=int, default=128, help="sequence length for --hf models")
    ap.add_argument("--optimizer", choices=["adam", "sgd", "momentum"], default="adam",
                    help="give opplace profile the same --optimizer when it is momentum (the trace names SGD for both)")
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--warmup", type=int, default=5, help="untimed training steps before the profiled one")
    ap.add_argument("--bf16", action="store_true", help="torch.autocast(bfloat16) around the forward and loss")
    ap.add_argument("--device", default="cuda", help="cuda (default) or cpu for a dry run without a GPU")
    ap.add_argument("--out", default="gpu_calibrate", help="output folder")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)

    model, x, y, loss_fn, in_name = build(args)
    # The exporter traces the same forward, in the order the profiled step
    # runs its aten ops: opplace aligns the two by that order.
    export(model, x, in_name, args.out)

    dev = torch.device(args.device)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cudnn.benchmark = True  # warm-up picks the kernels the profiled step runs
    model = model.to(dev).train()
    x, y = x.to(dev), y.to(dev)
    if args.optimizer == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9 if args.optimizer == "momentum" else 0)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=args.bf16):
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    for _ in range(args.warmup):
        step()
    sync()

    from torch.profiler import ProfilerActivity, profile, schedule
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    trace = os.path.join(args.out, "trace.json")
    # One warm-up step inside the profiler (its events are dropped), then the
    # recorded one, a ProfilerStep#N range in the trace.
    with profile(activities=acts, record_shapes=True, schedule=schedule(wait=0, warmup=1, active=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(trace)) as prof:
        for _ in range(2):
            step()
            sync()
            prof.step()
    print(f"{trace}: one training step of {args.hf or args.model}, batch {args.batch}, "
          f"{'bf16 autocast' if args.bf16 else 'float32'}, {args.optimizer}, on {torch.cuda.get_device_name() if dev.type == 'cuda' else 'cpu'}")
    opt_flag = " --optimizer momentum" if args.optimizer == "momentum" else ""
    if args.bf16:
        opt_flag += " --precision amp-bf16"
    plan_flag = " --precision amp-bf16" if args.bf16 else ""
    print("next:\n  opplace profile {0}/model.onnx --import {1}{2} --device-type DEVICE_TYPE --out gpu.json\n"
          "  opplace plan {0}/model.onnx --cluster CLUSTER.yaml --profile gpu.json --optimizer {3}{4}"
          .format(args.out, trace, opt_flag, args.optimizer, plan_flag))


if __name__ == "__main__":
    main()
