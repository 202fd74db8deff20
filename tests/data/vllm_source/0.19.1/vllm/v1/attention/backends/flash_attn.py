# Excerpt of vllm/v1/attention/backends/flash_attn.py from vllm-0.19.1-cp38-abi3-manylinux_2_31_x86_64.whl (PyPI, sha256 71a87f46cafab4489c69a5c5c83b870d0235e5694d8222303d460576293dc719).
# Only the parts tests/unit/test_vllm_pin.py needs; each block keeps its original lines, numbered.
# line 62:
class FlashAttentionBackend(AttentionBackend):
    # lines 93-95:
    @staticmethod
    def get_name() -> str:
        return "FLASH_ATTN"
    # lines 178-180:
    @classmethod
    def supports_compute_capability(cls, capability: DeviceCapability) -> bool:
        return capability >= DeviceCapability(8, 0)
