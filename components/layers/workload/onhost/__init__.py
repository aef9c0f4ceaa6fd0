"""Code that runs on the nodes inside the workload's Slurm jobs, never in the program: `gates.py`
judges a film with the runtime's pinned ffmpeg (it travels in the runtime archive), and the step
scripts beside it run the jobs' tasks.

Python 3 and its standard library only; nothing from `components`, `lab` or `policies`
(tests/unit/test_imports.py checks it).
"""
