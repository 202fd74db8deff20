# Excerpt of vllm/v1/attention/backends/triton_attn.py from vllm-0.10.2-cp38-abi3-manylinux1_x86_64.whl (PyPI, sha256 e0cba6110483d9bf25c4402d8655cf78d366dd13e4155210980cc3480ed98b7b).
# Only the parts tests/unit/test_vllm_pin.py needs; each block keeps its original lines, numbered.
# line 252:
self.fp8_dtype = current_platform.fp8_dtype()
# line 361:
key_cache = key_cache.view(self.fp8_dtype)
# line 362:
value_cache = value_cache.view(self.fp8_dtype)
# line 141:
class TritonAttentionBackend(AttentionBackend):
    # lines 164-166:
    @staticmethod
    def get_name() -> str:
        return "TRITON_ATTN_VLLM_V1"
    # lines 149-151:
    @classmethod
    def get_supported_head_sizes(cls) -> list[int]:
        return [32, 64, 96, 128, 160, 192, 224, 256]
