#!/usr/bin/python3
"""Export the held-out models of the ONNX Runtime accuracy bench.

Same method as ../shared/models/gen_models.py (torch.onnx, opset 17, no
constant folding, weights written as external data and then deleted), for
architectures none of opplace's tests use, so the bench can report error on
models no calibration or test has seen.  Run with Debian's python3-torch and
python3-torchvision:

    /usr/bin/python3 scripts/export_heldout.py testdata/models/heldout
"""
import os, sys
import torch, torchvision

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "shared", "models"))
import gen_models as gm  # noqa: E402

def tv(name, **kw):
    return getattr(torchvision.models, name)(weights=None, **kw)

img = lambda: (torch.randn(1, 3, 224, 224),)
HELDOUT = {
    "resnet18":        (lambda: tv("resnet18"), img),
    "densenet121":     (lambda: tv("densenet121"), img),
    "efficientnet_b0": (lambda: tv("efficientnet_b0"), img),
    "squeezenet1_1":   (lambda: tv("squeezenet1_1"), img),
    "shufflenet_v2":   (lambda: tv("shufflenet_v2_x1_0"), img),
    "regnet_y_400mf":  (lambda: tv("regnet_y_400mf"), img),
    "convnext_tiny":   (lambda: tv("convnext_tiny"), img),
    # a GPT none of the shared models has the size of: 6 layers, d=512, 256 tokens
    "gpt_mini":        (lambda: gm.LM(8192, 512, 8, 6, 256, True), lambda: (torch.zeros(1, 256, dtype=torch.long),)),
}

# Exported in training mode, batch norms kept (the shared resnet50.onnx folds
# them, being an inference export): what a CNN's training step runs.
#   /usr/bin/python3 scripts/export_heldout.py testdata/models/train resnet50_bn
TRAINING = {
    "resnet50_bn":     (lambda: tv("resnet50"), lambda: (torch.randn(32, 3, 224, 224),)),
}

if __name__ == "__main__":
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    gm.MODELS.update(HELDOUT)
    gm.MODELS.update(TRAINING)
    gm.TRAIN_MODE.update(TRAINING)
    for n in sys.argv[2:] or HELDOUT:
        gm.export(n, out)
