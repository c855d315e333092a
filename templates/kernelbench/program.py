# {{name}}: ModelNew for the KernelBench-format problem of reference.py, evolved by braid.
#
# evaluate.py (frozen) imports this file, builds ModelNew(*get_init_inputs()), compares it with
# reference.py's Model on fresh random inputs and times it against the eager Model and
# torch.compile(Model); combined_score = eager time / ModelNew time.
#
# Only the evolve block changes during a search. The seed's ModelNew is the reference's Model
# under a new name: correct, and about as fast as eager PyTorch (score ~1.0); no CUDA is
# compiled while FUNCTIONS is empty. An LLM operator (`braid evolve --llm MODEL`) replaces its
# PyTorch operations with CUDA kernels: kernels go into CUDA_SOURCE, their C++ declarations into
# CPP_SOURCE, their names into FUNCTIONS, and ModelNew calls them as `kernels.<name>(...)`.
import hashlib

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline


def load_kernels(cuda_source, cpp_source, functions):
    """The inline extension of these sources (torch.utils.cpp_extension.load_inline), built once
    per distinct source text; None while `functions` is empty."""
    if not functions:
        return None
    digest = hashlib.sha256("\0".join([cuda_source, cpp_source] + list(functions)).encode()).hexdigest()[:16]
    return load_inline(name="braid_kb_" + digest, cpp_sources=cpp_source, cuda_sources=cuda_source,
                       functions=list(functions), extra_cuda_cflags=["-O3"], verbose=False)


# The problem's own module-level code (imports, constants, helpers), as in reference.py.
{{problem_context}}

# EVOLVE-BLOCK-START kernels
CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
"""
CPP_SOURCE = ""
FUNCTIONS = []

kernels = load_kernels(CUDA_SOURCE, CPP_SOURCE, FUNCTIONS)


{{model_new}}
# EVOLVE-BLOCK-END
