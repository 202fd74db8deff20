# Excerpt of vllm/config/scheduler.py from vllm-0.19.1-cp38-abi3-manylinux_2_31_x86_64.whl (PyPI, sha256 71a87f46cafab4489c69a5c5c83b870d0235e5694d8222303d460576293dc719).
# Only the parts tests/unit/test_vllm_pin.py needs; each block keeps its original lines, numbered.
# line 26:
class SchedulerConfig:
    # lines 259-278:
    def verify_max_model_len(self, max_model_len: int) -> Self:
        if (
            self.max_num_batched_tokens < max_model_len
            and not self.enable_chunked_prefill
        ):
            raise ValueError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) is "
                f"smaller than max_model_len ({max_model_len}). "
                "This effectively limits the maximum sequence length to "
                "max_num_batched_tokens and makes vLLM reject longer "
                "sequences. Please increase max_num_batched_tokens or "
                "decrease max_model_len."
            )

        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) must "
                "be greater than or equal to max_num_seqs "
                f"({self.max_num_seqs})."
            )
