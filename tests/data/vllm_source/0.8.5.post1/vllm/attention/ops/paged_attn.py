# Excerpt of vllm/attention/ops/paged_attn.py from vllm-0.8.5.post1-cp38-abi3-manylinux1_x86_64.whl (PyPI, sha256 b7f0dbd46f82aac6b2e7489c2bbf1c90fdc2e56d3f1fff44549951db40814d5a).
# Only the parts tests/unit/test_vllm_pin.py needs; each block keeps its original lines, numbered.
# line 35:
class PagedAttention:
    # lines 37-39:
    @staticmethod
    def get_supported_head_sizes() -> List[int]:
        return [32, 64, 80, 96, 112, 120, 128, 192, 256]
