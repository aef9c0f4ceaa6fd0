"""The model snapshot layer: a pinned Hugging Face revision downloaded, proven and published on storage."""
