# Excerpt of vllm/v1/attention/backends/flashinfer.py from vllm-0.19.1-cp38-abi3-manylinux_2_31_x86_64.whl (PyPI, sha256 71a87f46cafab4489c69a5c5c83b870d0235e5694d8222303d460576293dc719).
# Only the parts tests/unit/test_vllm_pin.py needs; each block keeps its original lines, numbered.
# line 317:
class FlashInferBackend(AttentionBackend):
    # lines 335-337:
    @staticmethod
    def get_name() -> str:
        return "FLASHINFER"
    # lines 392-396:
    @classmethod
    def supports_compute_capability(cls, capability: DeviceCapability) -> bool:
        return capability >= DeviceCapability(7, 5) and capability <= DeviceCapability(
            12, 1
        )
