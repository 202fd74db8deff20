# Excerpt of vllm/v1/attention/backends/flex_attention.py from vllm-0.10.2-cp38-abi3-manylinux1_x86_64.whl (PyPI, sha256 e0cba6110483d9bf25c4402d8655cf78d366dd13e4155210980cc3480ed98b7b).
# Only the parts tests/unit/test_vllm_pin.py needs; each block keeps its original lines, numbered.
# line 62:
class FlexAttentionBackend(AttentionBackend):
    # lines 73-75:
    @staticmethod
    def get_name() -> str:
        return "FLEX_ATTENTION"
    # lines 69-71:
    @classmethod
    def validate_head_size(cls, head_size: int) -> None:
        return  # FlexAttention supports any head size
