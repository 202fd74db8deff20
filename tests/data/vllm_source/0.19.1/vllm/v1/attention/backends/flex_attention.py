# Excerpt of vllm/v1/attention/backends/flex_attention.py from vllm-0.19.1-cp38-abi3-manylinux_2_31_x86_64.whl (PyPI, sha256 71a87f46cafab4489c69a5c5c83b870d0235e5694d8222303d460576293dc719).
# Only the parts tests/unit/test_vllm_pin.py needs; each block keeps its original lines, numbered.
# line 75:
class FlexAttentionBackend(AttentionBackend):
    # lines 82-86:
    supported_kv_cache_dtypes: ClassVar[list[CacheDType]] = [
        "auto",
        "float16",
        "bfloat16",
    ]
    # lines 90-92:
    @staticmethod
    def get_name() -> str:
        return "FLEX_ATTENTION"
    # lines 126-128:
    @classmethod
    def get_supported_head_sizes(cls) -> list[int]:
        return []
