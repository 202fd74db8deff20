# Excerpt of vllm/worker/model_runner.py from vllm-0.10.2-cp38-abi3-manylinux1_x86_64.whl (PyPI, sha256 e0cba6110483d9bf25c4402d8655cf78d366dd13e4155210980cc3480ed98b7b).
# Only the parts tests/unit/test_vllm_pin.py needs; each block keeps its original lines, numbered.
# line 1536:
class ModelRunner(GPUModelRunnerBase[ModelInputForGPUWithSamplingMetadata]): ...
