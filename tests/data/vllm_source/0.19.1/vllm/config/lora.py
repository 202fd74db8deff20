# Excerpt of vllm/config/lora.py from vllm-0.19.1-cp38-abi3-manylinux_2_31_x86_64.whl (PyPI, sha256 71a87f46cafab4489c69a5c5c83b870d0235e5694d8222303d460576293dc719).
# Only the parts tests/unit/test_vllm_pin.py needs; each block keeps its original lines, numbered.
# line 29:
class LoRAConfig:
    # line 34:
    max_loras: int = Field(default=1, ge=1)
    # line 65:
    specialize_active_lora: bool = False
