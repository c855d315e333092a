#!/usr/bin/env bash
# `braid init --kernelbench` on one GPU (issue 24 part 2), with the user's Python and PyTorch:
#   1. each example of examples/kernelbench/ is written into a temp folder and its evaluator
#      runs once on the seed: correct = true and a combined_score are expected;
#   2. bias_gelu with a hand-written CUDA kernel in the evolve block (load_inline): correct and
#      scored; the same kernel computing the wrong function: verify_failed; a CUDA syntax error:
#      build_failed.
#   3. with TEST_CLI (the test_cli binary) given: the seed through braid's own ExternalEvaluator
#      (KernelBenchInit.SeedScoresThroughBraidOnAGpu: sandbox off, memory limit, verdict channel).
# Usage: kernelbench_gpu_check.sh BRAID_BINARY SOURCE_DIR [TEST_CLI]. Exit 77 (skip, said on
# stdout) without a GPU or without PyTorch with CUDA; needs nvcc and ninja for step 2.
set -u
braid=${1:?braid binary}
src=${2:?source dir}
test_cli=${3:-}
python=${PYTHON:-python3}

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "SKIP: no NVIDIA GPU (nvidia-smi -L failed)"; exit 77
fi
if ! "$python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
  echo "SKIP: $python has no PyTorch with CUDA (import torch; torch.cuda.is_available())"; exit 77
fi

tmp=$(mktemp -d /tmp/braid_kernelbench_XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export TORCH_EXTENSIONS_DIR="$tmp/torch_extensions"  # fresh builds, the user's cache untouched
failures=0

# verdict DIR: prints "correct failure score feedback" from DIR/correct.json and metrics.json.
verdict() {
  "$python" - "$1" <<'EOF'
import json, os, sys
d = sys.argv[1]
c = json.load(open(os.path.join(d, "correct.json")))
m = json.load(open(os.path.join(d, "metrics.json"))) if os.path.exists(os.path.join(d, "metrics.json")) else {}
last_error = (c.get("error") or "").strip().splitlines()[-1:]
print("%s %s %s | %s | %s" % (str(c.get("correct")).lower(), c.get("failure", "-"), m.get("combined_score", "-"),
                              m.get("text_feedback", ""), "".join(last_error)[:300]))
EOF
}

# check NAME WORKLOAD PROGRAM EXPECT: runs the evaluator, compares the verdict's first words.
check() {
  local name=$1 wl=$2 program=$3 expect=$4 out="$tmp/out_$1"
  local t0=$SECONDS
  if ! (cd "$wl" && "$python" evaluate.py --program_path "$program" --results_dir "$out" --seed 1 > "$out.log" 2>&1); then
    echo "FAIL $name: the evaluator exited non-zero"; tail -20 "$out.log"; failures=$((failures + 1)); return
  fi
  local got; got=$(verdict "$out")
  case "$got" in
    "$expect"*) echo "ok   $name ($((SECONDS - t0)) s): $got" ;;
    *) echo "FAIL $name ($((SECONDS - t0)) s): expected '$expect...', got: $got"; failures=$((failures + 1)) ;;
  esac
}

# with_block WORKLOAD BLOCK_FILE OUT: the workload's program with its evolve block replaced.
with_block() {
  "$python" - "$1/program.py" "$2" "$3" <<'EOF'
import sys
text, block = open(sys.argv[1]).read(), open(sys.argv[2]).read()
start = text.index("# EVOLVE-BLOCK-START kernels\n") + len("# EVOLVE-BLOCK-START kernels\n")
end = text.index("# EVOLVE-BLOCK-END")
open(sys.argv[3], "w").write(text[:start] + block + text[end:])
EOF
}

echo "GPU: $(nvidia-smi -L | head -1); $("$python" -c 'import torch; print("torch", torch.__version__)')"
for example in bias_gelu row_softmax matmul_relu; do
  if ! "$braid" init "$tmp/$example" --kernelbench "$src/examples/kernelbench/$example.py" > "$tmp/init_$example.log" 2>&1; then
    echo "FAIL init $example"; cat "$tmp/init_$example.log"; failures=$((failures + 1)); continue
  fi
  check "seed:$example" "$tmp/$example" "$tmp/$example/program.py" "true - "
done

cat > "$tmp/gelu_block.py" <<'EOF'
CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <algorithm>
#include <cuda_runtime.h>

// y = gelu(x + bias[column]), exact (erf) GELU, one element per thread step.
__global__ void bias_gelu_kernel(const float* __restrict__ x, const float* __restrict__ bias,
                                 float* __restrict__ y, long total, long features) {
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < total; i += (long)gridDim.x * blockDim.x) {
    float v = x[i] + bias[i % features];
    y[i] = GELU_EXPR;
  }
}

torch::Tensor bias_gelu(torch::Tensor x, torch::Tensor bias) {
  TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat, "x must be float32 on the GPU");
  x = x.contiguous();
  bias = bias.contiguous();
  auto y = torch::empty_like(x);
  const long total = x.numel(), features = bias.numel();
  const int threads = 256;
  const long blocks = std::min<long>((total + threads - 1) / threads, 8L * 65535);
  bias_gelu_kernel<<<(unsigned)blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
      x.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(), total, features);
  return y;
}
"""
CPP_SOURCE = "torch::Tensor bias_gelu(torch::Tensor x, torch::Tensor bias);"
FUNCTIONS = ["bias_gelu"]

kernels = load_kernels(CUDA_SOURCE, CPP_SOURCE, FUNCTIONS)


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features) * 0.1)

    def forward(self, x):
        return kernels.bias_gelu(x, self.bias)

EOF
if [ -d "$tmp/bias_gelu" ]; then
  sed 's/GELU_EXPR/0.5f * v * (1.0f + erff(v * 0.70710678118654752f))/' "$tmp/gelu_block.py" > "$tmp/good.py"
  sed 's/GELU_EXPR/v/' "$tmp/gelu_block.py" > "$tmp/wrong.py"
  sed 's/GELU_EXPR/0.5f * v * (1.0f + erff(v * 0.7071f)/' "$tmp/gelu_block.py" > "$tmp/broken.py"  # unbalanced parenthesis
  for v in good wrong broken; do with_block "$tmp/bias_gelu" "$tmp/$v.py" "$tmp/bias_gelu_$v.py"; done
  check "cuda:bias_gelu" "$tmp/bias_gelu" "$tmp/bias_gelu_good.py" "true - "
  check "wrong:bias_gelu" "$tmp/bias_gelu" "$tmp/bias_gelu_wrong.py" "false verify_failed"
  check "broken:bias_gelu" "$tmp/bias_gelu" "$tmp/bias_gelu_broken.py" "false build_failed"
fi

if [ -n "$test_cli" ]; then
  # the test binary may have been built on another machine: it finds braid and this checkout here
  if BRAID_KERNELBENCH_GPU=1 BRAID_TEST_BIN="$braid" BRAID_TEST_SOURCE_DIR="$src" "$test_cli" --gtest_filter='KernelBenchInit.SeedScoresThroughBraidOnAGpu' > "$tmp/through_braid.log" 2>&1; then
    echo "ok   seed through braid: $(grep -o 'combined_score.*' "$tmp/through_braid.log" | head -1)"
  else
    echo "FAIL seed through braid's ExternalEvaluator"; tail -30 "$tmp/through_braid.log"; failures=$((failures + 1))
  fi
fi

if [ "$failures" -ne 0 ]; then echo "kernelbench GPU check: $failures failed"; exit 1; fi
echo "kernelbench GPU check: all passed"
