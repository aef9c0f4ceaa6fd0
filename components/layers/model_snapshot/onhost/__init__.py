"""Code that runs on the hosts, never in the program: `download.py` and `verify.py` are written
to the storage host (`File`s under the layer's home) and run there by the download unit, in the
layer's venv.

Python 3 and its standard library only, plus what downloader.txt installs into that venv
(huggingface_hub, for download.py); nothing from `components`, `lab` or `policies`
(tests/unit/test_imports.py checks it). `verify.py` also runs alone, copied anywhere.
"""
