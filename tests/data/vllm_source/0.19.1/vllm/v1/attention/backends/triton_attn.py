# Excerpt of vllm/v1/attention/backends/triton_attn.py from vllm-0.19.1-cp38-abi3-manylinux_2_31_x86_64.whl (PyPI, sha256 71a87f46cafab4489c69a5c5c83b870d0235e5694d8222303d460576293dc719).
# Only the parts tests/unit/test_vllm_pin.py needs; each block keeps its original lines, numbered.
# line 399:
self.fp8_dtype = current_platform.fp8_dtype()
# line 477:
key_cache = key_cache.view(self.fp8_dtype)
# line 478:
value_cache = value_cache.view(self.fp8_dtype)
# line 592:
key_cache = key_cache.view(self.fp8_dtype)
# line 593:
value_cache = value_cache.view(self.fp8_dtype)
# line 628:
key_cache = key_cache.view(self.fp8_dtype)
# line 629:
value_cache = value_cache.view(self.fp8_dtype)
# line 257:
class TritonAttentionBackend(AttentionBackend):
    # lines 264-271:
    supported_kv_cache_dtypes: ClassVar[list[CacheDType]] = [
        "auto",
        "float16",
        "bfloat16",
        "fp8",
        "fp8_e4m3",
        "fp8_e5m2",
    ]
    # lines 285-287:
    @staticmethod
    def get_name() -> str:
        return "TRITON_ATTN"
    # lines 326-328:
    @classmethod
    def supports_head_size(cls, head_size: int) -> bool:
        return head_size >= 32
    # lines 352-354:
    @classmethod
    def supports_compute_capability(cls, capability: DeviceCapability) -> bool:
        return True
