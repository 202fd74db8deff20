# Excerpt of vllm/worker/model_runner.py from vllm-0.8.5.post1-cp38-abi3-manylinux1_x86_64.whl (PyPI, sha256 b7f0dbd46f82aac6b2e7489c2bbf1c90fdc2e56d3f1fff44549951db40814d5a).
# Only the parts tests/unit/test_vllm_pin.py needs; each block keeps its original lines, numbered.
# line 1620:
class ModelRunner(GPUModelRunnerBase[ModelInputForGPUWithSamplingMetadata]): ...
