"""The in-container runtime (stdlib only): see :mod:`bai_jupyter.runtime.bai_runtime`.

This directory is mounted read-only at ``/opt/bai-runtime`` and started as
``python3 /opt/bai-runtime``; the local backend runs the same directory natively.
Nothing here may import from the rest of ``bai_jupyter``.
"""
