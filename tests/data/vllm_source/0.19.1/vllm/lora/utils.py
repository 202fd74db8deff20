# Excerpt of vllm/lora/utils.py from vllm-0.19.1-cp38-abi3-manylinux_2_31_x86_64.whl (PyPI, sha256 71a87f46cafab4489c69a5c5c83b870d0235e5694d8222303d460576293dc719).
# Only the parts tests/unit/test_vllm_pin.py needs; each block keeps its original lines, numbered.
# lines 50-65:
def get_captured_lora_counts(max_loras: int, specialize: bool) -> list[int]:
    """
    Returns num_active_loras values for cudagraph capture.

    When specialize=True: powers of 2 up to max_loras, plus max_loras + 1.
    When specialize=False: just [max_loras + 1].

    This is the single source of truth for LoRA capture cases, used by both
    CudagraphDispatcher and PunicaWrapperGPU.
    """
    if not specialize:
        return [max_loras + 1]

    return [
        n for n in range(1, max_loras + 2) if (n & (n - 1)) == 0 or n == max_loras + 1
    ]
