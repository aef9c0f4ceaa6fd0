"""TEST DOUBLE of the Hugging Face Hub (download API) for the real huggingface_hub client:
server.py (stdlib only; `python -m tests.doubles.hub`), model.py (writes a small real
diffusers-shaped model with safetensors)."""

from .server import HubDouble

__all__ = ["HubDouble"]
