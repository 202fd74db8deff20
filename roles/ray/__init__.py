"""The ray role: a Ray cluster of V100 boxes from the inventory (one head, workers), run from the locked vLLM venv,
so that one vLLM instance spans the boxes (pipeline parallel across them, tensor parallel inside each)."""
